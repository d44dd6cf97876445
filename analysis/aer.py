"""Alignment error rate on word links, with sure and possible gold links (Och & Ney 2003, section 5).

A link is a pair ``(source word, target word)``. The gold marks some links sure (``S``) and others possible
only; ``P`` is both together, so ``S ⊆ P``. For proposed links ``A``, summed over the corpus:

    precision = |A ∩ P| / |A|      recall = |A ∩ S| / |S|      AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

A possible link is never a mistake to propose (it counts in ``A ∩ P``) nor to leave out (it is not in ``S``).
With every gold link sure, AER is 1 − F1. Plain Python: sets of links in, numbers out.
"""

from collections.abc import Sequence
from dataclasses import dataclass

Link = tuple[int, int]


@dataclass(frozen=True)
class AERScore:
    precision: float  # |A ∩ P| / |A|; 0 where nothing was proposed
    recall: float  # |A ∩ S| / |S|; 0 where the gold has no sure link
    aer: float  # 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|), 0 (perfect) .. 1


@dataclass(frozen=True)
class LinkCounts:
    """The four counts AER is made of, summed over sentences (``+`` adds two batches' counts)."""

    a_and_s: int = 0  # |A ∩ S|
    a_and_p: int = 0  # |A ∩ P|
    a: int = 0  # |A|
    s: int = 0  # |S|

    @classmethod
    def of(cls, predicted: set[Link], sure: set[Link], possible: set[Link]) -> "LinkCounts":
        """One sentence's counts; ``possible`` holds the possible-only links (``P`` = ``sure | possible``)."""
        return cls(
            a_and_s=len(predicted & sure),
            a_and_p=len(predicted & (sure | possible)),
            a=len(predicted),
            s=len(sure),
        )

    def __add__(self, other: "LinkCounts") -> "LinkCounts":
        return LinkCounts(
            self.a_and_s + other.a_and_s, self.a_and_p + other.a_and_p, self.a + other.a, self.s + other.s
        )

    def score(self) -> AERScore:
        """Precision, recall and AER of these counts.

        Raises:
            ValueError: nothing proposed and no sure gold link: there is nothing to score.
        """
        if self.a + self.s == 0:
            raise ValueError("no proposed links and no sure gold links: AER is undefined")
        return AERScore(
            precision=self.a_and_p / self.a if self.a else 0.0,
            recall=self.a_and_s / self.s if self.s else 0.0,
            aer=1.0 - (self.a_and_s + self.a_and_p) / (self.a + self.s),
        )


def count_links(
    predicted: Sequence[set[Link]], sure: Sequence[set[Link]], possible: Sequence[set[Link]]
) -> LinkCounts:
    """The counts summed over a corpus: ``predicted[k]``, ``sure[k]`` and ``possible[k]`` (possible-only
    links) belong to sentence ``k``.

    Raises:
        ValueError: the three sequences have different lengths.
    """
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"{len(predicted)} predicted alignments for {len(sure)} sure and {len(possible)} possible "
            "gold ones"
        )
    total = LinkCounts()
    for a, s, p in zip(predicted, sure, possible, strict=True):
        total += LinkCounts.of(set(a), set(s), set(p))
    return total


def score_links(
    predicted: Sequence[set[Link]], sure: Sequence[set[Link]], possible: Sequence[set[Link]]
) -> AERScore:
    """Corpus precision, recall and AER (see the module's docstring and :func:`count_links`)."""
    return count_links(predicted, sure, possible).score()
