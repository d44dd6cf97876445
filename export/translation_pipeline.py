"""``pipeline("translation", model=DIR, trust_remote_code=True)`` for a folder written by evaluate.py
--export-hf, which copies this file into it and names it in ``config.json``'s ``custom_pipelines``.

transformers 5 removed its ``translation`` pipeline; this one answers as 4.x's did: a text gives
``[{"translation_text": ...}]``, a list of texts one such entry per text, decoding with the folder's
``generation_config.json`` (greedy, as evaluate.py decodes) unless ``generate()`` keyword arguments are given.
It runs on transformers 4.x too, where this folder's pipeline replaces the built-in one (hence
``trust_remote_code=True`` there as well). Nothing of the project is imported: the folder stands alone.
"""

from transformers import Pipeline


class TranslationPipeline(Pipeline):
    """Text in, the model's translation out, through the folder's tokenizer and ``generate()``."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def _sanitize_parameters(self, **generate_kwargs):
        return {}, generate_kwargs, {}

    def preprocess(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"translation takes a text or a list of texts, got {type(text).__name__}")
        return self.tokenizer(text, return_tensors="pt")

    def _forward(self, inputs, **generate_kwargs):
        return {"output_ids": self.model.generate(**inputs, **generate_kwargs)}

    def postprocess(self, outputs) -> list[dict]:
        texts = self.tokenizer.batch_decode(outputs["output_ids"], skip_special_tokens=True)
        return [{"translation_text": text} for text in texts]  # one per returned sequence

    def __call__(self, texts, **kwargs):
        result = super().__call__(texts, **kwargs)
        if isinstance(texts, list) and all(len(entry) == 1 for entry in result):
            return [entry[0] for entry in result]  # one translation per text, as 4.x's pipeline
        return result
