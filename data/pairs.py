"""The unit of parallel data: one source sentence, its translation and, when known, their word alignment."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """A source sentence and its target sentence, both plain text with words separated by single spaces.

    ``alignment`` holds the gold links ``(source_word_index, target_word_index)``: 0-based positions in
    ``source.split()`` and ``target.split()``, sorted by target position. It is ``None`` when unknown (real
    corpora) and known for the built-in toy tasks, where every target word has at least one link.
    """

    source: str
    target: str
    alignment: tuple[tuple[int, int], ...] | None = None
