"""ManyThings.org's Tatoeba sentence pairs (``cmn.txt`` from ``cmn-eng.zip``, ``jpn.txt``, ``deu.txt``, ...):
reading a file as downloaded, the languages it pairs, and the seeded hold-out of val and test pairs that keeps
every sentence of them out of training.

A file is one split of ``English<TAB>translation<TAB>attribution`` lines; many sentences are translated more
than once, either way round, so the hold-out moves whole groups of pairs linked by a shared sentence.
"""

import random
from pathlib import Path
from typing import ClassVar

from data.corpora import CorpusError, PathLike, normalise_spaces, read_lines
from data.pairs import Pair
from data.reader import SPLITS, CorpusReader, SplitName, TextSide

# How a language is named when it is English: ManyThings' files pair English with another language.
ENGLISH = frozenset({"en", "eng", "english"})


def read_tatoeba(path: PathLike, *, english_source: bool) -> list[Pair]:
    """Read a ManyThings.org Tatoeba file as downloaded (``cmn.txt`` from ``cmn-eng.zip``; ``.gz`` too).

    Its lines are ``English<TAB>translation<TAB>attribution`` (older downloads lack the attribution); the
    byte-order mark some start with is dropped, and the attribution (the sentences' authors, for the CC-BY
    licence) is kept out of the text. ``english_source`` makes English the source and the other language
    the target; else the other way round, so one file serves both directions.

    Raises:
        CorpusError: a line has fewer than two or more than three tab-separated columns, or an empty
            sentence; or the file is unreadable.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        columns = line.split("\t")
        if not 2 <= len(columns) <= 3:
            raise CorpusError(
                path, number,
                f"a Tatoeba line has 2 or 3 tab-separated columns (English, translation, attribution), "
                f"this one {len(columns)}",
            )
        english, other = normalise_spaces(columns[0]), normalise_spaces(columns[1])
        if not english or not other:
            raise CorpusError(path, number, f"empty {'English' if not english else 'translation'} column")
        pairs.append(Pair(english, other) if english_source else Pair(other, english))
    return pairs


# ManyThings names its files by ISO 639-3 code; the two-letter code of the same language is what configs, gold
# files (``zh-en.gold``) and sacreBLEU's tokenizers (``zh``, ``ja``, ``ko``) use.
TWO_LETTER = {
    "ara": "ar", "bul": "bg", "ces": "cs", "cmn": "zh", "dan": "da", "deu": "de", "ell": "el", "fin": "fi",
    "fra": "fr", "heb": "he", "hin": "hi", "hun": "hu", "ind": "id", "ita": "it", "jpn": "ja", "kor": "ko",
    "nld": "nl", "nob": "nb", "pes": "fa", "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru", "spa": "es",
    "swe": "sv", "tha": "th", "tur": "tr", "ukr": "uk", "vie": "vi",
}  # fmt: skip


def tatoeba_languages(path: str | None, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """The pair's languages as given; those not given: English and the language of the file's name
    (``cmn.txt``: ``zh``; a code without a two-letter one, such as ``yue``, as it is), into English unless
    ``source_lang`` is English.

    Raises:
        ValueError: one is needed from the file's name, and the name is no language code.
    """
    if source_lang is not None and target_lang is not None:
        return source_lang, target_lang
    given = source_lang if source_lang is not None else target_lang
    if given is not None and given.lower() not in ENGLISH:
        other = "en"  # the file pairs English with the language given
    else:
        name = Path(path or "").name
        code = name.split(".")[0].lower()
        if not (code.isascii() and code.isalpha() and 2 <= len(code) <= 3):
            missing = ("target_lang" if source_lang is not None else "source_lang" if target_lang is not None
                       else "source_lang or target_lang")  # fmt: skip
            raise ValueError(
                f"dataset 'tatoeba': name the language of {path} with {missing} (its file name {name!r} is "
                "not a language code such as cmn or jpn)"
            )
        other = TWO_LETTER.get(code, code)
    if source_lang is not None:
        return source_lang, other
    if target_lang is not None:
        return other, target_lang
    return other, "en"


def tatoeba_splits(pairs: list[Pair], held_out: int, seed: int) -> dict[str, list[int]]:
    """The 1-based lines of each split: seeded groups of pairs, test first, then val, each until it holds at
    least ``held_out`` pairs; the rest is train. A group is every pair linked to another by a shared sentence
    on either side (Tatoeba translates a sentence more than once, either way round: "Hi." has two Chinese
    translations, 我们走吧。 two English ones), so no sentence of val or test is seen in training. Lines stay
    in file order within a split."""
    parent = list(range(len(pairs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    for i, pair in enumerate(pairs):
        for key in (("source", pair.source), ("target", pair.target)):
            if key in first:
                parent[root(i)] = root(first[key])
            else:
                first[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(pairs)):
        groups.setdefault(root(i), []).append(i + 1)
    order = list(groups.values())
    random.Random(seed).shuffle(order)
    splits: dict[str, list[int]] = {"test": [], "val": [], "train": []}
    for group in order:
        split = next((s for s in ("test", "val") if len(splits[s]) < held_out), "train")
        splits[split].extend(group)
    return {split: sorted(lines) for split, lines in splits.items()}


class Tatoeba(CorpusReader):
    """``tatoeba``: ``path`` is one ManyThings.org file as downloaded (``cmn.txt``: English, translation and
    attribution columns); val and test are held out of it (:func:`tatoeba_splits`).

    Options: ``source_lang`` ``en`` reads English as the source, anything else the translation column (a code
    BLEU's tokenizer knows, as ``zh``, ``cmn`` or ``ja``: it follows ``target_lang``); by default the language
    of the file's name (``cmn.txt``: ``zh``), into English (:func:`tatoeba_languages`). ``held_out_pairs``:
    about this many pairs each for val and for test (default 1000), drawn with ``seed``; pairs that share a
    sentence, on either side, stay in one split, so no test sentence is seen in training.
    """

    reads: ClassVar[frozenset[str]] = frozenset({"held_out_pairs"})

    def __init__(self, name: str, options) -> None:
        super().__init__(name, options)
        if (self.source_lang.lower() in ENGLISH) == (self.target_lang.lower() in ENGLISH):
            raise ValueError(
                f"a Tatoeba file pairs English with one other language: exactly one of source_lang and "
                f"target_lang must be en, got {self.source_lang!r} and {self.target_lang!r}"
            )
        if options.test_split is not None:
            raise ValueError("test_split names a file; dataset 'tatoeba' holds its test pairs out")
        if options.held_out_pairs < 1:
            raise ValueError(f"held_out_pairs must be >= 1, got {options.held_out_pairs}")
        self._lines: dict[str, list[int]] = {}  # each pair's line in the file, per split

    def languages(self) -> tuple[str, str]:
        return tatoeba_languages(self.options.path, self.options.source_lang, self.options.target_lang)

    def read(self) -> dict[SplitName, list[Pair]]:
        pairs = read_tatoeba(self.file("train"), english_source=self.source_lang.lower() in ENGLISH)
        held_out = self.options.held_out_pairs
        self._lines = tatoeba_splits(pairs, held_out, self.options.seed)
        if len(self._lines["train"]) == 0:
            raise CorpusError(
                self.file("train"), None,
                f"its {len(pairs)} pairs leave none for training after holding out about "
                f"held_out_pairs={held_out} for each of val and test (pairs that share a sentence stay "
                "together)",
            )
        return {split: [pairs[line - 1] for line in self._lines[split]] for split in SPLITS}

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        """The one file that holds every split."""
        path = Path(self.options.path or "")
        if path.is_dir():
            raise CorpusError(path, None, "is a folder; dataset 'tatoeba' reads one file: give cmn.txt")
        return path

    def origin(self, split: SplitName, index: int, side: TextSide = "source") -> tuple[str, int | None]:
        return str(self.file(split, side)), self._lines[split][index]
