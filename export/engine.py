"""``evaluate.py score-ctranslate2``: a split or --tsv file translated by CTranslate2.

This module only translates: evaluate.py scores the translations with evaluation.result, as for the PyTorch
engine (same sacreBLEU, chrF and exact match on the same detokenized text), so that export/ depends on the
model and the tokenizers, never on evaluation/.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from data.tokenizer import Tokenizer
from export.ctranslate2 import CTranslate2Translator, temporary_export
from model import Transformer


@dataclass(frozen=True)
class EngineTranslation:
    """What ``translate_with_engine`` returns; evaluate.py scores it.

    Attributes:
        hypotheses_ids: per source sentence, in input order, the target token ids of its translation (EOS
            excluded).
        seconds: how long translating took (the export to a temporary folder not included).
        settings: what the JSON result records about the engine: engine, compute_type, engine_model, threads.
    """

    hypotheses_ids: list[list[int]]
    seconds: float
    settings: dict


def translate_with_engine(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sources: list[str],
    *,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    batch_size: int = 64,
    max_len: int | None = None,
    compute_type: str = "float32",
    engine_model: str | None = None,
    progress: Callable[[int], object] | None = None,
) -> EngineTranslation:
    """Translate ``sources`` with CTranslate2, from the export in ``engine_model`` if given, else from
    ``model`` exported to a temporary folder first (not timed). ``progress`` is called with the sentences
    done."""
    staging = None
    if engine_model:
        model_dir = Path(engine_model)
    else:
        staging = temporary_export(model, src_tokenizer, tgt_tokenizer)
        model_dir = Path(staging.name) / "model"
    try:
        translator = CTranslate2Translator(
            model_dir, src_tokenizer, tgt_tokenizer, model_max_len=model.config.max_len,
            compute_type=compute_type, threads=torch.get_num_threads(),
        )
        start = time.perf_counter()
        hypotheses_ids = translator.translate(
            sources, beam_size=beam_size, length_penalty=length_penalty, batch_size=batch_size,
            max_len=max_len, progress=progress,
        )
        elapsed = time.perf_counter() - start
    finally:
        if staging is not None:
            staging.cleanup()
    settings = {
        "engine": "ctranslate2",
        "compute_type": compute_type,
        "engine_model": str(engine_model) if engine_model else None,
        "threads": torch.get_num_threads(),
    }
    return EngineTranslation(hypotheses_ids, elapsed, settings)
