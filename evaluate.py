"""Evaluate a trained checkpoint, or translate with it and look at its attention.

    python evaluate.py runs/toy/version_0/checkpoints/last.ckpt               # test split of its data
    python evaluate.py runs/toy/version_0                                     # the run's newest weights
    python evaluate.py CKPT --split val --beam-size 4 --output val.jsonl
    python evaluate.py CKPT --tsv my_test.tsv                                 # source<TAB>reference lines
    python evaluate.py CKPT --average-last 5                                  # average the last 5 checkpoints
    python evaluate.py CKPT --head-importance --prune-heads 4 --alignment     # what the heads do (below)
    python evaluate.py CKPT --engine ctranslate2 --beam-size 5                # score with CTranslate2
    python evaluate.py CKPT --translate "the big dog sees a cat" --attention-out maps/
    python evaluate.py CKPT --split val --alignment-methods                   # which explanation aligns best
    python evaluate.py CKPT --gold-alignments ja-en.gold --gold-sentences ja-en.src-tgt   # ... on human gold
    python evaluate.py CKPT --export-ctranslate2 ct2_model/                   # a CTranslate2 model folder
    python evaluate.py CKPT --export-hf hf_model/                             # a transformers model folder
    python evaluate.py --hf-model Helsinki-NLP/opus-mt-de-en --tsv de_en.tsv  # a Marian (OPUS-MT) model
    python evaluate.py --hf-model Helsinki-NLP/opus-mt-de-en --tsv de_en.tsv --make-run runs/opus/de_en

Without --translate, --alignment-methods (or --gold-alignments), --export-ctranslate2, --export-hf or
--make-run (one at most), evaluate.py scores a split or a --tsv file, with the PyTorch engine or --engine
ctranslate2, and runs the head analyses asked for. Each group of options below belongs to some of these
modes; an option given in another mode is refused in one line naming both. What each mode computes and
writes: docs/evaluating.md, docs/explanations.md, docs/ctranslate2.md and docs/huggingface.md.

The last line printed is one JSON object with the scores, for scripts.
"""

import argparse
import enum
import json
import os
import shutil
import signal
import sys
from pathlib import Path

from analysis.explain.attributions import IG_STEPS, MAX_IG_STEPS
from analysis.explain.registry import METHODS, check_methods
from analysis.metrics import BLEU_TOKENIZERS
from analysis.word_alignment import THRESHOLD
from data.corpora import CorpusError
from data.gold import DIRECTIONS
from evaluation.ablation import AnalysisError
from evaluation.gold_report import GOLD_CHOOSE, read_gold_option
from evaluation.inputs import (
    InputError,
    OutputExistsError,
    check_outputs,
    check_sentence_folders,
    check_sentences_fit,
    finite_float,
    prune_count_option,
    read_sentences,
    resolve_device,
    whole_analysis,
    writer_thread_errors,
)
from evaluation.loading import choose_checkpoint, corpus_error_line, imported_run, load
from evaluation.result import bleu_tokenize, print_summary, scored_result, write_output
from evaluation.scoring import check_lengths, read_pairs, score, score_alignment_methods
from evaluation.translate import translate_hypotheses, unknown_pieces_line
from export.ctranslate2 import EngineError, import_ctranslate2
from export.engine import export_run, translate_with_engine
from export.huggingface import check_out_folder, import_transformers
from export.huggingface import export as export_hf
from model.decoding import MAX_BEAM_SIZE
from training.checkpoints import CheckpointError


class Mode(enum.Enum):
    """What evaluate.py does, valued by the option that chooses it; scoring is the default."""

    SCORE = "scoring"
    ENGINE = "--engine ctranslate2"
    TRANSLATE = "--translate"
    EXPLAIN = "--alignment-methods"
    EXPORT = "--export-ctranslate2"
    EXPORT_HF = "--export-hf"
    MAKE_RUN = "--make-run"


SCORE, ENGINE, TRANSLATE, EXPLAIN, EXPORT, EXPORT_HF, MAKE_RUN = Mode
DATA = {SCORE, ENGINE, EXPLAIN}  # the modes that read a split or a --tsv file
# How an option is refused in a mode it does not belong to, by the mode chosen.
REFUSED = {
    SCORE: "{option} needs {needs}",
    ENGINE: "{option} cannot be used with --engine ctranslate2: CTranslate2 returns no per-head attention "
            "and only scores a split or --tsv file; use the PyTorch engine (the default) to look inside or "
            "to translate sentences",
    TRANSLATE: "{option} cannot be used with --translate, which translates the sentences it is given rather "
               "than a split or --tsv file",
    EXPLAIN: "{explain} runs alone, without {option}",
    EXPORT: "{option} cannot be used with --export-ctranslate2, which only exports; evaluate with --engine "
            "ctranslate2 --engine-model DIR afterwards",
    EXPORT_HF: "{option} cannot be used with --export-hf, which only exports",
    MAKE_RUN: "{option} cannot be used with --make-run, which writes one validation of --tsv's pairs",
}
LENGTH_PENALTY = 0.6  # GNMT's alpha when --length-penalty is not given
COUNTS = ("beam_size", "batch_size", "max_len", "average_last", "importance_sentences", "ablation_batch",
          "alignment_sentences", "ig_steps")  # at least 1 (max_len, average_last and alignment_sentences may
# be left out)
# Of a gold set's files; --alignment-threshold also serves data scored on words (the Han-script toy).
GOLD_OPTIONS = ("gold_sentences", "gold_zero_based", "gold_direction", "gold_choose", "links_out")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, set[Mode]]]:
    """The options in one group per mode, and the modes of every option that does not serve them all."""
    parser = argparse.ArgumentParser(
        prog="evaluate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    modes: dict[str, set[Mode]] = {}

    def add(group, *flags, only=None, **kwargs):
        dest = group.add_argument(*flags, **kwargs).dest
        if only is not None:
            modes[dest] = only

    parser.add_argument(
        "checkpoint", nargs="?",
        help="a .ckpt file written by train.py, or a run folder: its newest weights (last.ckpt, or "
        "interrupted.ckpt when a stopped run saved later ones; see training/checkpoints.py); or none "
        "with --hf-model",
    )
    task = parser.add_argument_group("instead of scoring (one at most)").add_mutually_exclusive_group()
    add(task, "--translate", metavar="TEXT", only={TRANSLATE},
        help="translate TEXT (or '-': one sentence per line on stdin)")
    add(task, "--alignment-methods", nargs="*", metavar="METHOD", only={EXPLAIN},
        help=f"AER and agreement per layer (and head) of each method, or of all without names: "
             f"{', '.join(METHODS)}; prints one JSON table and writes pictures to --analysis-out")
    add(task, "--export-ctranslate2", metavar="DIR", only={EXPORT},
        help="write the model as a CTranslate2 model folder (pip install ctranslate2)")
    add(task, "--export-hf", metavar="DIR", only={EXPORT_HF},
        help="write the model as a transformers MarianMTModel folder with its tokenizer (pip install -e "
             ".[hf]; post-LN models with sinusoidal positions); its generate() decodes with --beam-size "
             "beams (length penalty 0) up to --max-len tokens")
    add(task, "--make-run", metavar="DIR", only={MAKE_RUN},
        help="with --hf-model and --tsv (or a gold set, --gold-alignments): write a run folder that the "
             "ATTENTION tab opens (tensorboard --logdir of its parent): one validation on those pairs, "
             "logged as training logs them, and a checkpoint the tab translates with; DIR must be new or "
             "empty")

    data = parser.add_argument_group("data (scoring and --alignment-methods)")
    source = data.add_mutually_exclusive_group()
    add(source, "--split", choices=("val", "test"), default="test", only=DATA,
        help="split of the run's data (default: test)")
    add(source, "--tsv", only=DATA | {MAKE_RUN},
        help="evaluate on this file of source<TAB>reference lines instead")
    add(source, "--gold-alignments", metavar="LINKS", only={EXPLAIN, MAKE_RUN},
        help="score the explanation methods (all, or those --alignment-methods names) on this gold set's "
             "words instead: one line of Pharaoh links (i-j sure, ipj or i?j possible) per pair of "
             "--gold-sentences")
    add(data, "--test-split", metavar="NAME", only=DATA,
        help="another test set of the corpus, e.g. test2017 or mscoco2017")
    add(data, "--data-path", help="corpus folder (for Tatoeba data: the file), if it moved since training")
    add(data, "--bleu-tokenize", choices=BLEU_TOKENIZERS, metavar="NAME", only={SCORE, ENGINE},
        help=f"sacreBLEU's tokenizer of the BLEU (default: the one it prescribes for the run's target "
             f"language: zh for Chinese, ja-mecab for Japanese, ko-mecab for Korean, else 13a; as during "
             f"training). One of {', '.join(BLEU_TOKENIZERS)}")

    decoding = parser.add_argument_group("the model and its decoding")
    add(decoding, "--hf-model", metavar="DIR_OR_NAME", only={SCORE, TRANSLATE, EXPLAIN, MAKE_RUN},
        help="instead of a checkpoint: a transformers Marian model (a save_pretrained folder, or a Hub name "
             "such as Helsinki-NLP/opus-mt-de-en with a network), imported with its SentencePiece tokenizer "
             "(pip install -e .[hf]); its sentences come from --tsv or --translate")
    add(decoding, "--average-last", type=int, metavar="K",
        help="average the weights of the run's last K checkpoints")
    add(decoding, "--beam-size", type=int, default=1, help="1 decodes greedily (default: 1)")
    add(decoding, "--length-penalty", type=finite_float, default=None,
        help=f"GNMT length penalty alpha (default: {LENGTH_PENALTY})")
    add(decoding, "--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    add(decoding, "--max-len", type=int, default=None,
        help="most tokens to generate per sentence (default: the run's decode_max_len, else twice the source "
             "length + 10)")
    add(decoding, "--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)")

    files = parser.add_argument_group("files and progress")
    add(files, "--output", only={SCORE, ENGINE}, help="write one JSON line per sentence to this .jsonl file")
    add(files, "--attention-out", metavar="DIR", only={TRANSLATE},
        help="with --translate: write attention PNGs and an HTML head view")
    add(files, "--analysis-out", metavar="DIR", only={SCORE, EXPLAIN},
        help="folder of the --head-importance and --alignment-methods files (default: "
             "<run>/analysis/<checkpoint name>; with --hf-model FOLDER: FOLDER/analysis)")
    add(files, "--overwrite", action="store_true",
        help="replace existing output files (--export-hf: the whole folder of an earlier export; none of its "
             "files stay)")
    add(files, "--quiet", action="store_true", help="no progress bar")

    heads = parser.add_argument_group("head analysis, while scoring with the PyTorch engine (see above)")
    add(heads, "--head-importance", action="store_true", only={SCORE},
        help="loss, BLEU and exact-match change when each head alone is silenced")
    add(heads, "--importance-sentences", type=int, default=500, metavar="N", only={SCORE},
        help="decode the first N sentences for the BLEU and exact-match changes (default: 500). They cost "
             "about 1 + number of heads greedy decodings of these sentences; the loss changes use every "
             "sentence and cost about 1 + number of heads teacher-forced passes, far less")
    add(heads, "--ablation-batch", type=int, default=256, metavar="ROWS", only={SCORE},
        help="sentence copies in one forward pass: each batch runs ROWS // --batch-size ablations at once "
             "(default: 256)")
    add(heads, "--prune-heads", type=prune_count_option, metavar="K", only={SCORE},
        help="silence the K least important heads (or a fraction in (0, 1) of all heads) and evaluate so")
    add(heads, "--alignment", action="store_true", only={SCORE},
        help="AER of the best cross-attention head and of the head average (toy, copy, reverse data)")

    methods = parser.add_argument_group(
        "--alignment-methods (scored against gold alignments: toy, copy, reverse)"
    )
    add(methods, "--alignment-sentences", type=int, metavar="N", only={EXPLAIN, MAKE_RUN},
        help="score the first N sentences of the split (default: 200) or gold set (default: all; with "
             "--make-run: 50, as training); the gradient methods cost a backward pass per target token, "
             "Integrated Gradients --ig-steps of them")
    add(methods, "--ig-steps", type=int, default=IG_STEPS, metavar="K", only={EXPLAIN},
        help=f"Integrated Gradients: points of the path integral (default: {IG_STEPS}, at most "
             f"{MAX_IG_STEPS})")

    gold = parser.add_argument_group(
        "--gold-alignments (human gold on words: docs/explanations.md, \"Scoring word alignments\")"
    )
    add(gold, "--gold-sentences", nargs="+", metavar="FILE", only={EXPLAIN, MAKE_RUN},
        help="the gold pairs: 'source ||| target' lines, or two line-aligned files (source, then target); "
             "the links index their whitespace-separated words, which the model reads joined by spaces")
    add(gold, "--gold-zero-based", action="store_true", only={EXPLAIN, MAKE_RUN},
        help="the links count words from 0 (default: from 1, as the KFTT and RWTH sets do)")
    add(gold, "--gold-direction", choices=DIRECTIONS, default="auto", only={EXPLAIN, MAKE_RUN},
        help="auto (default): the gold's direction from file names such as ja-en.gold against the run's "
             "source and target languages, else as given; reversed: swap its sides for a model that "
             "translates the other way; forward: as given")
    add(gold, "--gold-choose", type=int, default=GOLD_CHOOSE, metavar="N", only={EXPLAIN},
        help=f"choose each method's map (layer, head, extraction) on the gold set's first N pairs and "
             f"report it on the others (default: {GOLD_CHOOSE}, the pairs training scores); 0, or a set of N "
             "pairs or fewer: chosen and reported on the same pairs, and the tables say so")
    add(gold, "--links-out", metavar="DIR", only={EXPLAIN},
        help="write each method's chosen map's links, and the diagonal's, for every gold pair to "
             "DIR/<method>.links (Pharaoh, 1-based, in the gold file's direction), for any scorer to check")
    add(gold, "--alignment-threshold", type=finite_float, default=THRESHOLD, metavar="SHARE", only={EXPLAIN},
        help=f"the thresholded extractions keep links with at least this share of their row (and column) "
             f"(default: {THRESHOLD}); for gold sets and data whose words are not its tokens")

    engine = parser.add_argument_group(
        "CTranslate2 (optional: pip install ctranslate2; no per-head attention)"
    )
    add(engine, "--engine", choices=("pytorch", "ctranslate2"), default="pytorch", only={ENGINE},
        help="translate with this engine (default: pytorch); ctranslate2 runs on the CPU")
    add(engine, "--engine-model", metavar="DIR", only={ENGINE},
        help="with --engine ctranslate2: reuse this export")
    add(engine, "--compute-type", choices=("float32", "int8"), default="float32", only={ENGINE, EXPORT},
        help="CTranslate2 weights: float32 (default) or int8")
    return parser, modes


def mode(args: argparse.Namespace) -> Mode:
    """The mode the options choose; the mutually exclusive group allows one of the last three at most."""
    if args.export_ctranslate2:
        return EXPORT
    if args.export_hf:
        return EXPORT_HF
    if args.make_run:
        return MAKE_RUN
    if args.engine == "ctranslate2":
        return ENGINE
    if args.alignment_methods is not None or args.gold_alignments is not None:
        return EXPLAIN
    return TRANSLATE if args.translate is not None else SCORE


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser, modes = build_parser()
    args = parser.parse_args(argv)
    for name in COUNTS:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.beam_size > MAX_BEAM_SIZE:
        parser.error(f"--beam-size must be at most {MAX_BEAM_SIZE}, got {args.beam_size}")
    if args.ig_steps > MAX_IG_STEPS:  # Captum's Gauss-Legendre table grows as the steps squared
        parser.error(f"--ig-steps must be at most {MAX_IG_STEPS}, got {args.ig_steps}")
    if args.length_penalty is not None and args.length_penalty < 0.0:  # beam search's early stop needs >= 0
        parser.error(f"--length-penalty must be at least 0, got {args.length_penalty}")
    if args.alignment_methods:
        try:
            check_methods(args.alignment_methods)
        except ValueError as error:
            parser.error(f"--alignment-methods: {error}")
    chosen = mode(args)
    given = [name for name in modes if getattr(args, name) != parser.get_default(name)]
    if args.gold_alignments is None:
        for name in (name for name in GOLD_OPTIONS if name in given):
            parser.error(f"--{name.replace('_', '-')} needs --gold-alignments")
    elif args.gold_sentences is None or len(args.gold_sentences) > 2:
        parser.error("--gold-alignments needs --gold-sentences FILE (source ||| target lines) or "
                     "--gold-sentences SOURCE TARGET (two line-aligned files)")
    if args.gold_choose < 0:
        parser.error(f"--gold-choose must be at least 0, got {args.gold_choose}")
    if not 0.0 < args.alignment_threshold <= 1.0:
        parser.error(f"--alignment-threshold must be in (0, 1], got {args.alignment_threshold}")
    explain = "--gold-alignments" if args.gold_alignments is not None else "--alignment-methods"
    # An option outside the chosen mode is named before the options that choose modes (they conflict too).
    choosing = ("translate", "alignment_methods", "gold_alignments", "engine")
    for name in sorted(given, key=lambda name: name in choosing):
        if chosen not in modes[name]:
            needs = " or ".join(m.value for m in Mode if m in modes[name])
            option = f"--{name.replace('_', '-')}"
            parser.error(REFUSED[chosen].format(option=option, needs=needs, explain=explain))
    if args.test_split is not None and (args.tsv or args.split == "val" or args.gold_alignments):
        other = "--tsv" if args.tsv else "--gold-alignments" if args.gold_alignments else "--split val"
        parser.error(f"--test-split names the test set to read; it does not go with {other}")
    if chosen == MAKE_RUN and (args.hf_model is None or not (args.tsv or args.gold_alignments)):
        parser.error("--make-run needs --hf-model (a checkpoint of this project is in its run already) and "
                     "--tsv FILE (source<TAB>reference lines: the sentences the tab shows) or a gold set "
                     "(--gold-alignments, --gold-sentences)")
    if (args.checkpoint is None) == (args.hf_model is None):
        parser.error("give a checkpoint or --hf-model, not both" if args.hf_model else
                     "the following arguments are required: checkpoint (or --hf-model)")
    if args.hf_model is not None:
        for name in ("average_last", "data_path", "test_split"):
            if getattr(args, name) is not None:
                parser.error(f"--{name.replace('_', '-')} is about a run's checkpoints or data; --hf-model "
                             "has neither")
        if chosen in DATA and not args.tsv and not args.gold_alignments:
            parser.error("--hf-model has no data of its own: give --tsv FILE (source<TAB>reference lines)"
                         + (" or --gold-alignments" if chosen == EXPLAIN else ""))
    if chosen in (ENGINE, EXPORT) and args.device not in ("auto", "cpu"):
        parser.error(f"--device {args.device} cannot be used with {chosen.value}: the CTranslate2 path "
                     "runs on the CPU")
    for name in ("beam_size", "length_penalty", "max_len") if chosen == EXPLAIN else ():
        if getattr(args, name) != parser.get_default(name):
            parser.error(f"--{name.replace('_', '-')} decodes; {explain} explains the reference translations "
                         "(teacher-forced), so it decodes nothing")
    if chosen == EXPORT_HF and args.batch_size != parser.get_default("batch_size"):
        parser.error("--batch-size cannot be used with --export-hf: generate() batches what it is given")
    if chosen == EXPORT_HF and args.length_penalty not in (None, 0.0):
        parser.error("--length-penalty is GNMT's; transformers' generate() divides by length ** penalty "
                     "instead, so the export decodes beams with length_penalty 0, where both rules agree")
    if chosen == EXPORT_HF and args.device not in ("auto", "cpu"):
        parser.error(f"--device {args.device} cannot be used with --export-hf: the export is written from "
                     "the CPU")
    if args.length_penalty is None:
        args.length_penalty = LENGTH_PENALTY
    return args


def run_translate(args, run, sentences: list[str]) -> None:
    """--translate: each sentence, read as the run reads its data (the pieces it cannot read named in one
    line), translated and printed, and with --attention-out its maps drawn."""
    dm, model = run.datamodule, run.module.model
    sentences = [dm.read_text(sentence) for sentence in sentences]
    check_sentences_fit(sentences, dm.src_tokenizer, model.config.max_len, from_stdin=args.translate == "-")
    out = Path(args.attention_out) if args.attention_out else None
    if out is not None:  # before translating: nothing printed, then refused
        check_sentence_folders(out, len(sentences), args.overwrite)
    if (unknown := unknown_pieces_line(dm, sentences)) is not None:
        print(unknown, file=sys.stderr)
    hypotheses = translate_hypotheses(
        model, dm.src_tokenizer, dm.tgt_tokenizer, sentences, beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len,
    )
    for hypothesis in hypotheses:
        print(dm.tgt_tokenizer.decode(hypothesis.ids))
    if out is not None:
        from viz.export import export_sentences  # matplotlib only when needed

        written = export_sentences(
            model, dm.src_tokenizer, dm.tgt_tokenizer, sentences, hypotheses, out, overwrite=args.overwrite
        )
        for folder, files in written.items():  # all written, or none: a failed write leaves nothing
            print(f"wrote {len(files)} files to {folder}", file=sys.stderr)


def run_scoring(args, run, device) -> tuple[dict, list[dict]]:
    """The scores, with the head analyses asked for; viz/ draws the head importance."""
    if not args.head_importance:
        return score(args, run, device)
    from viz.reports import draw_head_importance  # matplotlib only when needed

    with whole_analysis():  # its JSON and heatmaps stay only if the whole evaluation ends well
        return score(args, run, device, draw_importance=draw_head_importance)


def run_explanations(args, run) -> dict:
    """--alignment-methods: the report's scores and lens files, then viz/ draws its figures."""
    from viz.reports import draw_alignment_methods  # matplotlib only when needed

    with whole_analysis():  # its JSON files and figures, all or none
        report = score_alignment_methods(args, run)
        others = [*report.lens_files, *draw_alignment_methods(report)]
    folder = report.stem.parent
    print(f"wrote {report.path('.json')} and {len(others)} other files to {folder}", file=sys.stderr)
    return report.result


def run_engine_evaluation(args, run) -> tuple[dict, list[dict]]:
    """--engine ctranslate2: the split or --tsv file translated by CTranslate2 (export/engine.py), scored here
    as the PyTorch engine's translations are."""
    dm = run.datamodule
    pairs = read_pairs(args, run)
    bleu_tokenize(args, run, pairs)  # its packages, before translating
    done = translate_with_engine(
        args, run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs]
    )
    ids, seconds = done.hypotheses_ids, done.seconds
    result, sentences = scored_result(args, run, pairs, ids, seconds=seconds, device="cpu")
    return {**result, **done.settings}, sentences


def check_make_run(folder: str) -> None:
    """--make-run's folder is new or empty, said before the model is loaded."""
    from viz.run_writer import check_run_folder

    try:
        check_run_folder(Path(folder))
    except ValueError as error:
        raise OutputExistsError(f"--make-run {folder} {error}") from None


def make_run(args, run, device) -> Path:
    """--make-run: --tsv's pairs, or the gold set's, validated with the attention logging of training, into a
    new run folder (``viz.run_writer``); the checkpoint's path."""
    from viz.run_writer import write_run  # Lightning's Trainer only when needed

    gold = None
    if args.gold_alignments:
        gold, direction = read_gold_option(args, run)
        print(f"{gold.summary()}; direction {direction}", file=sys.stderr)
        pairs = gold.pairs
    else:
        pairs = read_pairs(args, run)
        check_lengths(args, run, pairs, targets=True)
    explained = {"explanation_sentences": args.alignment_sentences} if args.alignment_sentences else {}
    try:
        with writer_thread_errors() as failed:  # TensorBoard's: said once, here
            checkpoint = write_run(run, pairs, Path(args.make_run), gold=gold, device=device,
                                   quiet=args.quiet, **explained)
        if failed:  # the events lost a write that the logger never reported: the run is not whole
            shutil.rmtree(args.make_run, ignore_errors=True)
            raise failed[0]
        return checkpoint
    except ValueError as error:
        raise InputError(f"--make-run {args.make_run}: {error}") from None
    except OSError as error:  # a full disk: the write names no file; write_run left nothing of the run
        where = f"{error.filename}: " if error.filename else ""
        raise InputError(f"--make-run {args.make_run}: {where}{error.strerror or error}; nothing of the run "
                         "was kept") from None


def load_hf_model(name: str, device):
    """--hf-model: a Marian model imported by export/marian.py, as a run of this project's."""
    from export.marian import load_marian

    imported = load_marian(name)
    return imported_run(
        imported.settings(), imported.state_dict, imported.src_tokenizer, imported.tgt_tokenizer,
        source_lang=imported.source_lang, target_lang=imported.target_lang, device=device,
    )


def main(argv: list[str] | None = None) -> int:
    """evaluate.py on ``argv`` (default ``sys.argv[1:]``); its exit status. Ctrl-C, while a checkpoint loads
    or ``--translate -`` waits on stdin, ends it as it ends train.py: one line, status 130 (128 + SIGINT)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 128 + signal.SIGINT


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    chosen = mode(args)
    try:
        if chosen in (ENGINE, EXPORT):
            import_ctranslate2()  # before loading anything
        if chosen == EXPORT_HF or args.hf_model is not None:
            import_transformers()
        if args.hf_model is None:
            args.checkpoint = choose_checkpoint(args.checkpoint)
        check_outputs(args)
        if chosen == EXPORT_HF:  # before the checkpoint loads
            check_out_folder(args.export_hf, overwrite=args.overwrite)
        if chosen == MAKE_RUN:
            check_make_run(args.make_run)
        device = resolve_device(args.device)
        sentences = read_sentences(args.translate) if chosen == TRANSLATE else []
        if args.hf_model is not None:
            run = load_hf_model(args.hf_model, device)
        else:
            run = load(args.checkpoint, average_last=args.average_last, data_path=args.data_path,
                       test_split=args.test_split, device=device)
        if args.max_len is None and chosen != EXPORT_HF:  # the run's own limit, if it set one (SCAN does)
            args.max_len = run.module.hparams.get("decode_max_len")
        if chosen == TRANSLATE:
            run_translate(args, run, sentences)
            return 0
        if chosen == EXPLAIN:
            print(json.dumps(run_explanations(args, run)))
            return 0
        if chosen == MAKE_RUN:
            checkpoint = make_run(args, run, device)
            print(f"wrote a run to {args.make_run} (checkpoint {checkpoint}); open it with tensorboard "
                  f"--logdir {Path(args.make_run).parent}", file=sys.stderr)
            return 0
        if chosen == EXPORT:
            dm = run.datamodule
            written = export_run(args, run.module.model, dm.src_tokenizer, dm.tgt_tokenizer)
            print(f"wrote a CTranslate2 model to {written}", file=sys.stderr)
            return 0
        if chosen == EXPORT_HF:
            dm = run.datamodule
            written = export_hf(run.module.model.cpu(), dm.src_tokenizer, dm.tgt_tokenizer, args.export_hf,
                                overwrite=args.overwrite, num_beams=args.beam_size, max_len=args.max_len)
            print(f"wrote a transformers model to {written}", file=sys.stderr)
            return 0
        scoring = run_engine_evaluation(args, run) if chosen == ENGINE else run_scoring(args, run, device)
        result, scored = scoring
        if args.hf_model is not None:
            result["hf_model"] = args.hf_model
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
    print_summary(result)
    print(json.dumps(result), flush=True)
    return write_output(args.output, scored) if args.output else 0


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
