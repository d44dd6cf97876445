"""Gold word alignments on disk, in the forms the word-alignment literature ships them.

One line of links a sentence pair, in the Pharaoh form: ``i-j`` a sure link between source word ``i`` and
target word ``j``, ``ipj`` (or ``i?j``) a link the annotators marked possible only (Och & Ney 2003,
section 5), counted from 0 or from 1 (gold sets differ: say which). A line may be empty: a pair with no
links. The sentences come beside them as ``source ||| target`` lines or as two line-aligned files; word
positions refer to their whitespace-split words.

Links past the end of their sentence (six in the KFTT Japanese–English set) are dropped and counted, never a
crash; any other bad input raises one :class:`~data.corpora.CorpusError` naming the file and line.
"""

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from data.corpora import CorpusError, PathLike, read_bitext, read_lines, read_parallel
from data.pairs import Pair
from data.words import loose_characters

Link = tuple[int, int]  # (source word, target word), 0-based
Direction = Literal["auto", "forward", "reversed"]
DIRECTIONS: tuple[Direction, ...] = ("auto", "forward", "reversed")
_LANGUAGES = re.compile(r"^([A-Za-z]{2,3})-([A-Za-z]{2,3})\.")  # ja-en.gold, de-en.src-tgt


def parse_links(line: str, *, one_based: bool) -> tuple[set[Link], set[Link]]:
    """The sure and the possible-only links of one Pharaoh line, 0-based ``(source, target)``.

    A link written both ways (``3-4 3p4``) is sure.

    Raises:
        ValueError: a token is not ``i-j``, ``ipj`` or ``i?j`` with non-negative integers (positive when
            ``one_based``); the message names the token.
    """
    sure, possible = set(), set()
    first = 1 if one_based else 0
    for token in line.split():
        for separator in "-p?":
            source, found, target = token.partition(separator)
            if found:
                break
        else:
            raise ValueError(f"link {token!r} is not i-j (sure), ipj or i?j (possible)")
        if not (source.isascii() and source.isdigit() and target.isascii() and target.isdigit()):
            raise ValueError(f"link {token!r} does not join two word positions (whole numbers)")
        link = (int(source) - first, int(target) - first)
        if min(link) < 0:
            raise ValueError(f"link {token!r} has a position 0, but positions count from 1 here")
        (sure if separator == "-" else possible).add(link)
    return sure, possible - sure


def format_links(links: Iterable[Link], *, one_based: bool = False) -> str:
    """One Pharaoh line of sure links (0-based ``links``), sorted by source then target position: ``0-0 1-2
    2-1``, or counted from 1 with ``one_based`` (as the KFTT and RWTH gold sets count)."""
    first = 1 if one_based else 0
    return " ".join(f"{source + first}-{target + first}" for source, target in sorted(links))


def write_links(path: PathLike, alignments: Iterable[Iterable[Link]], *, one_based: bool = False) -> None:
    """Write one Pharaoh line of sure links a sentence pair, 0-based as aligners print them, or 1-based."""
    lines = "".join(format_links(links, one_based=one_based) + "\n" for links in alignments)
    Path(path).write_text(lines, encoding="utf-8")


def _by_target(links: Iterable[Link]) -> tuple[Link, ...]:
    return tuple(sorted(links, key=lambda link: (link[1], link[0])))


@dataclass(frozen=True)
class GoldSet:
    """Sentence pairs with their gold links, as read by :func:`read_gold`.

    Each pair's ``alignment`` holds its sure links (an empty tuple where the gold has none) and ``possible``
    its possible-only links (``None`` where there are none), both sorted by target then source position.
    """

    pairs: list[Pair]
    dropped: int = 0  # links past the end of their sentence, left out
    dropped_lines: tuple[int, ...] = ()  # the links file's lines (1-based) that had such links

    def sure(self) -> list[set[Link]]:
        """Each pair's sure links, the ``S`` of AER."""
        return [set(pair.alignment or ()) for pair in self.pairs]

    def possible(self) -> list[set[Link]]:
        """Each pair's possible-only links (``P`` of AER is these and the sure ones)."""
        return [set(pair.possible or ()) for pair in self.pairs]

    def reversed(self) -> "GoldSet":
        """The same gold with source and target swapped, for a model that translates the other way."""

        def swap(links: tuple[Link, ...] | None) -> tuple[Link, ...] | None:
            return None if links is None else _by_target((target, source) for source, target in links)

        pairs = [
            Pair(
                pair.target, pair.source, swap(pair.alignment), swap(pair.possible),
                source_words=pair.target_words, target_words=pair.source_words,
            )
            for pair in self.pairs
        ]
        return replace(self, pairs=pairs)

    def summary(self) -> str:
        """One line for the log: how many pairs and links, and what was dropped."""
        sure = sum(len(pair.alignment or ()) for pair in self.pairs)
        possible = sum(len(pair.possible or ()) for pair in self.pairs)
        line = f"gold alignments: {len(self.pairs)} sentence pairs, {sure} sure and {possible} possible links"
        if self.dropped:
            lines = ", ".join(map(str, self.dropped_lines))
            line += f"; dropped {self.dropped} past the end of their sentence (lines {lines})"
        return line


def read_gold(
    sentences: PathLike,
    alignments: PathLike,
    *,
    one_based: bool,
    target_sentences: PathLike | None = None,
) -> GoldSet:
    """Read a gold alignment set.

    Args:
        sentences: ``source ||| target`` lines; or, with ``target_sentences``, the source side's lines.
        alignments: one line of Pharaoh links a sentence pair (see the module's docstring).
        one_based: whether the links count words from 1 (as the KFTT and RWTH sets do) or from 0.
        target_sentences: the target side, line-aligned with ``sentences``.

    Raises:
        CorpusError: a file is unreadable, a link is malformed, or the links file has another number of lines
            than there are sentence pairs.
    """
    if target_sentences is None:
        pairs = read_bitext(sentences)
    else:
        pairs = read_parallel(sentences, target_sentences)
    lines = read_lines(alignments, keep_blank_ends=True)
    if len(lines) != len(pairs):
        shorter = min(len(lines), len(pairs))
        raise CorpusError(
            alignments,
            shorter + 1,
            f"{'ends' if len(lines) < len(pairs) else 'goes on'} after {shorter} lines of links, but "
            f"{os.fspath(sentences)} has {len(pairs)} sentence pairs; give one line a pair (blank for none)",
        )
    gold, dropped, dropped_lines = [], 0, []
    for number, (pair, line) in enumerate(zip(pairs, lines, strict=True), start=1):
        try:
            sure, possible = parse_links(line, one_based=one_based)
        except ValueError as e:
            raise CorpusError(alignments, number, str(e)) from None
        lengths = len(pair.words("source")), len(pair.words("target"))
        kept_sure = {(s, t) for s, t in sure if s < lengths[0] and t < lengths[1]}
        kept_possible = {(s, t) for s, t in possible if s < lengths[0] and t < lengths[1]}
        lost = len(sure) + len(possible) - len(kept_sure) - len(kept_possible)
        if lost:
            dropped += lost
            dropped_lines.append(number)
        possible = _by_target(kept_possible) or None
        gold.append(replace(pair, alignment=_by_target(kept_sure), possible=possible))
    return GoldSet(gold, dropped, tuple(dropped_lines))


def gold_reversed(
    direction: Direction, files: Sequence[PathLike], source_lang: str, target_lang: str
) -> tuple[bool, str]:
    """Whether a gold set's sides must be swapped for a model from ``source_lang`` to ``target_lang``, and the
    reason, for the log.

    ``auto`` reads the languages from the first of ``files`` named ``<source>-<target>.<anything>`` (as the
    KFTT set's ``ja-en.gold``); where no name says both of the model's languages, the set is taken as it is
    (forward), and the reason says so.

    Raises:
        ValueError: ``direction`` is none of ``DIRECTIONS``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"gold direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    model = f"the model translates {source_lang} to {target_lang}"
    if direction != "auto":
        return direction == "reversed", f"{direction}, as asked ({model})"
    for path in files:
        found = _LANGUAGES.match(Path(path).name)
        if found is None:
            continue
        languages = found.group(1).lower(), found.group(2).lower()
        if languages in ((source_lang, target_lang), (target_lang, source_lang)):
            swapped = languages == (target_lang, source_lang)
            side = "reversed" if swapped else "forward"
            return swapped, f"{side}: {Path(path).name} is {'-'.join(languages)} and {model}"
    return False, f"forward, assumed: no file name says {source_lang}-{target_lang} or the reverse ({model})"


def read_gold_for(
    sentences: PathLike,
    alignments: PathLike,
    source_lang: str,
    target_lang: str,
    *,
    one_based: bool,
    direction: Direction = "auto",
    target_sentences: PathLike | None = None,
) -> tuple[GoldSet, str]:
    """:func:`read_gold`, its sides swapped where :func:`gold_reversed` says the model translates the other
    way; and the direction's reason, for the log."""
    gold = read_gold(sentences, alignments, one_based=one_based, target_sentences=target_sentences)
    swap, why = gold_reversed(direction, [alignments, sentences], source_lang, target_lang)
    return (gold.reversed() if swap else gold), why


def as_trained(gold: GoldSet, corpus: Sequence[Pair]) -> tuple[GoldSet, str]:
    """The gold pairs as the run's own corpus writes the same sentences, and one line for the log.

    A gold side whose characters are those of the same side of a ``corpus`` pair, compared without spaces,
    case and compatibility forms (``data.words.loose_characters``), is read as that pair writes it: its
    segmentation, case and punctuation are then the training text's. (KFTT's gold writes KyTea's words,
    lowercased English and full-width ``（ ）``; its tune split, which the gold comes from, MeCab's words,
    cased English and ASCII ``( )``.) The pair keeps the gold's words (``source_words`` /
    ``target_words``), which its links index; ``data.words`` maps the tokens of the text to them by
    characters. A side no corpus pair writes stays as the gold writes it, its case included.
    """
    if not corpus:
        return gold, "no corpus of the run beside the gold: its sides are read as the gold writes them"
    lines = {side: {} for side in ("source", "target")}
    for pair in corpus:
        for side, written in lines.items():
            written.setdefault(loose_characters(getattr(pair, side))[0], getattr(pair, side))
    read, found = [], dict.fromkeys(lines, 0)
    for pair in gold.pairs:
        sides = {}
        for side, written in lines.items():
            text = written.get(loose_characters(" ".join(pair.words(side)))[0])
            if text is not None:
                sides |= {side: text, f"{side}_words": pair.words(side)}
                found[side] += 1
        read.append(replace(pair, **sides))
    counts = " and ".join(f"{found[side]} {side}" for side in lines)
    line = f"{counts} sides of the {len(gold.pairs)} gold pairs read as the corpus writes them"
    return replace(gold, pairs=read), line


def not_repeating(pairs: Sequence[Pair], gold: Sequence[Pair]) -> list[int]:
    """Indices of ``pairs`` less those that repeat a ``gold`` pair, either way round, compared without spaces
    and case (gold sets are often segmented or cased otherwise than the training text)."""

    def loose(pair: Pair) -> tuple[str, str]:
        return "".join(pair.source.casefold().split()), "".join(pair.target.casefold().split())

    seen = {either for pair in gold for either in (loose(pair), loose(pair)[::-1])}
    return [i for i, pair in enumerate(pairs) if loose(pair) not in seen]


@dataclass(frozen=True)
class GoldFiles:
    """The gold set a run keeps out of training and scores explanations on (``--data.gold.*``), checked once.

    Args:
        sentences: a gold alignment set's sentences, one ``source ||| target`` pair a line: training pairs
            that repeat one of them either way round (compared without spaces and case) are dropped, so that
            the set stays unseen (the count is reported).
        alignments: the set's links, one Pharaoh line a pair: training then scores every explanation method
            against them on the set's own words (``viz.logger``); needs ``sentences``.
        zero_based: the links count words from 0 (default: from 1, as the KFTT and RWTH sets do).
        direction: ``auto`` (the sets' file names, such as ``ja-en.gold``, against the data's
            ``source_lang`` and ``target_lang``), ``forward`` (the set's source side is the model's) or
            ``reversed``.
    """

    sentences: str | None = None
    alignments: str | None = None
    zero_based: bool = False
    direction: Direction = "auto"

    def __post_init__(self) -> None:
        if self.alignments is not None and self.sentences is None:
            raise ValueError("gold.alignments needs gold.sentences, the sentences its links index")
        if self.alignments is None and (self.zero_based or self.direction != "auto"):
            option = "gold.zero_based" if self.zero_based else f"gold.direction={self.direction}"
            raise ValueError(f"{option} reads the links of gold.alignments, which is not given")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"gold.direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")

    def not_repeated(self, pairs: Sequence[Pair], log: Callable[[str], object]) -> list[int]:
        """Indices of ``pairs`` less those that repeat a sentence pair of ``sentences`` (all without it);
        ``log(message)`` is told how many were dropped, if any."""
        if self.sentences is None:
            return list(range(len(pairs)))
        index = not_repeating(pairs, read_bitext(self.sentences))
        if len(index) < len(pairs):  # compared without spaces and case, as gold sets are often written
            log(f"Dropped {len(pairs) - len(index)} training pairs that repeat a sentence pair of "
                f"{self.sentences}.")
        return index

    def read(self, source_lang: str, target_lang: str) -> tuple[GoldSet, str] | None:
        """:func:`read_gold_for` of these files, in the model's direction; None without ``alignments``."""
        if self.alignments is None or self.sentences is None:
            return None
        return read_gold_for(self.sentences, self.alignments, source_lang, target_lang,
                             one_based=not self.zero_based, direction=self.direction)
