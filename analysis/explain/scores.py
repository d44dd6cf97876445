"""AER and agreement of an explanation against gold word alignments, per layer and per head.

Any method's rows are read the same way: target token t aligns to its row's highest-scoring valid source
position (``analysis.heads.alignment_counts``), and counts summed over batches give corpus figures.

Shape legend: see ``analysis.explain``.
"""

from dataclasses import dataclass

from torch import Tensor

from analysis.explain.trace import Explanation
from analysis.heads import alignment_counts


@dataclass
class AlignmentCounts:
    """Corpus counts of one method: |A ∩ G| per layer (and per head), |A| and |G|; add batches with ``+``."""

    layer_hits: Tensor  # (L,)
    head_hits: Tensor | None  # (L, H)
    aligned: Tensor  # () aligned target positions
    links: Tensor  # () gold links

    def __add__(self, other: "AlignmentCounts") -> "AlignmentCounts":
        heads = None if self.head_hits is None else self.head_hits + other.head_hits
        return AlignmentCounts(
            self.layer_hits + other.layer_hits, heads, self.aligned + other.aligned, self.links + other.links
        )

    def aer(self, hits: Tensor) -> Tensor:
        """1 − 2|A ∩ G| / (|A| + |G|), Och & Ney 2003 with every gold link sure (``analysis.heads``)."""
        return 1.0 - 2.0 * hits / (self.aligned + self.links)

    def agreement(self, hits: Tensor) -> Tensor:
        return hits / self.aligned

    def scores(self, layers: tuple[str, ...]) -> "AlignmentScores":
        """The corpus figures, per layer (labelled ``layers``) and per head."""
        rows = tuple(
            LayerScore(name, float(a), float(g))
            for name, a, g in zip(layers, self.aer(self.layer_hits), self.agreement(self.layer_hits))
        )
        heads = None
        if self.head_hits is not None:
            heads = HeadScores(self.aer(self.head_hits).tolist(), self.agreement(self.head_hits).tolist())
        return AlignmentScores(rows, heads)


@dataclass(frozen=True)
class LayerScore:
    layer: str  # its label: "layer 1", or "embeddings"
    aer: float
    agreement: float


@dataclass(frozen=True)
class HeadScores:
    aer: list[list[float]]  # (L, H)
    agreement: list[list[float]]  # (L, H)


@dataclass(frozen=True)
class AlignmentScores:
    """One method's AER and agreement against gold links: per layer, and per head where the method has heads.
    Every reader (evaluate.py's report, the logger, the ATTENTION tab) reads these fields, never a dict."""

    layers: tuple[LayerScore, ...]
    heads: HeadScores | None
    seconds: float = 0.0  # the method's own time, after the shared forward pass, where it was measured

    @property
    def best(self) -> LayerScore:
        """The layer of lowest AER (the first of ties)."""
        return min(self.layers, key=lambda row: row.aer)


def count_alignment(explanation: Explanation, gold: list[set[tuple[int, int]]]) -> AlignmentCounts:
    """Counts of the batch's arg-max alignments against ``gold`` (per sentence, (source, target) links)."""
    e = explanation
    B, L, T, S = e.per_layer.shape
    src_valid, tgt_valid = e.src_valid.cpu(), e.tgt_valid.cpu()
    # A gold link on a row without a reading (Shift-Att's EOS row) would be a miss; gold never links EOS.
    layer_hits, aligned, links = alignment_counts(e.per_layer.cpu(), gold, tgt_valid, src_valid)
    head_hits = None
    if e.per_head is not None:
        H = e.per_head.size(2)
        folded = e.per_head.cpu().reshape(B, L * H, T, S)  # (B, L*H, T, S): layers folded into heads
        head_hits = alignment_counts(folded, gold, tgt_valid, src_valid)[0].view(L, H)  # (L, H)
    return AlignmentCounts(layer_hits, head_hits, aligned, links)


def alignment_scores(explanation: Explanation, gold: list[set[tuple[int, int]]]) -> AlignmentScores:
    """AER and agreement of one batch taken as the corpus."""
    return count_alignment(explanation, gold).scores(explanation.layers)
