"""``evaluate.py CKPT --gold-alignments LINKS --gold-sentences SENTENCES``: every explanation method scored on
a human gold set's own words (``evaluation.gold_alignment``), each extraction's best layer or head with its
precision, recall and AER, as numbers (an ``AlignmentMethodsReport``) that ``viz.reports`` draws.

Files written to the analysis folder (``--analysis-out``, default ``<run>/analysis/<checkpoint>``), named
after the links file (``ja-en.gold``: ``gold_ja-en``; a split scored on its words, the Han-script toy's:
``alignment_methods_<split>``, as ``--alignment-methods`` names the files of other data):
    gold_<name>.json                      every method, extraction, layer and head; the options and timings
    gold_<name>_sentence<k>_lens.json     the logit lens of gold pair k
and, by viz.reports:
    gold_<name>_aer.png, _agreement.png   methods × layers, forward arg-max
    gold_<name>_extractions.png           methods × extractions, the best AER of each
    gold_<name>_heads_<method>.png        layers × heads AER (forward arg-max) of each method with heads
    gold_<name>_sentence<k>.png           gold pair k's word maps under every method, gold links circled
    gold_<name>_sentence<k>_lens.png      its logit lens
"""

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from analysis.explain.registry import METHODS
from analysis.word_alignment import EXTRACTIONS
from data.gold import GoldSet, read_gold_for
from evaluation.ablation import AnalysisError
from evaluation.explanation_report import (
    PICTURED_SENTENCES,
    AlignmentMethodsReport,
    explain_sentence,
    flat_table,
    write_lens,
)
from evaluation.gold_alignment import WordAlignmentScores, as_dict, gold_alignment, gold_items


def read_gold_option(args, run) -> tuple[GoldSet, str]:
    """The gold set of --gold-alignments and --gold-sentences in the run's direction, and why that direction.

    Raises:
        CorpusError: a file is unreadable or malformed (the message names the file and line).
    """
    dm = run.datamodule
    sentences = args.gold_sentences
    return read_gold_for(
        sentences[0], args.gold_alignments, dm.source_lang, dm.target_lang,
        one_based=not args.gold_zero_based, direction=args.gold_direction,
        target_sentences=sentences[1] if len(sentences) > 1 else None,
    )


def print_best(scores: dict[str, WordAlignmentScores]) -> None:
    """Each method's best map under the forward arg-max, then the best AER of every extraction."""
    print(f"{'method':22s} {'best map (forward arg-max)':26s} {'precision':>9s} {'recall':>7s} {'AER':>6s}")
    for name, method in scores.items():
        best = method.best("argmax")
        where = best["layer"] + ("" if best["head"] is None else f" head {best['head']}")
        print(f"{name:22s} {where:26s} {best['precision']:9.3f} {best['recall']:7.3f} {best['aer']:6.3f}")
    extractions = list(next(iter(scores.values())).per_layer)
    print(f"\nbest AER by extraction: {'; '.join(f'{EXTRACTIONS[e].short} = {e}' for e in extractions)}")
    print(f"{'method':22s} " + " ".join(f"{EXTRACTIONS[e].short:>10s}" for e in extractions))
    for name, method in scores.items():
        print(f"{name:22s} " + " ".join(f"{method.best(e)['aer']:10.3f}" for e in extractions))


def run_gold_alignment(
    args, run, directory: Path, check_new, *, data: tuple[GoldSet, str] | None = None
) -> AlignmentMethodsReport:
    """Score the methods on the gold set of --gold-alignments (its first --alignment-sentences pairs, else
    all), or on ``data`` (a split's pairs whose gold words are not its tokens, the Han-script toy's, and the
    split's name), and explain the first PICTURED_SENTENCES pairs over their words; write the JSON files and
    print the tables. The figures are the caller's to draw (``viz.reports.draw_alignment_methods``)."""
    dm, model = run.datamodule, run.module.model
    if data is None:
        gold, direction = read_gold_option(args, run)
        print(f"{gold.summary()}; direction {direction}", file=sys.stderr)
        name, where = Path(args.gold_alignments).stem, args.gold_sentences[0]
    else:
        (gold, name), direction = data, "the data's own"
        where = name
    pairs = gold.pairs[: args.alignment_sentences] if args.alignment_sentences else gold.pairs
    items = gold_items(GoldSet(pairs), dm.src_tokenizer, dm.tgt_tokenizer, model.config.max_len, where)
    if not any(item.sure for item in items):  # every AER would be 1.0, whatever the model does
        raise AnalysisError(f"{where}: the {len(items)} pairs scored have no sure gold link to score against")
    # Named as the data's --alignment-methods files are (``alignment_methods_val``), a gold set's after it.
    stem = directory / (f"gold_{name}" if data is None else f"alignment_methods_{name}")
    json_path = stem.with_name(f"{stem.name}.json")  # the report's path(".json")
    check_new(json_path, args.overwrite)
    directory.mkdir(parents=True, exist_ok=True)
    methods = args.alignment_methods or list(METHODS)  # checked by parse_args
    bar = tqdm(total=len(items), desc="explaining gold pairs", unit="sent", disable=args.quiet,
               file=sys.stderr)
    start = time.perf_counter()
    scores = gold_alignment(model, items, methods=methods, threshold=args.alignment_threshold,
                            ig_steps=args.ig_steps, batch_size=min(args.batch_size, 32), progress=bar.update)
    seconds = time.perf_counter() - start
    bar.close()
    sure, possible = (sum(len(item.sure) for item in items), sum(len(item.possible) for item in items))
    result = {
        "checkpoint": args.checkpoint, "gold_alignments": args.gold_alignments,
        "gold_sentences": args.gold_sentences, "direction": direction, "sentences": len(items),
        "sure_links": sure, "possible_links": possible, "dropped_links": gold.dropped,
        "options": {"ig_steps": args.ig_steps, "threshold": args.alignment_threshold}, "seconds": seconds,
        "best": {name: {e: method.best(e) for e in method.per_layer} for name, method in scores.items()},
        "method_seconds": {name: method.seconds for name, method in scores.items()},
    }
    every = {"scores": {name: as_dict(method) for name, method in scores.items()},
             "table": flat_table({name: method.alignment_scores() for name, method in scores.items()})}
    json_path.write_text(json.dumps(result | every, indent=1, ensure_ascii=False), encoding="utf-8")
    sentences = [explain_sentence(model, dm, pair, methods, args.ig_steps, gold=item)
                 for pair, item in zip(pairs[:PICTURED_SENTENCES], items, strict=False)]
    best = {name: {e: best["aer"] for e, best in named.items()} for name, named in result["best"].items()}
    report = AlignmentMethodsReport({name: method.alignment_scores() for name, method in scores.items()},
                                    sentences, stem, result, lens_files=[], extractions=best)
    for number, sentence in enumerate(sentences, start=1):
        report.lens_files.append(write_lens(sentence, report.path(f"_sentence{number}_lens.json")))
    print_best(scores)
    return report
