"""evaluate.py's CTranslate2 options: ``--export-ctranslate2 DIR`` and ``--engine ctranslate2``.

Kept here so that evaluate.py only parses the options (refusing those CTranslate2 cannot honour) and
dispatches. This module only translates: evaluate.py scores the translations with evaluation.result, as for
the PyTorch engine (same sacreBLEU, chrF and exact match on the same detokenized text), so that export/
depends on the model and the tokenizers, never on evaluation/.
"""

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from data.tokenizer import Tokenizer
from export.ctranslate2 import (
    CTranslate2Translator,
    EngineError,
    export,
    length_penalty_note,
    temporary_export,
)
from model import Transformer


def export_run(args, model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> Path:
    """--export-ctranslate2 DIR: write the checkpoint's model (averaged, if asked) as a CTranslate2 model."""
    return export(
        model, src_tokenizer, tgt_tokenizer, args.export_ctranslate2,
        quantization=args.compute_type, overwrite=args.overwrite,
    )


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
    args, model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, sources: list[str]
) -> EngineTranslation:
    """--engine ctranslate2: translate ``sources`` (the split or --tsv file) with CTranslate2.

    Uses ``--engine-model DIR`` if given, else exports ``model`` to a temporary folder first (not timed).
    """
    if args.output and Path(args.output).exists() and not args.overwrite:
        raise EngineError(f"{args.output} exists; choose another name or pass --overwrite")
    note = length_penalty_note(args.beam_size, args.length_penalty)
    if note:
        print(note, file=sys.stderr)
    staging = None
    if args.engine_model:
        model_dir = Path(args.engine_model)
    else:
        staging = temporary_export(model, src_tokenizer, tgt_tokenizer)
        model_dir = Path(staging.name) / "model"
    try:
        translator = CTranslate2Translator(
            model_dir, src_tokenizer, tgt_tokenizer, model_max_len=model.config.max_len,
            compute_type=args.compute_type, threads=torch.get_num_threads(),
        )
        bar = tqdm(total=len(sources), desc="translating (ctranslate2)", unit="sent", disable=args.quiet,
                   file=sys.stderr)
        start = time.perf_counter()
        hypotheses_ids = translator.translate(
            sources, beam_size=args.beam_size, length_penalty=args.length_penalty,
            batch_size=args.batch_size, max_len=args.max_len, progress=bar.update,
        )
        elapsed = time.perf_counter() - start
        bar.close()
    finally:
        if staging is not None:
            staging.cleanup()
    settings = {
        "engine": "ctranslate2",
        "compute_type": args.compute_type,
        "engine_model": str(args.engine_model) if args.engine_model else None,
        "threads": torch.get_num_threads(),
    }
    return EngineTranslation(hypotheses_ids, elapsed, settings)
