"""The unit of parallel data: one source sentence, its translation and, when known, their word alignment."""

from dataclasses import dataclass

Links = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Pair:
    """A source sentence and its target sentence, both plain text with words separated by single spaces.

    ``alignment`` holds the gold links ``(source_word_index, target_word_index)``: 0-based positions among
    the words of each side, sorted by target position. It is ``None`` when unknown (real corpora) and known
    for the built-in toy tasks and gold alignment sets. These are the *sure* links; ``possible`` holds the
    links that a gold set marks as possible only (Och & Ney 2003: an aligner is not faulted for proposing
    them nor for leaving them out); ``None`` or empty where every gold link is sure.

    The words of a side are ``text.split()``, unless the side is written without spaces between its words
    (Chinese, Japanese): then ``source_words`` / ``target_words`` give the segmentation the links index, and
    the text is those words joined with or without spaces (see :func:`word_spans`).
    """

    source: str
    target: str
    alignment: Links | None = None
    possible: Links | None = None
    source_words: tuple[str, ...] | None = None
    target_words: tuple[str, ...] | None = None

    def words(self, side: str) -> tuple[str, ...]:
        """The words the alignment indexes on ``side`` (``"source"`` or ``"target"``)."""
        if side == "source":
            return self.source_words if self.source_words is not None else tuple(self.source.split())
        return self.target_words if self.target_words is not None else tuple(self.target.split())


def word_spans(text: str, words: tuple[str, ...] | list[str]) -> list[tuple[int, int]]:
    """The ``[start, end)`` character span of each word in ``text``, which writes the words in order, each
    followed by any amount of whitespace (none for scripts without spaces).

    So a token whose characters fall in word ``i``'s span belongs to word ``i``, whatever the tokenizer.

    Raises:
        ValueError: ``text`` does not spell ``words`` in order (names the first word that is not found).
    """
    spans, position = [], 0
    for number, word in enumerate(words):
        while position < len(text) and text[position].isspace():
            position += 1
        if not word or not text.startswith(word, position):
            raise ValueError(f"word {number + 1} ({word!r}) is not at character {position} of {text!r}")
        spans.append((position, position + len(word)))
        position += len(word)
    if text[position:].strip():
        raise ValueError(f"{text!r} goes on after its {len(words)} words: {text[position:]!r}")
    return spans
