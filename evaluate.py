"""Evaluate a trained checkpoint, or translate with it and look at its attention.

    python evaluate.py runs/toy/version_0/checkpoints/last.ckpt               # test split of its data
    python evaluate.py runs/toy/version_0                                     # the run's newest weights
    python evaluate.py CKPT --split val --beam-size 4 --output val.jsonl
    python evaluate.py CKPT --tsv my_test.tsv                                 # source<TAB>reference lines
    python evaluate.py CKPT --average-last 5                                  # average the last 5 checkpoints
    python evaluate.py CKPT --translate "the big dog sees a cat" --attention-out maps/
    python evaluate.py CKPT --head-importance --prune-heads 4 --alignment     # what the heads do (below)
    python evaluate.py CKPT --split val --alignment-methods                   # which explanation aligns best
    python evaluate.py CKPT --export-ctranslate2 ct2_model/                   # a CTranslate2 model folder
    python evaluate.py CKPT --engine ctranslate2 --beam-size 5                # score with CTranslate2

Head analysis, on a split or --tsv file (layers and heads count from 1):
    --head-importance  silences each attention head on its own (Michel et al. 2019) and reports how much
                       the teacher-forced loss per target token grows (the head's importance) and how BLEU
                       and exact match of greedy translations change; prints a table and writes JSON and
                       layers x heads heatmaps to --analysis-out.
    --prune-heads K    silences the K least important heads together (K heads, or a fraction of all heads
                       such as 0.25) and evaluates the model so pruned: the scores are the pruned model's.
                       Importance is the loss increase, measured on the same data.
    --alignment        alignment error rate of the best cross-attention head and of the head average,
                       against the gold word alignments of the toy tasks (toy, copy, reverse).

Explanation methods, on a split or --tsv file with gold alignments (toy, copy, reverse):
    --alignment-methods [METHOD ...]  AER and agreement per layer (and head) of cross-attention, Shift-Att,
                       value-weighted attention, encoder rollout, gradient x input and Integrated Gradients,
                       under forced decoding of the references; prints a table and one JSON table, and writes
                       pictures of the scores, of three sentences under every method and of their logit lens.

The last line printed is one JSON object with the scores, for scripts.
"""

import argparse
import json
import math
import os
import signal
import sys
import time
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from data.batching import check_fits
from data.corpora import CorpusError, read_tsv
from evaluation.ablation import AnalysisError
from evaluation.alignment import check_alignable, cross_attention_alignment
from evaluation.explanation_report import add_arguments as add_alignment_method_arguments
from evaluation.explanation_report import option_error as alignment_method_error
from evaluation.explanation_report import run_alignment_methods
from evaluation.head_masks import all_heads, head_mask
from evaluation.importance import importance_paths, measure_head_importance, write_importance
from evaluation.pruning import parse_prune_count, prune_count, pruned_loss
from evaluation.result import print_summary, scored_result, write_sentences
from evaluation.translate import translate, translate_hypotheses
from export.ctranslate2 import EngineError, import_ctranslate2
from export.engine import engine_option_error, export_run, translate_with_engine
from model.decoding import MAX_BEAM_SIZE
from training.checkpoints import (
    CheckpointError,
    UnknownSettingsWarning,
    average_state_dicts,
    last_checkpoints,
    load_run,
)
from training.run_checkpoints import newest_checkpoint


class OutputExistsError(Exception):
    """An output path that exists (without --overwrite) or cannot be written; the message is one line."""


class InputError(Exception):
    """Bad sentences given to --translate, or an option the run's data cannot honour; the message is one
    line."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkpoint",
        help="a .ckpt file written by train.py, or a run folder: its newest weights (last.ckpt, or "
        "interrupted.ckpt when a stopped run saved later ones; see training/run_checkpoints.py)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--split", choices=("val", "test"), default="test", help="split of the run's data (default: test)"
    )
    source.add_argument("--tsv", help="evaluate on this file of source<TAB>reference lines instead")
    source.add_argument(
        "--translate", metavar="TEXT", help="translate TEXT (or '-': one sentence per line on stdin)"
    )
    parser.add_argument("--beam-size", type=int, default=1, help="1 decodes greedily (default: 1)")
    parser.add_argument(
        "--length-penalty", type=_finite_float, default=0.6, help="GNMT length penalty alpha (default: 0.6)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument(
        "--max-len", type=int, default=None,
        help="most tokens to generate per sentence (default: the run's decode_max_len, else twice the source "
        "length + 10)",
    )
    parser.add_argument(
        "--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)"
    )
    parser.add_argument("--output", help="write one JSON line per sentence to this .jsonl file")
    parser.add_argument(
        "--average-last", type=int, metavar="K", help="average the weights of the run's last K checkpoints"
    )
    parser.add_argument(
        "--attention-out", metavar="DIR", help="with --translate: write attention PNGs and an HTML head view"
    )
    parser.add_argument("--data-path", help="corpus folder, if it moved since training")
    parser.add_argument(
        "--test-split", metavar="NAME", help="another test set of the corpus, e.g. test2017 or mscoco2017"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    engine = parser.add_argument_group(
        "CTranslate2 (optional: pip install ctranslate2; no per-head attention)"
    )
    engine.add_argument(
        "--export-ctranslate2", metavar="DIR", help="write the model as a CTranslate2 model folder"
    )
    engine.add_argument(
        "--engine", choices=("pytorch", "ctranslate2"), default="pytorch",
        help="translate with this engine (default: pytorch); ctranslate2 runs on the CPU",
    )
    engine.add_argument("--engine-model", metavar="DIR", help="with --engine ctranslate2: reuse this export")
    engine.add_argument(
        "--compute-type", choices=("float32", "int8"), default="float32",
        help="CTranslate2 weights: float32 (default) or int8",
    )
    heads = parser.add_argument_group("head analysis (see above)")
    heads.add_argument(
        "--head-importance", action="store_true",
        help="loss, BLEU and exact-match change when each head alone is silenced",
    )
    heads.add_argument(
        "--importance-sentences", type=int, default=500, metavar="N",
        help="decode the first N sentences for the BLEU and exact-match changes (default: 500). They cost "
             "about 1 + number of heads greedy decodings of these sentences; the loss changes use every "
             "sentence and cost about 1 + number of heads teacher-forced passes, far less",
    )
    heads.add_argument(
        "--ablation-batch", type=int, default=256, metavar="ROWS",
        help="sentence copies in one forward pass: each batch runs ROWS // --batch-size ablations at once "
             "(default: 256)",
    )
    heads.add_argument(
        "--prune-heads", type=_prune_count, metavar="K",
        help="silence the K least important heads (or a fraction in (0, 1) of all heads) and evaluate so",
    )
    heads.add_argument(
        "--alignment", action="store_true",
        help="AER of the best cross-attention head and of the head average (toy, copy, reverse data)",
    )
    heads.add_argument(
        "--analysis-out", metavar="DIR",
        help="folder of the --head-importance files (default: <run>/analysis/<checkpoint name>)",
    )
    add_alignment_method_arguments(parser)
    args = parser.parse_args(argv)
    if args.attention_out and args.translate is None:
        parser.error("--attention-out needs --translate")
    counts = ("beam_size", "batch_size", "importance_sentences", "ablation_batch", "max_len", "average_last")
    for name in counts:  # max_len and average_last may be left out (None)
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.beam_size > MAX_BEAM_SIZE:
        parser.error(f"--beam-size must be at most {MAX_BEAM_SIZE}, got {args.beam_size}")
    if args.length_penalty < 0.0:  # beam search's early stop holds only for alpha >= 0
        parser.error(f"--length-penalty must be at least 0, got {args.length_penalty}")
    if args.test_split is not None and (other := _other_source(args)) is not None:
        parser.error(f"--test-split names the test set to read; it does not go with {other}")
    analysing = args.head_importance or args.prune_heads is not None or args.alignment
    if args.translate is not None and analysing:
        parser.error("--head-importance, --prune-heads and --alignment analyse a data set, not --translate")
    if (engine_error := engine_option_error(args)) is not None:
        parser.error(engine_error)
    # --alignment-methods: checked apart from the options above (evaluation.explanation_report).
    if (explanation_error := alignment_method_error(args)) is not None:
        parser.error(explanation_error)
    return args


def _finite_float(text: str) -> float:
    """A float option's value; inf and nan are refused, as the last line's JSON cannot hold them."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):  # float() reads "inf", "nan" and overflows such as "1e999" to inf
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _other_source(args: argparse.Namespace) -> str | None:
    """The option that reads something other than the test split, if one was given."""
    if args.tsv:
        return "--tsv"
    if args.translate is not None:
        return "--translate"
    return "--split val" if args.split == "val" else None


def _prune_count(text: str) -> int | float:
    try:
        return parse_prune_count(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise CheckpointError(f"--device {name}: not a device; use cpu, cuda, cuda:N or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise CheckpointError(f"--device {name}: evaluate.py runs on cpu, cuda or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise CheckpointError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CheckpointError(f"--device {name}: MPS is not available on this machine")
    return device


def check_new(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; choose another name or pass --overwrite")


def check_folder(folder: Path, option: str, given: Path | str) -> None:
    """Say at once if ``option``'s folder cannot be made (it is made only when files are written): it, or
    else its nearest existing parent, must be a folder one can write into. ``given`` is the option's value."""
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == Path(p.anchor or "."))
    if not existing.is_dir():
        raise OutputExistsError(f"{option} {given}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputExistsError(f"{option} {given}: {existing} is not writable")


def check_outputs(args) -> None:
    """Every output path checked before any work, so that no scores are lost after decoding. Needs the
    checkpoint file (``choose_checkpoint``): the analysis folder's default is named after it."""
    if args.output:
        output = Path(args.output)
        if output.is_dir():
            raise OutputExistsError(
                f"--output {output} is a folder; give a file name, such as {output / 'out.jsonl'}"
            )
        check_new(output, args.overwrite)
        check_folder(output.parent, "--output", output)
    for option, value in (("--attention-out", args.attention_out), ("--analysis-out", args.analysis_out)):
        if value:
            check_folder(Path(value), option, Path(value))
    if not args.analysis_out and (args.head_importance or args.alignment_methods is not None):
        folder = analysis_directory(args)
        check_folder(folder, "--analysis-out", f"{folder} (the default)")
    if args.export_ctranslate2:
        check_new(Path(args.export_ctranslate2), args.overwrite)


def _decoded_lines(stream) -> list[str]:
    """The lines of ``stream`` (bytes or text) as text; bytes that are not UTF-8 are a one-line InputError.

    A UTF-8 byte-order mark before the first line is dropped, as the TSV reader does.
    """
    lines = []
    for number, line in enumerate(stream, start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"--translate -: stdin line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} "
                    f"at byte {error.start + 1})"
                ) from None
        lines.append(line.removeprefix("\ufeff") if number == 1 else line)
    return lines


def _check_text(text: str, where: str) -> None:
    """Text from the command line holds lone surrogates where its bytes were not UTF-8 (PEP 383)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"code point U+{code:04X}"
        raise InputError(f"{where} is not UTF-8 text ({what} at character {error.start + 1})") from None


def read_sentences(text: str, stdin=None) -> list[str]:
    """The sentences of ``--translate TEXT``, or of stdin's lines for ``-``; an empty one, or one that is not
    UTF-8, is an error."""
    if text != "-":
        _check_text(text, "--translate: the sentence")
        if not text.strip():
            raise InputError(
                "--translate: the sentence is empty; give a sentence, or '-' to read lines from stdin"
            )
        return [text.strip()]
    stream = sys.stdin if stdin is None else stdin
    try:
        lines = _decoded_lines(getattr(stream, "buffer", stream))  # bytes where there are, to decode here
    except UnicodeDecodeError as error:  # a text stream that decodes itself
        raise InputError(f"--translate -: stdin is not UTF-8 text ({error.reason})") from None
    sentences = [line.strip() for line in lines]
    for number, sentence in enumerate(sentences, start=1):
        _check_text(sentence, f"--translate -: stdin line {number}")
        if not sentence:
            raise InputError(f"--translate -: stdin line {number} is empty; give one sentence per line")
    if not sentences:
        raise InputError("--translate -: stdin holds no sentence")
    return sentences


def run_translate(args, run, device, sentences: list[str]) -> None:
    dm, model = run.datamodule, run.module.model

    def where(index: int, side: str) -> tuple[str, None]:
        return ("--translate" if args.translate != "-" else f"stdin, sentence {index + 1}"), None

    encoded = dm.src_tokenizer.encode_batch(sentences)
    check_fits([(i, ids, []) for i, ids in enumerate(encoded)], model.config.max_len, where)
    out = Path(args.attention_out) if args.attention_out else None
    if out is not None:  # before translating: nothing printed, then refused
        for number in range(1, len(sentences) + 1):
            check_new(out / f"sentence_{number}", args.overwrite)
    hypotheses = translate_hypotheses(
        model, dm.src_tokenizer, dm.tgt_tokenizer, sentences, beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len,
    )
    for hypothesis in hypotheses:
        print(dm.tgt_tokenizer.decode(hypothesis.ids))
    if out is not None:
        from viz.export import export_attention  # matplotlib only when needed

        for number, (source, hypothesis) in enumerate(zip(sentences, hypotheses), start=1):
            folder = out / f"sentence_{number}"
            written = export_attention(
                model, dm.src_tokenizer, dm.tgt_tokenizer, source, hypothesis.ids, folder,
                finished=hypothesis.finished, overwrite=args.overwrite,
            )
            print(f"wrote {len(written)} files to {folder}", file=sys.stderr)


def analysis_directory(args) -> Path:
    """--analysis-out, or <run>/analysis/<checkpoint stem> where <run> holds the checkpoints/ folder."""
    if args.analysis_out:
        return Path(args.analysis_out)
    checkpoint = Path(args.checkpoint)
    folder = checkpoint.parent
    run_dir = folder.parent if folder.name == "checkpoints" else folder
    return run_dir / "analysis" / checkpoint.stem


def run_head_analysis(args, run, pairs) -> tuple[dict, list]:
    """--head-importance and --prune-heads: the importance of every head, and the heads to prune.

    Returns the keys they add to the result, and the heads to silence during the evaluation.
    """
    dm, model = run.datamodule, run.module.model
    total = len(all_heads(model.config))
    count = 0 if args.prune_heads is None else prune_count(args.prune_heads, total)  # checked before all else
    paths = None
    if args.head_importance:
        name = Path(args.tsv).stem if args.tsv else args.split
        paths = importance_paths(analysis_directory(args), name)
        for path in paths.values():
            check_new(path, args.overwrite)
    decode = min(args.importance_sentences, len(pairs)) if args.head_importance else 0
    bar = tqdm(total=len(pairs) + decode, desc="ablating heads", unit="sent", disable=args.quiet,
               file=sys.stderr)
    start = time.perf_counter()
    importance = measure_head_importance(
        model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, decode_sentences=decode,
        batch_size=args.batch_size, max_rows=args.ablation_batch, max_len=args.max_len, progress=bar.update,
    )
    bar.close()
    added: dict = {}
    if paths is not None:
        from viz.reports import draw_head_importance  # matplotlib only when needed

        about = {"checkpoint": args.checkpoint, "data": args.tsv or args.split,
                 "global_step": run.global_step, "seconds": time.perf_counter() - start}
        write_importance(importance, paths, about=about)
        draw_head_importance(importance, paths)
        print(importance.table())
        print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
        added["head_importance"] = str(paths["json"])
    pruned = []
    if args.prune_heads is not None:
        pruned = importance.ranking()[:count]
        added |= {"pruned_heads": [h.as_dict() for h in pruned], "num_heads": total,
                  "unpruned_nll_per_token": importance.baseline_loss}
    return added, pruned


def check_lengths(args, run, pairs, *, targets: bool) -> None:
    """Stop at the first pair the model cannot read, naming its file and line. Its reference counts only with
    ``targets`` (the head analyses read it teacher-forced); scoring compares references as text."""
    dm, max_len = run.datamodule, run.module.model.config.max_len
    if not args.tsv:
        dm.check_fits(max_len, (args.split,), targets=targets)
        return
    sources = dm.src_tokenizer.encode_batch([p.source for p in pairs])
    references = dm.tgt_tokenizer.encode_batch([p.target for p in pairs]) if targets else [[] for _ in pairs]
    check_fits(list(zip(range(len(pairs)), sources, references)), max_len, lambda i, side: (args.tsv, i + 1))


def run_evaluation(args, run, device) -> tuple[dict, list[dict]]:
    """The scores (with the head analyses asked for) and, for --output, each sentence's."""
    dm, model = run.datamodule, run.module.model
    pairs = read_tsv(args.tsv) if args.tsv else dm.pairs(args.split)
    analysing = args.head_importance or args.prune_heads is not None or args.alignment
    check_lengths(args, run, pairs, targets=analysing)
    if args.alignment:  # before any long computation
        check_alignable(pairs, dm.src_tokenizer, dm.tgt_tokenizer)
    added, pruned = {}, []
    if args.head_importance or args.prune_heads is not None:
        added, pruned = run_head_analysis(args, run, pairs)
    mask = head_mask(model.config, pruned, device=device) if pruned else None
    if args.prune_heads is not None:
        added["nll_per_token"] = pruned_loss(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, pruned, batch_size=args.batch_size
        )
    bar = tqdm(total=len(pairs), desc="translating", unit="sent", disable=args.quiet, file=sys.stderr)
    start = time.perf_counter()
    hypotheses_ids = translate(
        model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs], beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len,
        head_mask=mask, progress=bar.update,
    )
    elapsed = time.perf_counter() - start
    bar.close()
    result, sentences = scored_result(args, run, pairs, hypotheses_ids, seconds=elapsed, device=str(device))
    if args.alignment:
        report = cross_attention_alignment(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, batch_size=args.batch_size, silenced=pruned
        )
        added["alignment"] = report.as_dict()
    return {**result, **added, "engine": "pytorch"}, sentences


def run_explanations(args, run) -> dict:
    """--alignment-methods: every explanation method scored against the gold alignments of the data."""
    from viz.reports import draw_alignment_methods  # matplotlib only when needed

    pairs = read_tsv(args.tsv) if args.tsv else run.datamodule.pairs(args.split)
    check_lengths(args, run, pairs, targets=True)
    directory = analysis_directory(args)
    report = run_alignment_methods(args, run, pairs, directory, check_new)
    others = [*report.lens_files, *draw_alignment_methods(report)]
    print(f"wrote {report.path('.json')} and {len(others)} other files to {directory}", file=sys.stderr)
    return report.result


def choose_checkpoint(args) -> None:
    """A run folder given as the checkpoint becomes the file of its newest weights (printed)."""
    if Path(args.checkpoint).is_dir():
        args.checkpoint = str(newest_checkpoint(args.checkpoint))
        print(f"using {args.checkpoint}", file=sys.stderr)


def load(args, device: torch.device):
    """The run of ``args.checkpoint`` (its weights averaged with --average-last); a checkpoint's unknown
    settings are printed as one-line warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownSettingsWarning)
        state_dict = None
        if args.average_last:
            paths = last_checkpoints(args.checkpoint, args.average_last)
            state_dict = average_state_dicts(paths)
            print(f"averaging {len(paths)} checkpoints: {', '.join(p.name for p in paths)}", file=sys.stderr)
        run = load_run(
            args.checkpoint,
            state_dict=state_dict,
            data_path=args.data_path,
            test_split=args.test_split,
            device=str(device),
        )
    for warning in caught:
        if issubclass(warning.category, UnknownSettingsWarning):
            print(f"warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    check_finite(run, args.checkpoint)
    return run


def check_finite(run, checkpoint: str) -> None:
    """A diverged run's weights hold NaN: its translations, scores and attention maps would be noise (and the
    maps cannot be drawn), so none are made."""
    for name, value in run.module.state_dict().items():
        if value.is_floating_point() and not value.isfinite().all():
            raise CheckpointError(
                f"{checkpoint}: {name} holds NaN or infinite weights (the run diverged?); use an earlier "
                "checkpoint"
            )


def check_test_split(args, run) -> None:
    """--test-split chooses among the test files of a corpus on disk; the toy tasks and SCAN have one."""
    dataset = run.datamodule.dataset
    if args.test_split is not None and dataset not in ("multi30k", "tsv"):
        raise InputError(
            f"--test-split {args.test_split}: the run's {dataset} data has a single test set; --test-split "
            "is for multi30k and tsv corpora"
        )


def run_engine_evaluation(args, run) -> tuple[dict, list[dict]]:
    """--engine ctranslate2: the split or --tsv file translated by CTranslate2 (export/engine.py), scored here
    as the PyTorch engine's translations are."""
    dm = run.datamodule
    pairs = read_tsv(args.tsv) if args.tsv else dm.pairs(args.split)
    done = translate_with_engine(
        args, run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs]
    )
    ids, seconds = done.hypotheses_ids, done.seconds
    result, sentences = scored_result(args, run, pairs, ids, seconds=seconds, device="cpu")
    return {**result, **done.settings}, sentences


def write_output(path: str, sentences: list[dict]) -> int:
    """--output, after the scores are printed: a failed write (a full disk) costs the file, not the scores."""
    try:
        write_sentences(Path(path), sentences)
    except OSError as error:
        print(f"error: --output {path}: {error.strerror or error}; it was not written", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.engine == "ctranslate2" or args.export_ctranslate2:
            import_ctranslate2()  # before loading anything
        choose_checkpoint(args)
        check_outputs(args)
        device = resolve_device(args.device)
        sentences = read_sentences(args.translate) if args.translate is not None else []
        run = load(args, device)
        check_test_split(args, run)
        if args.max_len is None:  # the run's own limit, if it set one (SCAN does)
            args.max_len = run.module.hparams.get("decode_max_len")
        if args.translate is not None:
            run_translate(args, run, device, sentences)
            return 0
        if args.alignment_methods is not None:
            print(json.dumps(run_explanations(args, run)))
            return 0
        if args.export_ctranslate2:
            dm = run.datamodule
            written = export_run(args, run.module.model, dm.src_tokenizer, dm.tgt_tokenizer)
            print(f"wrote a CTranslate2 model to {written}", file=sys.stderr)
            return 0
        if args.engine == "ctranslate2":
            result, scored_sentences = run_engine_evaluation(args, run)
        else:
            result, scored_sentences = run_evaluation(args, run, device)
    except (
        CheckpointError,
        CorpusError,
        OutputExistsError,
        AnalysisError,
        EngineError,
        InputError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout's reader left (| head): not an error of ours; see the end of the file
        raise
    except OSError as error:  # a file that vanished, a full disk, no permission: one line, no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    print_summary(result)
    print(json.dumps(result), flush=True)
    return write_output(args.output, scored_sentences) if args.output else 0


def run_quietly_into_a_closed_pipe() -> int:
    """main(), ended the Unix way when stdout's reader stops early (``evaluate.py CKPT | head -1``): no
    traceback, and the status a shell reports for a tool killed by SIGPIPE (128 + 13 = 141), as ``cat`` or
    ``grep`` give in its place; the Python docs' exit status 1 would read as an error of evaluate.py, and
    0 would hide that the output was cut."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe is found here, where it can be caught, rather than at exit
    except BrokenPipeError:
        # Python flushes stdout again at exit; pointed at /dev/null, that flush cannot fail and print.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


if __name__ == "__main__":
    sys.exit(run_quietly_into_a_closed_pipe())
