"""``pipeline("translation", model=DIR, trust_remote_code=True)`` for a folder written by evaluate.py
export-hf, which copies this file into it and names it in ``config.json``'s ``custom_pipelines``.

transformers 5 removed its ``translation`` pipeline; this one answers as 4.x's did: a text gives
``[{"translation_text": ...}]``, a list of texts one such entry per text (an empty list, none), decoding with
the folder's ``generation_config.json`` (greedy, as evaluate.py decodes) unless ``generate()`` keyword
arguments are given. As in 4.x, ``return_tensors=True`` gives ``{"translation_token_ids": ...}`` instead of
the text, ``return_text`` and ``clean_up_tokenization_spaces`` are taken, and ``src_lang``/``tgt_lang`` are
taken and ignored: the model translates one language pair. A text longer than the model's positions is cut to
them, with a warning (``truncation=False`` refuses it instead, in one line); 4.x left it whole by default, and
a Marian model then failed deep inside its position table.

It runs on transformers 4.x too, where this folder's pipeline replaces the built-in one (hence
``trust_remote_code=True`` there as well). Nothing of the project is imported: the folder stands alone.
"""

import warnings

from transformers import Pipeline


class TranslationPipeline(Pipeline):
    """Text in, the model's translation out, through the folder's tokenizer and ``generate()``."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def _sanitize_parameters(self, return_tensors=None, return_text=None, clean_up_tokenization_spaces=None,
                             truncation=None, src_lang=None, tgt_lang=None, **generate_kwargs):
        preprocess, postprocess = {}, {}
        if truncation is not None:
            preprocess["truncation"] = truncation
        if return_tensors is not None or return_text is not None:
            # 4.x: return_tensors=True gives the token ids, unless return_text is asked for as well.
            postprocess["tensors"] = bool(return_tensors) and not return_text
        if clean_up_tokenization_spaces is not None:
            postprocess["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess, generate_kwargs, postprocess

    def max_positions(self) -> int:
        """The most source tokens the model reads (its position table)."""
        return self.model.config.max_position_embeddings

    def preprocess(self, text: str, truncation: bool = True):
        if not isinstance(text, str):
            raise TypeError(f"translation takes a text or a list of texts, got {type(text).__name__}")
        inputs = self.tokenizer(text, return_tensors="pt")
        length, limit = inputs["input_ids"].shape[-1], self.max_positions()
        if length > limit:
            if not truncation:
                raise ValueError(f"the text is {length} tokens long; the model reads at most {limit}")
            warnings.warn(f"a text of {length} tokens is cut to the model's {limit} (pass truncation=False "
                          "to refuse it instead)", stacklevel=2)
            inputs = self.tokenizer(text, return_tensors="pt", truncation=True, max_length=limit)
        return inputs

    def _forward(self, inputs, **generate_kwargs):
        return {"output_ids": self.model.generate(**inputs, **generate_kwargs)}

    def postprocess(self, outputs, tensors: bool = False, clean_up_tokenization_spaces: bool = False
                    ) -> list[dict]:
        if tensors:
            return [{"translation_token_ids": ids} for ids in outputs["output_ids"]]
        texts = self.tokenizer.batch_decode(outputs["output_ids"], skip_special_tokens=True,
                                            clean_up_tokenization_spaces=clean_up_tokenization_spaces)
        return [{"translation_text": text} for text in texts]  # one per returned sequence

    def __call__(self, texts, **kwargs):
        if isinstance(texts, list) and not texts:
            return []  # as 4.x's pipeline: no texts, no translations
        result = super().__call__(texts, **kwargs)
        if isinstance(texts, list) and all(len(entry) == 1 for entry in result):
            return [entry[0] for entry in result]  # one translation per text, as 4.x's pipeline
        return result
