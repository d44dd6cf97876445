"""evaluate.py's CTranslate2 options: ``--export-ctranslate2 DIR`` and ``--engine ctranslate2``.

Kept here so that evaluate.py only parses the options and dispatches; the scores and the JSON summary are
built by evaluation.result, as for the PyTorch evaluation (same sacreBLEU, chrF and exact match on the same
detokenized text).
"""

import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from data.corpora import read_tsv
from training.checkpoints import LoadedRun
from evaluation.result import scored_result
from export.ctranslate2 import (
    CTranslate2Translator,
    EngineError,
    export,
    length_penalty_note,
    temporary_export,
)

# Options of evaluate.py that need the per-head attention CTranslate2 does not return.
NEEDS_ATTENTION = ("attention_out", "head_importance", "prune_heads", "alignment")


def engine_option_error(args) -> str | None:
    """The one-line complaint about a combination of options the CTranslate2 path cannot honour, or None."""
    uses_engine = args.engine == "ctranslate2"
    if args.engine_model and not uses_engine:
        return "--engine-model needs --engine ctranslate2"
    if args.export_ctranslate2 and uses_engine:
        return (
            "--export-ctranslate2 only exports; evaluate with --engine ctranslate2 --engine-model DIR "
            "afterwards"
        )
    if not (uses_engine or args.export_ctranslate2):
        return None
    option = "--engine ctranslate2" if uses_engine else "--export-ctranslate2"
    for name in NEEDS_ATTENTION:
        if getattr(args, name) not in (None, False):
            return (f"--{name.replace('_', '-')} cannot be used with {option}: CTranslate2 returns no "
                    "per-head attention; use the PyTorch engine (the default) to look inside")
    if args.translate is not None:
        return f"--translate cannot be used with {option}; evaluate a split or --tsv file"
    if args.device not in ("auto", "cpu"):
        return f"--device {args.device} cannot be used with {option}: the CTranslate2 path runs on the CPU"
    if args.export_ctranslate2 and args.output:
        return "--output cannot be used with --export-ctranslate2, which only exports"
    return None


def export_run(args, run: LoadedRun) -> Path:
    """--export-ctranslate2 DIR: write the checkpoint's model (averaged, if asked) as a CTranslate2 model."""
    dm = run.datamodule
    return export(
        run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, args.export_ctranslate2,
        quantization=args.compute_type, overwrite=args.overwrite,
    )


def evaluate_with_engine(args, run: LoadedRun) -> dict:
    """--engine ctranslate2: translate the split or --tsv file with CTranslate2 and score it.

    Uses ``--engine-model DIR`` if given, else exports the checkpoint to a temporary folder first (not timed).
    """
    dm, model = run.datamodule, run.module.model
    pairs = read_tsv(args.tsv) if args.tsv else dm.pairs(args.split)
    if args.output and Path(args.output).exists() and not args.overwrite:
        raise EngineError(f"{args.output} exists; choose another name or pass --overwrite")
    note = length_penalty_note(args.beam_size, args.length_penalty)
    if note:
        print(note, file=sys.stderr)
    staging = None
    if args.engine_model:
        model_dir = Path(args.engine_model)
    else:
        staging = temporary_export(model, dm.src_tokenizer, dm.tgt_tokenizer)
        model_dir = Path(staging.name) / "model"
    try:
        translator = CTranslate2Translator(
            model_dir, dm.src_tokenizer, dm.tgt_tokenizer, model_max_len=model.config.max_len,
            compute_type=args.compute_type, threads=torch.get_num_threads(),
        )
        bar = tqdm(total=len(pairs), desc="translating (ctranslate2)", unit="sent", disable=args.quiet,
                   file=sys.stderr)
        start = time.perf_counter()
        hypotheses_ids = translator.translate(
            [p.source for p in pairs], beam_size=args.beam_size, length_penalty=args.length_penalty,
            batch_size=args.batch_size, max_len=args.max_len, progress=bar.update,
        )
        elapsed = time.perf_counter() - start
        bar.close()
    finally:
        if staging is not None:
            staging.cleanup()
    return {
        **scored_result(args, run, pairs, hypotheses_ids, seconds=elapsed, device="cpu"),
        "engine": "ctranslate2",
        "compute_type": args.compute_type,
        "engine_model": str(args.engine_model) if args.engine_model else None,
        "threads": torch.get_num_threads(),
    }
