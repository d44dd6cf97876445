"""``evaluate.py explain CKPT --gold-alignments LINKS --gold-sentences SENTENCES``: every explanation method
scored on a human gold set's own words (``evaluation.gold_alignment``), each extraction's best layer or head
with its precision, recall and AER, as numbers (an ``AlignmentMethodsReport``) that ``viz.reports`` draws.

Files written to the analysis folder (``--analysis-out``, default ``<run>/analysis/<checkpoint>``), named
after the links file (``ja-en.gold``: ``gold_ja-en``; a split scored on its words, the Han-script toy's:
``alignment_methods_<split>``, as explain names the files of other data):
    gold_<name>.json                      every method, extraction, layer and head; the options and timings
    gold_<name>_sentence<k>_lens.json     the logit lens of gold pair k
and, by viz.reports:
    gold_<name>_aer.png, _agreement.png   methods × layers, forward arg-max
    gold_<name>_extractions.png           methods × extractions, the best AER of each
    gold_<name>_heads_<method>.png        layers × heads AER (forward arg-max) of each method with heads
    gold_<name>_sentence<k>.png           gold pair k's word maps under every method, gold links circled
    gold_<name>_sentence<k>_lens.png      its logit lens
"""

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analysis.word_alignment import EXTRACTIONS
from data.corpora import CorpusError
from data.gold import GoldSet, as_trained, gold_reversed, read_gold_for, write_links
from data.pairs import Pair
from evaluation.explanation_report import (
    PICTURED_SENTENCES,
    AlignmentMethodsReport,
    Explaining,
    explain_sentence,
    flat_table,
    write_lens,
)
from evaluation.gold_alignment import (
    Parts,
    as_dict,
    check_sure_links,
    choose,
    chosen_links,
    diagonal_links,
    diagonal_score,
    gold_alignment,
    gold_items,
    reading,
    reported,
)
from evaluation.inputs import check_new, write_whole

GOLD_CHOOSE = 100  # the gold pairs that choose each method's map; training scores the same first 100


def corpus_pairs(dm) -> list[Pair]:
    """The run's test and validation pairs, which a gold set is often taken from (KFTT's, from its tune
    split); none where the run's corpus cannot be read here (an imported model has none)."""
    try:
        return dm.pairs("test") + dm.pairs("val")
    except (CorpusError, OSError):
        return []


@dataclass(frozen=True)
class GoldSource:
    """A gold set to score the methods on, and how its report and its errors name it."""

    gold: GoldSet  # in the model's direction
    name: str  # the report's files: <name>.json, <name>_aer.png, ...
    sentences: str  # named where a pair cannot be read: its sentences' file, or the split
    links: str  # named where its links leave nothing to score: its links' file, or the split
    direction: str  # which way round it was read, and why
    swapped: bool = False  # the file is the other way round: links written back swapped (--links-out)


def read_gold_files(dm, links: str, sentences: list[str], *, zero_based: bool = False,
                    direction: str = "auto") -> GoldSource:
    """The gold set of ``links`` (Pharaoh) and ``sentences`` (one file of 'source ||| target' lines, or a
    source and a target file) in the run's direction, each side read as the run's corpus writes the same
    sentence where it has it (``data.gold.as_trained``); why that direction, with how many sides the corpus
    had.

    Raises:
        CorpusError: a file is unreadable or malformed (the message names the file and line).
    """
    gold, why = read_gold_for(
        sentences[0], links, dm.source_lang, dm.target_lang, one_based=not zero_based, direction=direction,
        target_sentences=sentences[1] if len(sentences) > 1 else None,
    )
    gold = dataclasses.replace(gold, pairs=dm.read_pairs(gold.pairs))  # its script, as the run's data
    gold, read = as_trained(gold, corpus_pairs(dm))
    swapped = gold_reversed(direction, [links, sentences[0]], dm.source_lang, dm.target_lang)[0]
    return GoldSource(gold, f"gold_{Path(links).stem}", sentences[0], links, f"{why}; {read}", swapped)


def data_gold(pairs: list[Pair], name: str) -> GoldSource:
    """A split's pairs whose gold links index words that are not its tokens (the Han-script toy's), scored
    on their words as a gold set is; named as explain names the files of other data."""
    return GoldSource(GoldSet(pairs), f"alignment_methods_{name}", name, name, "the data's own")


def map_name(best: dict) -> str:
    """``layer 2`` or ``layer 2 head 3``: where a chosen map is."""
    return best["layer"] + ("" if best["head"] is None else f" head {best['head']}")


def best_text(best: dict[str, dict[str, dict]], parts: Parts, diagonal: dict) -> str:
    """Each method's map chosen under the forward arg-max and over every extraction, then every
    extraction's chosen map's AER, all as reported on the reporting pairs; the diagonal beside them."""
    header = (f"{'method':22s} {'chosen map':40s} {'precision':>9s} {'recall':>7s} {'AER':>6s} "
              f"{'chose at':>8s}")
    lines = [f"maps {parts.describe()}", header]
    for name, chosen in best.items():
        for key in ("argmax", "best"):
            row = chosen[key]
            where = f"{map_name(row)}, {EXTRACTIONS[row['extraction']].short}"
            lines.append(f"{name:22s} {where:40s} {row['precision']:9.3f} {row['recall']:7.3f} "
                         f"{row['aer']:6.3f} {row['chosen_aer']:8.3f}")
    lines.append(f"{'diagonal (baseline)':22s} {'target word j to source word (j + ½)·S/T':40s} "
                 f"{diagonal['precision']:9.3f} {diagonal['recall']:7.3f} {diagonal['aer']:6.3f}")
    extractions = [e for e in next(iter(best.values())) if e != "best"]
    named = "; ".join(f"{EXTRACTIONS[e].short} = {e}" for e in extractions)
    lines += ["", f"AER by extraction, each its own chosen map: {named}",
              f"{'method':22s} " + " ".join(f"{EXTRACTIONS[e].short:>10s}" for e in extractions)]
    for name, chosen in best.items():
        lines.append(f"{name:22s} " + " ".join(f"{chosen[e]['aer']:10.3f}" for e in extractions))
    return "\n".join(lines)


def write_links_out(folder: Path, links: dict[str, dict[str, list[set]]], swapped: bool) -> list[Path]:
    """Each method's links as Pharaoh files, one line a gold pair, 1-based, in the gold file's direction
    (swapped back where the model translates the other way): ``<folder>/<method>.links`` its map chosen over
    every extraction, ``<method>.<name>.links`` its map chosen under extraction ``name`` (``argmax``: the
    forward arg-max, which two directions' models symmetrise)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for method, maps in links.items():
        for name, pairs in maps.items():
            if swapped:
                pairs = [{(target, source) for source, target in found} for found in pairs]
            path = folder / (f"{method}.links" if name == "best" else f"{method}.{name}.links")
            write_links(path, pairs, one_based=True)
            written.append(path)
    return written


def gold_report(
    run,
    source: GoldSource,
    options: Explaining,
    *,
    about: dict,
    limit: int | None = None,
    choose_on: int = 0,
    links_out: Path | None = None,
    progress: Callable[[int], object] | None = None,
) -> AlignmentMethodsReport:
    """Score the methods on ``source``'s gold set (its first ``limit`` pairs; None: all) and explain its first
    PICTURED_SENTENCES pairs over their words; write the JSON files, whose result starts with ``about``.
    Each method's map (layer, head, extraction) is chosen on the first ``choose_on`` pairs and its figures
    are those of the others (``Parts``; 0: chosen and reported on the same pairs); with ``links_out``, each
    chosen map's links are written there. ``progress`` is called with the pairs done: each pair once, and
    once more with ``links_out``. The figures are the caller's to draw (``viz.reports``)."""
    dm, model = run.datamodule, run.module.model
    gold, pairs = source.gold, source.gold.pairs[:limit]
    items = gold_items(GoldSet(pairs), dm.src_tokenizer, dm.tgt_tokenizer, model.config.max_len,
                       source.sentences)
    read = reading(items)
    note = "read: " + "; ".join(f"{side} {c['tokens']} tokens, {c['unknown']} unknown, {c['unread_words']} "
                                "words inside another word's token (scored with that word's links)"
                                for side, c in read.items())
    parts = Parts.of(len(items), choose_on)
    choosing_items, reporting_items = items[slice(*parts.choose)], items[slice(*parts.report)]
    check_sure_links(reporting_items, source.links, "reported on" if parts.apart else "scored")
    stem = options.folder / source.name
    json_path = stem.with_name(f"{stem.name}.json")  # the report's path(".json")
    check_new(json_path, options.overwrite)
    options.folder.mkdir(parents=True, exist_ok=True)
    methods, step = options.methods, (progress or (lambda count: None))
    start = time.perf_counter()
    settings = {"methods": methods, "threshold": options.threshold, "ig_steps": options.ig_steps,
                "batch_size": options.batch_size, "full_context": run.module.full_context_layer}
    choosing = gold_alignment(model, choosing_items, progress=step, **settings)
    reporting = choosing if not parts.apart else gold_alignment(model, reporting_items, progress=step,
                                                                **settings)
    choices = {method: choose(scores) for method, scores in choosing.items()}
    best = {method: reported(choices[method], choosing[method], reporting[method]) for method in methods}
    diagonal = diagonal_score(reporting_items)
    links_files = []
    if links_out is not None:
        maps = {method: {name: chosen[name] for name in ("best", "argmax")}
                for method, chosen in choices.items()}
        links = chosen_links(model, items, maps, threshold=options.threshold, ig_steps=options.ig_steps,
                             batch_size=options.batch_size, full_context=run.module.full_context_layer)
        links["diagonal"] = {"best": [diagonal_links(item.source.count, item.target.count) for item in items]}
        step(len(items))
        links_files = [str(path) for path in write_links_out(links_out, links, source.swapped)]
    seconds = time.perf_counter() - start
    sure, possible = (sum(len(item.sure) for item in reporting_items),
                      sum(len(item.possible) for item in reporting_items))
    result = {
        **about, "direction": source.direction, "sentences": len(items),
        "parts": parts.as_dict() | {"about": parts.describe()}, "sure_links": sure,
        "possible_links": possible, "dropped_links": gold.dropped, "read": read,
        "options": {"ig_steps": options.ig_steps, "threshold": options.threshold}, "seconds": seconds,
        "best": {method: {e: row for e, row in rows.items() if e != "best"} for method, rows in best.items()},
        "chosen": {method: chosen["best"] for method, chosen in best.items()},
        "diagonal": diagonal, "links_out": links_files,
        "method_seconds": {method: choosing[method].seconds + (parts.apart and reporting[method].seconds)
                           for method in methods},
    }
    every = {"scores": {method: as_dict(scores) for method, scores in reporting.items()},
             "table": flat_table({method: scores.alignment_scores() for method, scores in reporting.items()})}
    if parts.apart:
        every["choosing_scores"] = {method: as_dict(scores) for method, scores in choosing.items()}
    text = json.dumps(result | every, indent=1, ensure_ascii=False)
    write_whole(json_path, lambda staged: staged.write_text(text, encoding="utf-8"))
    sentences = [explain_sentence(model, dm, pair, methods, options.ig_steps, gold=item)
                 for pair, item in zip(pairs[:PICTURED_SENTENCES], items, strict=False)]
    aers = {method: {e: row["aer"] for e, row in named.items()} for method, named in result["best"].items()}
    figures = {method: scores.alignment_scores() for method, scores in reporting.items()}
    report = AlignmentMethodsReport(figures, sentences, stem, result, lens_files=[], extractions=aers,
                                    table=best_text(best, parts, diagonal), note=note)
    for number, sentence in enumerate(sentences, start=1):
        report.lens_files.append(write_lens(sentence, report.path(f"_sentence{number}_lens.json")))
    return report
