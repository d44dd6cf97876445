"""Evaluate a trained checkpoint, or translate with it, explain it or export it: one subcommand each, its
options beside its runner in commands/. Without a subcommand, evaluate.py scores (``score``).

    python evaluate.py runs/toy/version_0/checkpoints/last.ckpt            # test split of its data
    python evaluate.py runs/toy/version_0                                  # the run's newest weights
    python evaluate.py CKPT --split val --beam-size 4 --output val.jsonl
    python evaluate.py CKPT --tsv my_test.tsv                              # source<TAB>reference lines
    python evaluate.py CKPT --average-last 5                               # average the last 5 checkpoints
    python evaluate.py CKPT --head-importance --prune-heads 4 --alignment  # what the heads do
    python evaluate.py score-ctranslate2 CKPT --beam-size 5                # score with CTranslate2
    python evaluate.py translate CKPT "the big dog sees a cat" --attention-out maps/
    python evaluate.py explain CKPT --split val                            # which explanation aligns best
    python evaluate.py explain CKPT --gold-alignments ja-en.gold --gold-sentences ja-en.src-tgt  # human gold
    python evaluate.py export-ctranslate2 CKPT ct2_model/                  # a CTranslate2 model folder
    python evaluate.py export-hf CKPT hf_model/                            # a transformers model folder
    python evaluate.py Helsinki-NLP/opus-mt-de-en --hf --tsv de_en.tsv     # a Marian (OPUS-MT) model
    python evaluate.py make-run Helsinki-NLP/opus-mt-de-en runs/opus/de_en --tsv de_en.tsv   # for the tab

Each subcommand has only the options it uses (``python evaluate.py SUBCOMMAND --help``); what it computes
and writes: docs/evaluating.md, docs/explanations.md, docs/ctranslate2.md and docs/huggingface.md. The last
line that score and explain print is one JSON object with the scores, for scripts.
"""

import argparse
import os
import signal
import sys

from commands import explain, export, make_run, score, translate
from data.corpora import CorpusError
from evaluation.ablation import AnalysisError
from evaluation.inputs import InputError, OutputExistsError
from export.ctranslate2 import EngineError
from training.checkpoints import CheckpointError

COMMANDS = (score, translate, explain, export, make_run)  # each module adds its subcommands
DEFAULT = "score"  # what `evaluate.py CKPT ...` runs
# The options that chose a mode before evaluate.py took subcommands: refused, saying what to write now.
MOVED = {
    "--translate": "a subcommand: python evaluate.py translate MODEL TEXT",
    "--alignment-methods": "a subcommand: python evaluate.py explain MODEL [--methods METHOD ...]",
    "--gold-alignments": "an option of explain: python evaluate.py explain MODEL --gold-alignments LINKS "
                         "--gold-sentences FILE",
    "--engine": "a subcommand: python evaluate.py score-ctranslate2 CKPT",
    "--engine-model": "an option of score-ctranslate2: python evaluate.py score-ctranslate2 CKPT "
                      "--engine-model DIR",
    "--export-ctranslate2": "a subcommand: python evaluate.py export-ctranslate2 CKPT DIR",
    "--export-hf": "a subcommand: python evaluate.py export-hf CKPT DIR",
    "--make-run": "a subcommand: python evaluate.py make-run MODEL DIR --tsv FILE",
    "--hf-model": "MODEL --hf: python evaluate.py NAME --hf --tsv FILE (translate NAME TEXT --hf, ...)",
}


class Parser(argparse.ArgumentParser):
    """A subcommand's parser. Options are spelt out whole: one that a subcommand lacks is never taken for
    the start of one it has (--engine for --engine-model)."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


class Moved(argparse.Action):
    """An option of the spellings before subcommands, refused in one line that names the new one."""

    def __init__(self, option_strings, dest, now: str, **kwargs):
        super().__init__(option_strings, dest, nargs="*", help=argparse.SUPPRESS, **kwargs)
        self.now = now

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is now {self.now}")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """evaluate.py's parser, and each subcommand's by name."""
    parser = argparse.ArgumentParser(
        prog="evaluate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(title="subcommands", metavar="SUBCOMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.add_to(subparsers)
    for option, now in MOVED.items():
        subparsers.choices[DEFAULT].add_argument(option, action=Moved, now=now)
    return parser, subparsers.choices


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options of ``argv``'s subcommand, or of ``score`` where ``argv`` starts with none
    (``evaluate.py CKPT``); a subcommand's ``check`` says what argparse cannot (an option that needs
    another)."""
    parser, commands = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.error(f"give a checkpoint to score, or one of the subcommands: {', '.join(commands)}")
    if argv[0] in ("-h", "--help"):
        parser.parse_args(argv)  # the help, listing the subcommands; it exits
    name, rest = (argv[0], argv[1:]) if argv[0] in commands else (DEFAULT, argv)
    args = commands[name].parse_args(rest)
    check = getattr(args, "check", None)
    if check is not None and (problem := check(args)) is not None:
        commands[name].error(problem)
    return args


def main(argv: list[str] | None = None) -> int:
    """evaluate.py on ``argv`` (default ``sys.argv[1:]``); its exit status. Ctrl-C, while a checkpoint loads
    or ``translate MODEL -`` waits on stdin, ends it as it ends train.py: one line, status 130 (128 +
    SIGINT)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 128 + signal.SIGINT


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    try:
        return args.run(args)
    except CorpusError as error:
        print(f"error: {corpus_error_line(error, args)}", file=sys.stderr)
        return 1
    except (CheckpointError, OutputExistsError, AnalysisError, EngineError, InputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout's reader left (| head): not an error of ours; see the end of the file
        raise
    except OSError as error:  # a file that vanished, a full disk, no permission: one line, no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 1


def corpus_error_line(error: CorpusError, args: argparse.Namespace) -> str:
    """The line evaluate.py prints for ``error``, naming evaluate.py's own option where a missing file of the
    run's data has one: a test set that is not there is --test-split's (the data module's message names
    train.py's --data.test_split), and a run's data that moved is found again with --data-path."""
    options = vars(args)
    if options.get("hf") or not error.reason.startswith("no such file"):
        return str(error)
    test_split = options.get("test_split")
    if test_split is not None and os.path.basename(error.path).startswith(f"{test_split}."):
        return (f"--test-split {test_split}: {error.path}: no such file in the run's data folder (leave "
                "--test-split out for the run's own test set)")
    given = (options.get("tsv"), options.get("gold_alignments"), *(options.get("gold_sentences") or ()))
    if options.get("data_path") is None and error.path not in given:  # not one of the user's own files
        return f"{error}; if the run's data moved, give its folder with --data-path FOLDER"
    return str(error)


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
