"""Every explanation method scored against a gold word alignment set, on the gold set's own words.

The model reads each gold pair as its words joined by single spaces, teacher-forced on the gold target
(``data.words``: the word of each token); each method's token maps are aggregated into word maps, links are
read off them in each way of ``analysis.word_alignment.EXTRACTIONS`` and counted against the sure and possible
gold links, per layer and per head where the method has heads (``analysis.word_alignment``). On data of one
token per word this is the token path of ``evaluation.explanations`` except that EOS is no candidate link.

Shape legend: B sentences, L layers, H heads, T target tokens (EOS last), S source tokens (EOS last),
Tw target words, Sw source words.
"""

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analysis.aer import score_links
from analysis.explain.registry import METHODS, explain
from analysis.explain.scores import AlignmentScores, HeadScores, LayerScore
from analysis.explain.trace import Explanation
from analysis.heads import gold_matrix
from analysis.word_alignment import (
    EXTRACTIONS,
    NO_WORD,
    THRESHOLD,
    aer_of_counts,
    agreement_counts,
    extract,
    link_counts,
    read_through,
    word_maps,
    word_valid,
)
from data.batching import Batch, check_fits
from data.corpora import CorpusError
from data.gold import GoldSet
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from data.words import WordTokens, encode_pair_words
from evaluation.forced import forced_pass
from evaluation.translate import length_sorted_batches
from model import Transformer

Link = tuple[int, int]


@dataclass(frozen=True)
class GoldItem:
    """One gold pair as the model reads it, with its links (0-based (source word, target word))."""

    source: WordTokens
    target: WordTokens
    sure: set[Link]
    possible: set[Link]  # possible-only


def encode_gold(gold: GoldSet, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> list[GoldItem]:
    """The gold pairs tokenized word by word (``data.words``), in the set's order."""
    items = []
    for pair in gold.pairs:
        source, target = encode_pair_words(pair, src_tokenizer, tgt_tokenizer)
        items.append(GoldItem(source, target, set(pair.alignment or ()), set(pair.possible or ())))
    return items


def reading(items: Sequence[GoldItem]) -> dict[str, dict[str, int]]:
    """Per side, how the model reads the gold: its ``tokens``, those it reads as ``unknown``, and the
    ``unread_words``, words without a token of their own (inside a token that spells the word before, where
    the text the model reads joins two gold words: the gold's ``な ろ`` in MeCab's ``なろ``), which are scored
    with the links of the word they are read through (``data.words.word_readers``)."""
    counts = {}
    for side in ("source", "target"):
        read = [getattr(item, side) for item in items]
        counts[side] = {"tokens": sum(len(r.ids) for r in read),
                        "unknown": sum(r.ids.count(SPECIALS.unk_id) for r in read),
                        "unread_words": sum(r.count - len(set(r.words) - {NO_WORD}) for r in read)}
    return counts


def fits(item: GoldItem, max_len: int) -> bool:
    """Whether a model of ``max_len`` positions reads the pair (source + EOS, BOS + target)."""
    return max(len(item.source.ids), len(item.target.ids)) + 1 <= max_len


def gold_items(
    gold: GoldSet, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, max_len: int, where: str
) -> list[GoldItem]:
    """``encode_gold``, each pair checked to fit the model.

    Raises:
        CorpusError: a pair the model cannot read in ``max_len`` positions, named by ``where`` (the sentences
            file) and its line.
    """
    items = encode_gold(gold, src_tokenizer, tgt_tokenizer)
    check_fits([(i, item.source.ids, item.target.ids) for i, item in enumerate(items)], max_len,
               lambda index, side: (where, index + 1))
    return items


def check_sure_links(items: Sequence[GoldItem], where: str, scored: str = "scored") -> None:
    """The rule for gold pairs about to be scored, in evaluate.py and in training alike: at least one of them
    has a sure link, else every method's AER is 1.0 whatever the model does.

    Raises:
        CorpusError: none has (every link past its sentence's end, say), named by ``where`` (the links file);
            the message calls the pairs ``scored`` (``reported on``, where other pairs chose the maps).
    """
    if not any(item.sure for item in items):
        raise CorpusError(where, None,
                          f"the {len(items)} pairs {scored} have no sure gold link to score against")


def token_cells(item: GoldItem, links) -> list[list[int]]:
    """Word links (source, target) as the [row, column] cells of the token map that reads the pair: every
    (target token, source token) pair of the two words' tokens, sorted."""
    rows: dict[int, list[int]] = {}
    columns: dict[int, list[int]] = {}
    for position, word in enumerate(item.target.words):
        rows.setdefault(word, []).append(position)
    for position, word in enumerate(item.source.words):
        columns.setdefault(word, []).append(position)
    return sorted([row, column] for source, target in links
                  for row in rows.get(target, ()) for column in columns.get(source, ()))


@dataclass(frozen=True)
class BatchWords:
    """A batch's token → word indices (``NO_WORD`` for EOS and padding) and its gold links as matrices."""

    src_words: Tensor  # (B, S) int64
    tgt_words: Tensor  # (B, T) int64: the word of each token produced
    sure: Tensor  # (B, Tw, Sw) bool
    possible: Tensor  # (B, Tw, Sw) bool, possible-only
    src_readers: Tensor  # (B, Sw) int64: the word each source word is read through (NO_WORD: none, padding)
    tgt_readers: Tensor  # (B, Tw) int64

    @classmethod
    def of(cls, items: Sequence[GoldItem], batch: Batch) -> "BatchWords":
        chosen = [items[i] for i in batch.index.tolist()]
        src_words = torch.full(batch.src.shape, NO_WORD, dtype=torch.int64)  # (B, S)
        tgt_words = torch.full(batch.tgt_out.shape, NO_WORD, dtype=torch.int64)  # (B, T)
        for row, item in enumerate(chosen):
            src_words[row, : len(item.source.words)] = torch.tensor(item.source.words, dtype=torch.int64)
            tgt_words[row, : len(item.target.words)] = torch.tensor(item.target.words, dtype=torch.int64)
        Sw, Tw = max(item.source.count for item in chosen), max(item.target.count for item in chosen)
        sure = gold_matrix([item.sure for item in chosen], Tw, Sw)
        possible = gold_matrix([item.possible for item in chosen], Tw, Sw)
        return cls(src_words, tgt_words, sure, possible, readers([item.source for item in chosen], Sw),
                   readers([item.target for item in chosen], Tw))

    def read(self, links: Tensor) -> Tensor:
        """(B, M, Tw, Sw) links with each word read through its reader (``read_through``)."""
        return read_through(links, self.src_readers, self.tgt_readers)


def readers(sides: Sequence[WordTokens], count: int) -> Tensor:
    """(len(sides), count) int64: each side's word readers (``data.words.word_readers``), ``NO_WORD`` past
    its words."""
    table = torch.full((len(sides), count), NO_WORD, dtype=torch.int64)
    for row, side in enumerate(sides):
        table[row, : side.count] = torch.tensor(side.readers, dtype=torch.int64)
    return table


def word_explanation(explanation: Explanation, words: BatchWords) -> Explanation:
    """An explanation over tokens as one over words: a source word sums its tokens' columns, a target word
    averages its tokens' rows (``analysis.word_alignment.word_maps``); the rows and columns without a reading
    are left out, and the words with none are not valid."""
    e = explanation
    tgt_words = words.tgt_words.masked_fill(~e.tgt_valid.cpu(), NO_WORD)  # (B, T)
    src_words = words.src_words.masked_fill(~e.src_valid.cpu(), NO_WORD)  # (B, S)
    Tw, Sw = words.sure.shape[1:]
    per_layer = word_maps(e.per_layer.cpu(), src_words, tgt_words, Sw, Tw)  # (B, L, Tw, Sw)
    per_head = None if e.per_head is None else word_maps(e.per_head.cpu(), src_words, tgt_words, Sw, Tw)
    return Explanation(e.method, per_layer, per_head, e.layers, word_valid(src_words, Sw),
                       word_valid(tgt_words, Tw), e.signed)


@dataclass
class WordCounts:
    """One method's corpus counts: per extraction (4, L) and (4, L, H) link counts (``link_counts``), and the
    forward arg-max's (2, L) and (2, L, H) agreement counts; add batches with ``+``."""

    layer: dict[str, Tensor]
    head: dict[str, Tensor] | None
    agreement: Tensor
    head_agreement: Tensor | None

    def __add__(self, other: "WordCounts") -> "WordCounts":
        def add(first, second):
            return None if first is None else {name: first[name] + second[name] for name in first}

        heads = None if self.head_agreement is None else self.head_agreement + other.head_agreement
        return WordCounts(add(self.layer, other.layer), add(self.head, other.head),
                          self.agreement + other.agreement, heads)


def count_words(words: Explanation, batch: BatchWords, extractions: Sequence[str], threshold: float
                ) -> WordCounts:
    """The counts of one batch's word-level explanation (``word_explanation``)."""
    B, L, Tw, Sw = words.per_layer.shape

    def count(maps: Tensor) -> tuple[dict[str, Tensor], Tensor]:  # (B, M, Tw, Sw) -> (4, M) each, (2, M)
        links = extract(maps, words.src_valid, words.tgt_valid, extractions, threshold=threshold)
        links = {name: batch.read(found) for name, found in links.items()}
        counts = {name: link_counts(found, batch.sure, batch.possible) for name, found in links.items()}
        return counts, agreement_counts(links["argmax"], batch.sure, batch.possible)

    layer, agreement = count(words.per_layer)
    if words.per_head is None:
        return WordCounts(layer, None, agreement, None)
    H = words.per_head.size(2)
    head, head_agreement = count(words.per_head.reshape(B, L * H, Tw, Sw))  # layers folded into heads
    return WordCounts(layer, {name: c.view(4, L, H) for name, c in head.items()}, agreement,
                      head_agreement.view(2, L, H))


@dataclass(frozen=True)
class LinkScores:
    precision: list  # (L,) or (L, H)
    recall: list
    aer: list


@dataclass(frozen=True)
class WordAlignmentScores:
    """One method's figures against a gold set: per extraction, precision, recall and AER per layer and per
    head (where the method has heads), and the forward arg-max's agreement."""

    layers: tuple[str, ...]
    per_layer: dict[str, LinkScores]  # extraction -> (L,) each
    per_head: dict[str, LinkScores] | None  # extraction -> (L, H) each
    agreement: list[float]  # (L,)
    head_agreement: list[list[float]] | None  # (L, H)
    seconds: float = 0.0

    def alignment_scores(self) -> AlignmentScores:
        """The forward arg-max's AER and agreement, as every reader of ``analysis.explain.scores`` takes them
        (the logger, the ATTENTION tab, the report's figures)."""
        forward = self.per_layer["argmax"]
        rows = tuple(LayerScore(name, aer, agreement)
                     for name, aer, agreement in zip(self.layers, forward.aer, self.agreement, strict=True))
        heads = None
        if self.per_head is not None:
            heads = HeadScores(self.per_head["argmax"].aer, self.head_agreement)
        return AlignmentScores(rows, heads, self.seconds)

    def candidates(self, extraction: str) -> list[tuple[float, int, int | None]]:
        """Every map under ``extraction`` as (AER, layer index, head index or None for the layer's own map),
        layers before heads."""
        found = [(aer, i, None) for i, aer in enumerate(self.per_layer[extraction].aer)]
        if self.per_head is not None:
            found += [(aer, i, h) for i, row in enumerate(self.per_head[extraction].aer)
                      for h, aer in enumerate(row)]
        return found

    def at(self, extraction: str, layer: int, head: int | None) -> dict:
        """One map's figures: its layer's name, head (counted from 1; None for a layer's own map),
        precision, recall and AER."""
        scores = self.per_layer[extraction] if head is None else self.per_head[extraction]

        def value(values: list) -> float:
            return values[layer] if head is None else values[layer][head]

        return {"layer": self.layers[layer], "head": None if head is None else head + 1,
                "precision": value(scores.precision), "recall": value(scores.recall),
                "aer": value(scores.aer)}

    def best(self, extraction: str) -> dict:
        """The map of lowest AER under ``extraction`` (the first of ties), as :meth:`at` gives it."""
        _, layer, head = min(self.candidates(extraction), key=lambda candidate: candidate[0])
        return self.at(extraction, layer, head)


@dataclass(frozen=True)
class Choice:
    """One map of a method: an extraction, a layer (index) and a head (index, or None for the layer's map)."""

    extraction: str
    layer: int
    head: int | None


def choose(scores: WordAlignmentScores, extractions: Sequence[str] | None = None) -> dict[str, Choice]:
    """Per extraction, the map of lowest AER in ``scores`` (the first of ties), and under ``"best"`` the
    lowest of them all (the first extraction of ties, in ``extractions``' order, default every one
    scored)."""
    chosen, lowest = {}, None
    for extraction in extractions or list(scores.per_layer):
        aer, layer, head = min(scores.candidates(extraction), key=lambda candidate: candidate[0])
        chosen[extraction] = Choice(extraction, layer, head)
        if lowest is None or aer < lowest[0]:
            lowest = (aer, chosen[extraction])
    assert lowest is not None
    return chosen | {"best": lowest[1]}


def reported(choices: dict[str, Choice], choosing: WordAlignmentScores, reporting: WordAlignmentScores
             ) -> dict[str, dict]:
    """Each choice's figures on the reporting pairs (``at``), with its extraction and its AER on the pairs
    that chose it (``chosen_aer``)."""
    return {name: reporting.at(c.extraction, c.layer, c.head)
            | {"extraction": c.extraction, "chosen_aer": choosing.at(c.extraction, c.layer, c.head)["aer"]}
            for name, c in choices.items()}


@dataclass(frozen=True)
class Parts:
    """Which gold pairs choose each method's map and which report it (0-based ``[start, end)`` of the items
    scored); the same pairs where the set has too few to part."""

    choose: tuple[int, int]
    report: tuple[int, int]

    @classmethod
    def of(cls, count: int, choose: int) -> "Parts":
        """The first ``choose`` pairs choose and the others report; all ``count`` pairs do both where they are
        no more than ``choose`` (or ``choose`` is 0)."""
        if 0 < choose < count:
            return cls((0, choose), (choose, count))
        return cls((0, count), (0, count))

    @property
    def apart(self) -> bool:
        return self.choose != self.report

    def describe(self) -> str:
        """``chosen on gold pairs 1–100, reported on pairs 101–582 (482)``, counted from 1."""
        (a, b), (c, d) = self.choose, self.report
        if not self.apart:
            return f"chosen and reported on the same gold pairs 1–{b} ({b}): no pairs held out to report on"
        return f"chosen on gold pairs {a + 1}–{b}, reported on pairs {c + 1}–{d} ({d - c})"

    def as_dict(self) -> dict:
        (a, b), (c, d) = self.choose, self.report
        return {"choose": [a + 1, b], "report": [c + 1, d], "apart": self.apart}


def diagonal_links(source_words: int, target_words: int) -> set[Link]:
    """The baseline a map must beat: each target word ``j`` (0-based) linked to the source word under its
    middle, ``⌊(j + ½) · |src| / |tgt|⌋``, the diagonal of the pair's word grid."""
    return {((2 * j + 1) * source_words // (2 * target_words), j) for j in range(target_words)}


def diagonal_score(items: Sequence[GoldItem]) -> dict:
    """The diagonal's precision, recall and AER on ``items``, by ``analysis.aer``'s scorer."""
    score = score_links([diagonal_links(item.source.count, item.target.count) for item in items],
                        [item.sure for item in items], [item.possible for item in items])
    return {"precision": score.precision, "recall": score.recall, "aer": score.aer}


def _scores(counts: Tensor) -> LinkScores:
    precision, recall, aer = aer_of_counts(counts)
    return LinkScores(precision.tolist(), recall.tolist(), aer.tolist())


def word_scores(counts: WordCounts, layers: tuple[str, ...], seconds: float = 0.0) -> WordAlignmentScores:
    """The figures of a method's corpus counts."""
    heads = None if counts.head is None else {name: _scores(c) for name, c in counts.head.items()}

    def share(hits_aligned: Tensor) -> list:
        hits, aligned = hits_aligned.double()
        return torch.where(aligned > 0, hits / aligned.clamp_min(1), 0.0).tolist()

    head_agreement = None if counts.head_agreement is None else share(counts.head_agreement)
    return WordAlignmentScores(layers, {name: _scores(c) for name, c in counts.layer.items()}, heads,
                               share(counts.agreement), head_agreement, seconds)


def gold_alignment(
    model: Transformer,
    items: Sequence[GoldItem],
    *,
    methods: Sequence[str] = tuple(METHODS),
    extractions: Sequence[str] = tuple(EXTRACTIONS),
    threshold: float = THRESHOLD,
    ig_steps: int | None = None,
    batch_size: int = 32,
    progress=None,
    full_context: int | None = None,
) -> dict[str, WordAlignmentScores]:
    """Every method's figures on the gold items (``gold_items``), teacher-forced on the gold targets.

    ``extractions`` always include the forward ``argmax`` (the agreement and the tab read it). Returns
    method -> its scores, with ``seconds`` its own time after the shared forward pass; ``progress`` is called
    with the number of sentences done after each batch; ``full_context``: the layer read with the whole
    target in view (``forced_pass``). The gradient methods need to run outside ``torch.inference_mode``.
    """
    if not items:
        raise ValueError("no gold sentence pairs to score")
    extractions = ["argmax", *(name for name in extractions if name != "argmax")]
    counts: dict[str, WordCounts] = {}
    layers: dict[str, tuple[str, ...]] = {}
    seconds = dict.fromkeys(methods, 0.0)
    sources, targets = [item.source.ids for item in items], [item.target.ids for item in items]
    for batch in length_sorted_batches(sources, targets, batch_size):
        trace = forced_pass(model, batch, full_context=full_context).trace
        words = BatchWords.of(items, batch)
        for name in methods:
            start = time.perf_counter()
            explanation = word_explanation(explain(name, trace, ig_steps=ig_steps), words)
            batch_counts = count_words(explanation, words, extractions, threshold)
            seconds[name] += time.perf_counter() - start
            counts[name] = batch_counts if name not in counts else counts[name] + batch_counts
            layers[name] = explanation.layers
        if progress is not None:
            progress(len(batch.index))
    return {name: word_scores(counts[name], layers[name], seconds[name]) for name in methods}


def chosen_links(
    model: Transformer,
    items: Sequence[GoldItem],
    choices: dict[str, dict[str, Choice]],
    *,
    threshold: float = THRESHOLD,
    ig_steps: int | None = None,
    batch_size: int = 32,
    full_context: int | None = None,
) -> dict[str, dict[str, list[set[Link]]]]:
    """Per method of ``choices`` and per name of its chosen maps (``"best"``, ``"argmax"``, ...), the links
    that map proposes for each of ``items`` (0-based ``(source word, target word)``, in the items' order),
    read as ``gold_alignment`` scores them (``full_context`` too); each method explains a batch once for all
    its maps."""
    links = {method: {name: [set() for _ in items] for name in maps} for method, maps in choices.items()}
    sources, targets = [item.source.ids for item in items], [item.target.ids for item in items]
    for batch in length_sorted_batches(sources, targets, batch_size):
        trace = forced_pass(model, batch, full_context=full_context).trace
        words = BatchWords.of(items, batch)
        for method, maps in choices.items():
            e = word_explanation(explain(method, trace, ig_steps=ig_steps), words)
            for name, choice in maps.items():
                if choice.head is None:
                    chosen = e.per_layer[:, choice.layer]  # (B, Tw, Sw)
                else:
                    chosen = e.per_head[:, choice.layer, choice.head]  # (B, Tw, Sw)
                found = extract(chosen.unsqueeze(1), e.src_valid, e.tgt_valid, [choice.extraction],
                                threshold=threshold)[choice.extraction]  # (B, 1, Tw, Sw)
                found = words.read(found)[:, 0]
                for row, index in enumerate(batch.index.tolist()):
                    links[method][name][index] = {(s, t) for t, s in found[row].nonzero().tolist()}
    return links


def as_dict(scores: WordAlignmentScores) -> dict:
    """The figures as JSON-ready lists (every extraction, layer and head)."""
    return dataclasses.asdict(scores)
