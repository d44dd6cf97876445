"""``evaluate.py explain CKPT``: every explanation method scored against the gold alignments of a split, as
one JSON table (method × layer: AER and agreement), and its first sentences explained, as numbers (an
``AlignmentMethodsReport``) that ``viz.reports.draw_alignment_methods`` draws.

Files written to the analysis folder (``--analysis-out``, default ``<run>/analysis/<checkpoint>``):
    alignment_methods_<data>.json                  the table, per-head scores, the options and timings
    alignment_methods_<data>_sentence<k>_lens.json the logit lens of sentence k
and, by viz.reports:
    alignment_methods_<data>_aer.png     methods × layers AER (and ``_agreement.png``)
    alignment_methods_<data>_heads_<method>.png   layers × heads AER of each method that has heads
    alignment_methods_<data>_sentence<k>.png      sentence k under every method, gold links circled
    alignment_methods_<data>_sentence<k>_lens.png the logit lens of sentence k
"""

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analysis.explain.attributions import IG_STEPS
from analysis.explain.logit_lens import LogitLens
from analysis.explain.scores import AlignmentScores
from analysis.explain.trace import Explanation
from analysis.word_alignment import THRESHOLD
from data.pairs import Pair
from evaluation.inputs import check_new, write_whole

PICTURED_SENTENCES = 3
DEFAULT_SENTENCES = 200  # of a split, without --alignment-sentences


def flat_table(scores: dict[str, AlignmentScores]) -> list[dict]:
    """method -> scores (``evaluation.explanations.explanation_alignment``) as rows {method, layer, aer,
    agreement}."""
    return [{"method": name, **dataclasses.asdict(row)} for name, method in scores.items()
            for row in method.layers]


def table_text(rows: list[dict]) -> str:
    """The rows of ``flat_table`` as a table for people."""
    lines = [f"{'method':22s} {'layer':12s} {'AER':>6s} {'agreement':>10s}"]
    for row in rows:
        lines.append(f"{row['method']:22s} {row['layer']:12s} {row['aer']:6.3f} {row['agreement']:10.3f}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Explaining:
    """How the explanation methods are scored, and where their files go (evaluate.py explain's options)."""

    folder: Path  # the analysis folder
    methods: list[str]  # names of ``analysis.explain.registry.METHODS``, checked where a person gave them
    ig_steps: int = IG_STEPS  # Integrated Gradients' points of the path integral
    batch_size: int = 32  # sentences a pass
    threshold: float = THRESHOLD  # the thresholded extractions' share of a row (and column), on words
    overwrite: bool = False  # replace the report's files


@dataclass
class ExplainedSentence:
    """One pair under every method and the logit lens, with the tokens that label them (EOS last)."""

    pair: Pair
    source: list[str]  # S source tokens
    target: list[str]  # T target tokens: the rows of every map (unless ``words``) and the lens's columns
    explanations: dict[str, Explanation]  # method -> its explanation of this sentence (B = 1)
    lens: LogitLens  # B = 1
    top_tokens: list[list[list[str]]]  # (L, T, k) each layer's most probable readings
    # (source words, target words) where the explanations are over the pair's words (a gold set's), not tokens
    words: tuple[list[str], list[str]] | None = None

    @property
    def axes(self) -> tuple[list[str], list[str]]:
        """The labels of the explanations' columns and rows: words, or tokens."""
        return self.words if self.words is not None else (self.source, self.target)

    @property
    def layer_labels(self) -> list[str]:
        return [f"layer {i + 1}" for i in range(len(self.top_tokens))]


@dataclass
class AlignmentMethodsReport:
    """What evaluate.py explain computed: the scores, the pictured sentences, and where its files go."""

    scores: dict[str, AlignmentScores]  # method -> scores (``evaluation.explanations.explanation_alignment``)
    sentences: list[ExplainedSentence]  # the first PICTURED_SENTENCES pairs
    stem: Path  # every file is named f"{stem.name}_...", in stem's folder
    result: dict  # the JSON object evaluate.py prints last
    lens_files: list[Path]  # the logit lens JSON of each pictured sentence (the table is path(".json"))
    # on a gold set (``evaluation.gold_report``): method -> extraction -> its best AER over layers and heads
    extractions: dict[str, dict[str, float]] | None = None
    table: str = ""  # the scores as a table for people (stdout)
    note: str = ""  # what a person should know of how the pairs were read (stderr), if anything

    def path(self, suffix: str) -> Path:
        """The report's file ``<stem><suffix>``, e.g. ``path("_aer.png")``."""
        return self.stem.with_name(f"{self.stem.name}{suffix}")


def explain_sentence(model, dm, pair: Pair, methods, ig_steps: int, gold=None) -> ExplainedSentence:
    """``pair`` under every method in ``methods``, and its logit lens; with ``gold``, its
    ``evaluation.gold_alignment.GoldItem``, the pair is read word by word and explained over its words."""
    from evaluation.explanations import explain_pass, lens_of
    from evaluation.forced import sentence_pass
    from evaluation.gold_alignment import BatchWords, word_explanation

    if gold is None:
        src_ids, tgt_ids = dm.src_tokenizer.encode(pair.source), dm.tgt_tokenizer.encode(pair.target)
    else:
        src_ids, tgt_ids = gold.source.ids, gold.target.ids
    seen = sentence_pass(model, src_ids, tgt_ids, where="explain")
    explanations, lens = explain_pass(seen, methods, ig_steps=ig_steps), lens_of(model, seen)
    words = None
    if gold is not None:
        batch = BatchWords.of([gold], seen.batch)
        explanations = {name: word_explanation(e, batch) for name, e in explanations.items()}
        words = list(pair.words("source")), list(pair.words("target"))
    source, _, target = seen.tokens(dm.src_tokenizer, dm.tgt_tokenizer)
    top = [[dm.tgt_tokenizer.tokens(lens.top_ids[0, layer, t].tolist()) for t in range(len(target))]
           for layer in range(lens.produced_prob.size(1))]  # (L, T, k) token strings
    return ExplainedSentence(pair, source, target, explanations, lens, top, words)


def write_lens(sentence: ExplainedSentence, path: Path) -> Path:
    """The sentence's logit lens as JSON: per layer and target position, the produced token's probability and
    rank, and the top k readings."""
    about = {"source": sentence.source, "target": sentence.target, "layers": [
        {"layer": label, "positions": [_lens_position(sentence, i, t) for t in range(len(sentence.target))]}
        for i, label in enumerate(sentence.layer_labels)
    ]}
    text = json.dumps(about, ensure_ascii=False, indent=1)
    return write_whole(path, lambda staged: staged.write_text(text, encoding="utf-8"))


def _lens_position(sentence: ExplainedSentence, layer: int, t: int) -> dict:
    """What a layer reads at target position t: the produced token's probability and rank, and the top k."""
    lens = sentence.lens
    probs = lens.top_probs[0, layer, t].tolist()
    return {
        "produced": sentence.target[t], "prob": float(lens.produced_prob[0, layer, t]),
        "rank": int(lens.produced_rank[0, layer, t]),
        "top": [{"token": token, "prob": p} for token, p in zip(sentence.top_tokens[layer][t], probs)],
    }


def alignment_methods_report(run, pairs: list[Pair], name: str, options: Explaining, *, about: dict,
                             progress: Callable[[int], object] | None = None) -> AlignmentMethodsReport:
    """Score the methods on ``pairs`` (a split's, with gold links on their tokens) and explain the first
    PICTURED_SENTENCES; write the JSON files, named after ``name`` (the data's), whose result starts with
    ``about``; ``progress`` is called with the pairs scored. The figures are the caller's to draw
    (``viz.reports.draw_alignment_methods``)."""
    from evaluation.alignment import check_alignable
    from evaluation.explanations import explanation_alignment

    dm, model = run.datamodule, run.module.model
    check_alignable(pairs, dm.src_tokenizer, dm.tgt_tokenizer, "explain")
    stem = options.folder / f"alignment_methods_{name}"
    json_path = stem.with_name(f"{stem.name}.json")  # the report's path(".json")
    check_new(json_path, options.overwrite)
    options.folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    scores = explanation_alignment(
        model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, methods=options.methods, ig_steps=options.ig_steps,
        batch_size=options.batch_size, option="explain", progress=progress,
        full_context=run.module.full_context_layer,
    )
    seconds = time.perf_counter() - start
    rows = flat_table(scores)
    pictured = pairs[:PICTURED_SENTENCES]
    sentences = [explain_sentence(model, dm, pair, options.methods, options.ig_steps) for pair in pictured]
    result = {
        **about, "global_step": run.global_step, "sentences": len(pairs),
        "options": {"ig_steps": options.ig_steps}, "seconds": seconds, "table": rows,
        "best": {name: dataclasses.asdict(method.best) for name, method in scores.items()},
        "heads": {name: dataclasses.asdict(method.heads) for name, method in scores.items()
                  if method.heads is not None},
        "method_seconds": {name: method.seconds for name, method in scores.items()},
    }
    text = json.dumps(result, indent=1)
    write_whole(json_path, lambda staged: staged.write_text(text, encoding="utf-8"))
    report = AlignmentMethodsReport(scores, sentences, stem, result, lens_files=[], table=table_text(rows))
    for number, sentence in enumerate(sentences, start=1):
        report.lens_files.append(write_lens(sentence, report.path(f"_sentence{number}_lens.json")))
    return report
