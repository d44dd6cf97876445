"""``evaluate.py explain MODEL``: every explanation method (or those --methods names) scored against gold
word alignments, layer by layer and head by head: a split's or a --tsv file's own gold links (the toy
tasks), or a human gold set on its words (--gold-alignments LINKS --gold-sentences FILE). Prints a table,
then one JSON line; writes the report's JSON and figures to the analysis folder (docs/explanations.md).
"""

import argparse
import json
from pathlib import Path

from analysis.explain.attributions import IG_STEPS, MAX_IG_STEPS
from analysis.explain.registry import METHODS
from analysis.word_alignment import THRESHOLD
from commands.shared import (
    check_gold,
    checkpoint_of,
    device_parent,
    gold_parent,
    load_model,
    model_parent,
    progress_bar,
    quiet_parent,
    say,
    share,
    whole,
)
from evaluation.explanation_report import DEFAULT_SENTENCES, AlignmentMethodsReport, Explaining
from evaluation.gold_report import GOLD_CHOOSE, gold_report, read_gold_files
from evaluation.inputs import analysis_folder, resolve_device, whole_analysis
from evaluation.scoring import Data, check_lengths, explain_pairs, read_pairs
from training.checkpoints import LoadedRun


def add_to(subparsers) -> None:
    command = subparsers.add_parser(
        "explain", parents=[model_parent(), gold_parent(), device_parent(), quiet_parent()],
        help="score the explanation methods against gold word alignments", description=__doc__,
    )
    pairs = command.add_argument_group("the pairs").add_mutually_exclusive_group()
    pairs.add_argument("--split", choices=("val", "test"), default="test",
                       help="split of the run's data, with gold links on its words (default: test)")
    pairs.add_argument("--test-split", metavar="NAME", help="another test set of the run's corpus")
    pairs.add_argument("--tsv", help="a file of source<TAB>reference lines instead")
    pairs.add_argument("--gold-alignments", metavar="LINKS",
                       help="a human gold set instead: one line of Pharaoh links (i-j sure, ipj or i?j "
                            "possible) per pair of --gold-sentences")
    command.add_argument("--methods", nargs="+", choices=list(METHODS), metavar="METHOD",
                         help=f"the methods to score (default: all): {', '.join(METHODS)}")
    command.add_argument("--alignment-sentences", type=whole(1), metavar="N",
                         help=f"score the first N pairs of the split (default: {DEFAULT_SENTENCES}) or gold "
                              "set (default: all); the gradient methods cost a backward pass per target "
                              "token, Integrated Gradients --ig-steps of them")
    command.add_argument("--ig-steps", type=whole(1, MAX_IG_STEPS), default=IG_STEPS, metavar="K",
                         help=f"Integrated Gradients: points of the path integral (default: {IG_STEPS}, at "
                              f"most {MAX_IG_STEPS})")
    command.add_argument("--batch-size", type=whole(1, 32), default=32,
                         help="sentences per pass (default: 32)")
    command.add_argument("--alignment-threshold", type=share, default=THRESHOLD, metavar="SHARE",
                         help=f"the thresholded extractions keep links with at least this share of their "
                              f"row (and column) (default: {THRESHOLD}); for gold sets and data whose words "
                              "are not its tokens")
    gold = command.add_argument_group("choosing each method's map on a gold set")
    gold.add_argument("--gold-choose", type=whole(0), metavar="N",
                      help=f"choose each method's map (layer, head, extraction) on the gold set's first N "
                           f"pairs and report it on the others (default: {GOLD_CHOOSE}, the pairs training "
                           "scores); 0, or a set of N pairs or fewer: chosen and reported on the same pairs, "
                           "and the tables say so")
    gold.add_argument("--links-out", metavar="DIR",
                      help="write each method's chosen map's links, and the diagonal's, for every gold pair "
                           "to DIR/<method>.links (Pharaoh, 1-based, in the gold file's direction)")
    command.add_argument("--analysis-out", metavar="DIR",
                         help="folder of the report's files (default: <run>/analysis/<checkpoint name>; with "
                              "--hf FOLDER: FOLDER/analysis)")
    command.add_argument("--overwrite", action="store_true", help="replace the report's files")
    command.set_defaults(run=run, check=check)


def check(args: argparse.Namespace) -> str | None:
    if args.hf and not (args.tsv or args.gold_alignments):
        return ("--hf: a transformers model has no data of its own: give --tsv FILE (source<TAB>reference "
                "lines) or --gold-alignments")
    return check_gold(args, "gold_choose", "links_out")


def run(args: argparse.Namespace) -> int:
    checkpoint = checkpoint_of(args)
    folder = analysis_folder(args.analysis_out, checkpoint=checkpoint, hf_model=args.model)
    device = resolve_device(args.device)
    loaded = load_model(args, checkpoint, device)
    options = Explaining(folder, methods=args.methods or list(METHODS), ig_steps=args.ig_steps,
                         batch_size=args.batch_size, threshold=args.alignment_threshold,
                         overwrite=args.overwrite)
    from viz.reports import draw_alignment_methods  # matplotlib only when needed

    with whole_analysis():  # its JSON files and figures, all or none
        report = explained(args, loaded, checkpoint, options)
        others = [*report.lens_files, *draw_alignment_methods(report)]
    if report.note:
        say(report.note)
    print(report.table)
    say(f"wrote {report.path('.json')} and {len(others)} other files to {report.stem.parent}")
    print(json.dumps(report.result))
    return 0


def explained(args: argparse.Namespace, loaded: LoadedRun, checkpoint: str | None,
              options: Explaining) -> AlignmentMethodsReport:
    """The report on the split or --tsv file, or on the gold set of --gold-alignments."""
    if args.gold_alignments is None:
        data = Data(args.split, args.tsv)
        pairs = read_pairs(loaded, data)
        check_lengths(loaded, pairs, data, targets=True)
        pairs = pairs[: args.alignment_sentences or DEFAULT_SENTENCES]
        with progress_bar("explaining", len(pairs), args.quiet) as progress:
            about = {"checkpoint": checkpoint, "data": data.name}
            return explain_pairs(loaded, pairs, data, options, about=about, progress=progress)
    source = read_gold_files(loaded.datamodule, args.gold_alignments, args.gold_sentences,
                             zero_based=args.gold_zero_based, direction=args.gold_direction)
    say(f"{source.gold.summary()}; direction {source.direction}")
    links_out = Path(args.links_out) if args.links_out else None
    count = len(source.gold.pairs[: args.alignment_sentences]) * (2 if links_out else 1)
    about = {"checkpoint": checkpoint, "gold_alignments": args.gold_alignments,
             "gold_sentences": args.gold_sentences}
    with progress_bar("explaining gold pairs", count, args.quiet) as progress:
        return gold_report(loaded, source, options, about=about, limit=args.alignment_sentences,
                           choose_on=GOLD_CHOOSE if args.gold_choose is None else args.gold_choose,
                           links_out=links_out, progress=progress)
