"""What evaluate.py's subcommands share: the parent parsers of their common options, the option types that
argparse checks, and the model each one loads, said on stderr as it loads.

A subcommand module composes its parser from these parents and adds only its own options, so that an option
it would ignore is one argparse does not know ("unrecognized arguments"), never a pair refused by hand.
"""

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from tqdm import tqdm

from evaluation.loading import choose_checkpoint, imported_run, load
from evaluation.pruning import parse_prune_count
from evaluation.translate import Decoding
from export.huggingface import import_transformers
from model.decoding import MAX_BEAM_SIZE
from training.checkpoints import LoadedRun


def say(line: str) -> None:
    """A line for the person at the terminal (stderr: stdout holds the results, for scripts)."""
    print(line, file=sys.stderr)


@contextmanager
def progress_bar(description: str, total: int, quiet: bool) -> Iterator[Callable[[int], object]]:
    """A progress bar on stderr, unless ``quiet``; yields what the computation calls with each count done.
    It shows from the first count done after a second: a refusal of the computation's own checks, made
    before any count, is its one line, and work of less than a second draws no bar."""
    bar = tqdm(total=total, desc=description, unit="sent", disable=quiet, file=sys.stderr, delay=1.0)
    try:
        yield bar.update
    finally:
        bar.close()


# -- option types: argparse says "argument --max-len: must be at least 1, got 0" ---------------------------


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer option's type: from ``low`` up to ``high``, if given."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def finite_float(text: str) -> float:
    """A float option's value; inf and nan are refused, as the last line's JSON cannot hold them."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):  # float() reads "inf", "nan" and overflows such as "1e999" to inf
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def non_negative(text: str) -> float:
    """--length-penalty: beam search's early stop needs a penalty of at least 0."""
    value = finite_float(text)
    if value < 0.0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def share(text: str) -> float:
    """A share of a row's weight, in (0, 1]."""
    value = finite_float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def prune_option(text: str) -> int | float:
    """--prune-heads K: a count of heads, or a fraction of them."""
    try:
        return parse_prune_count(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# -- parent parsers --------------------------------------------------------------------------------------


def parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def model_parent(*, hf: bool = True) -> argparse.ArgumentParser:
    """MODEL (a checkpoint or a run folder), the checkpoints to average and where the run's data moved; with
    ``hf``, --hf: MODEL is a transformers Marian model, which has neither checkpoints nor data."""
    model = parent()
    model.add_argument(
        "model", metavar="MODEL",
        help="a .ckpt file written by train.py, or a run folder: its newest weights (last.ckpt, or "
             "interrupted.ckpt when a stopped run saved later ones; see training/checkpoints.py)"
             + ("; with --hf, a transformers Marian model" if hf else ""),
    )
    run = model.add_mutually_exclusive_group() if hf else model
    if hf:
        run.add_argument(
            "--hf", action="store_true",
            help="MODEL is a transformers Marian model (a save_pretrained folder, or a Hub name such as "
                 "Helsinki-NLP/opus-mt-de-en with a network), imported with its SentencePiece tokenizer "
                 "(pip install -e .[hf]); it brings no data: give --tsv FILE or a gold set",
        )
    run.add_argument("--average-last", type=whole(1), metavar="K",
                     help="average the weights of the run's last K checkpoints")
    run.add_argument("--data-path", help="the run's corpus folder (for Tatoeba data: the file), if it moved "
                                         "since training")
    return model


def decoding_parent() -> argparse.ArgumentParser:
    """How sentences are translated (``evaluation.translate.Decoding``)."""
    parser = parent()
    decoding = parser.add_argument_group("decoding")
    decoding.add_argument("--beam-size", type=whole(1, MAX_BEAM_SIZE), default=Decoding.beam_size,
                          help="1 decodes greedily (default: 1)")
    decoding.add_argument("--length-penalty", type=non_negative, default=Decoding.length_penalty,
                          help=f"GNMT length penalty alpha (default: {Decoding.length_penalty})")
    decoding.add_argument("--batch-size", type=whole(1), default=Decoding.batch_size,
                          help=f"sentences per batch (default: {Decoding.batch_size})")
    decoding.add_argument("--max-len", type=whole(1), default=None,
                          help="most tokens to generate per sentence (default: the run's decode_max_len, "
                               "else twice the source length + 10)")
    return parser


def device_parent() -> argparse.ArgumentParser:
    device = parent()
    device.add_argument("--device", default="auto",
                        help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    return device


def quiet_parent() -> argparse.ArgumentParser:
    quiet = parent()
    quiet.add_argument("--quiet", action="store_true", help="no progress bar")
    return quiet


def gold_parent() -> argparse.ArgumentParser:
    """The files of a human gold set beside --gold-alignments LINKS (``check_gold``)."""
    parser = parent()
    gold = parser.add_argument_group(
        "a gold set (--gold-alignments; docs/explanations.md, \"Scoring word alignments\")"
    )
    gold.add_argument("--gold-sentences", nargs="+", metavar="FILE",
                      help="the gold pairs: 'source ||| target' lines, or two line-aligned files (source, "
                           "then target); the links index their whitespace-separated words, which the model "
                           "reads joined by spaces")
    gold.add_argument("--gold-zero-based", action="store_true",
                      help="the links count words from 0 (default: from 1, as the KFTT and RWTH sets do)")
    gold.add_argument("--gold-direction", choices=("auto", "forward", "reversed"), default="auto",
                      help="auto (default): the gold's direction from file names such as ja-en.gold against "
                           "the run's source and target languages, else as given; reversed: swap its sides "
                           "for a model that translates the other way; forward: as given")
    return parser


def check_gold(args: argparse.Namespace, *others: str) -> str | None:
    """What is wrong with the gold set's options: --gold-alignments needs one or two --gold-sentences files,
    and the options about a gold set (the parent's, and ``others``) need --gold-alignments."""
    if args.gold_alignments is not None:
        if args.gold_sentences is None or len(args.gold_sentences) > 2:
            return ("--gold-alignments needs --gold-sentences FILE (source ||| target lines) or "
                    "--gold-sentences SOURCE TARGET (two line-aligned files)")
        return None
    given = {"gold_sentences": args.gold_sentences is not None, "gold_zero_based": args.gold_zero_based,
             "gold_direction": args.gold_direction != "auto"}
    given |= {name: getattr(args, name) is not None for name in others}
    named = [name for name, value in given.items() if value]
    return f"--{named[0].replace('_', '-')} needs --gold-alignments" if named else None


# -- the model ---------------------------------------------------------------------------------------------


def checkpoint_of(args: argparse.Namespace) -> str | None:
    """The checkpoint file MODEL names (a run folder: its newest weights, said), or None where --hf makes
    MODEL a transformers model (whose package is checked here, before anything else)."""
    if getattr(args, "hf", False):
        import_transformers()
        return None
    chosen = choose_checkpoint(args.model)
    if chosen != args.model:
        say(f"using {chosen}")
    return chosen


def load_model(args: argparse.Namespace, checkpoint: str | None, device: torch.device) -> LoadedRun:
    """The run of ``checkpoint`` (``checkpoint_of``), its weights averaged if asked, or the transformers
    model MODEL names, as a run of this project's."""
    if checkpoint is None:
        from export.marian import load_marian  # transformers only when needed

        imported = load_marian(args.model)
        return imported_run(
            imported.settings(), imported.state_dict, imported.src_tokenizer, imported.tgt_tokenizer,
            source_lang=imported.source_lang, target_lang=imported.target_lang, device=device,
        )
    run, notes = load(checkpoint, average_last=args.average_last, data_path=args.data_path,
                      test_split=getattr(args, "test_split", None), device=device)
    for note in notes:
        say(note)
    return run


def decoding(args: argparse.Namespace, run: LoadedRun) -> Decoding:
    """The decoding options, with the run's own length limit where --max-len is not given (SCAN sets one)."""
    max_len = args.max_len if args.max_len is not None else run.module.hparams.get("decode_max_len")
    return Decoding(args.beam_size, args.length_penalty, args.batch_size, max_len)
