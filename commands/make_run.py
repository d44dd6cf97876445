"""``evaluate.py make-run MODEL DIR --tsv FILE`` (or a gold set): a transformers Marian model, validated once
on those pairs with the attention logging of training, written as a run folder that the ATTENTION tab opens
(``tensorboard --logdir`` of its parent), with a checkpoint the tab translates with (``viz/run_writer.py``).
A checkpoint of this project's needs none: its run is one already.
"""

import argparse
import shutil
from pathlib import Path

from commands.shared import (
    check_gold,
    checkpoint_of,
    device_parent,
    gold_parent,
    load_model,
    quiet_parent,
    say,
    whole,
)
from evaluation.gold_report import read_gold_files
from evaluation.inputs import InputError, OutputExistsError, resolve_device, writer_thread_errors
from evaluation.scoring import Data, check_lengths, read_pairs


def add_to(subparsers) -> None:
    command = subparsers.add_parser(
        "make-run", parents=[gold_parent(), device_parent(), quiet_parent()], description=__doc__,
        help="write a run folder of a transformers Marian model that the ATTENTION tab opens",
    )
    command.add_argument("model", metavar="MODEL",
                         help="a transformers Marian model: a save_pretrained folder, or a Hub name such as "
                              "Helsinki-NLP/opus-mt-de-en with a network (pip install -e .[hf])")
    command.add_argument("folder", metavar="DIR", help="the run folder to write; new or empty")
    pairs = command.add_argument_group("the pairs the tab shows").add_mutually_exclusive_group(required=True)
    pairs.add_argument("--tsv", help="a file of source<TAB>reference lines")
    pairs.add_argument("--gold-alignments", metavar="LINKS",
                       help="a human gold set's links, one line per pair of --gold-sentences: every "
                            "explanation method's AER on its words is logged, as a training run on KFTT "
                            "logs it")
    command.add_argument("--alignment-sentences", type=whole(1), metavar="N",
                         help="score the explanations on the first N gold pairs (default: 50, as training)")
    command.set_defaults(run=run, check=check_gold, hf=True)


def run(args: argparse.Namespace) -> int:
    from viz.run_writer import check_run_folder, write_run  # Lightning's Trainer only when needed

    checkpoint_of(args)  # transformers, before anything else
    folder = Path(args.folder)
    try:
        check_run_folder(folder)
    except ValueError as error:
        raise OutputExistsError(f"{folder} {error}") from None
    device = resolve_device(args.device)
    loaded = load_model(args, None, device)
    gold = None
    if args.gold_alignments:
        source = read_gold_files(loaded.datamodule, args.gold_alignments, args.gold_sentences,
                                 zero_based=args.gold_zero_based, direction=args.gold_direction)
        say(f"{source.gold.summary()}; direction {source.direction}")
        gold, pairs = source.gold, source.gold.pairs
    else:
        data = Data(tsv=args.tsv)
        pairs = read_pairs(loaded, data)
        check_lengths(loaded, pairs, data, targets=True)
    explained = {"explanation_sentences": args.alignment_sentences} if args.alignment_sentences else {}
    try:
        with writer_thread_errors() as failed:  # TensorBoard's: said once, here
            checkpoint = write_run(loaded, pairs, folder, gold=gold, device=device, quiet=args.quiet,
                                   **explained)
        if failed:  # the events lost a write that the logger never reported: the run is not whole
            shutil.rmtree(folder, ignore_errors=True)
            raise failed[0]
    except ValueError as error:
        raise InputError(f"{folder}: {error}") from None
    except OSError as error:  # a full disk: the write names no file; write_run left nothing of the run
        where = f"{error.filename}: " if error.filename else ""
        raise InputError(f"{folder}: {where}{error.strerror or error}; nothing of the run was kept") from None
    say(f"wrote a run to {folder} (checkpoint {checkpoint}); open it with tensorboard --logdir "
        f"{folder.parent}")
    return 0
