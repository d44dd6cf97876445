"""Readers for parallel corpora on disk: two line-aligned files, TSV, ``source ||| target`` lines and SCAN
(ManyThings.org's Tatoeba files: ``data.tatoeba``); and the data module's readers of such corpora, by folder
(``parallel``, ``multi30k``, ``tsv``, ``scan``: ``data.registry``).

Every reader returns a list of :class:`~data.pairs.Pair` with whitespace normalised (ends stripped, runs of
whitespace collapsed to one space, Windows and old Mac line endings accepted). Bad input raises one
:class:`CorpusError` naming the file and, where it applies, the line: ``path/to/file:17: TSV line has no tab
between source and target``. Files ending in ``.gz`` are decompressed on the fly.
"""

import codecs
import gzip
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from data.pairs import Pair
from data.reader import SPLITS, CorpusReader, SplitName, TextSide

PathLike = str | os.PathLike[str]
T = TypeVar("T")

# Subword training takes time that grows with the square of a word's length (a 320,000-character word: 96 s;
# 2 million: about an hour), and no real word comes near this. It stays generous for scripts written without
# spaces, where a whole Chinese or Japanese sentence is one run: the longest such sentence in Tatoeba's
# Chinese is 44 characters, in KFTT's Japanese (its word spaces removed) 80.
MAX_WORD_CHARS = 1000


class CorpusError(ValueError):
    """A corpus file that cannot be read as promised; the message is one line: ``file[:line]: reason``."""

    def __init__(self, path: PathLike, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.path}:{line}: {reason}" if line is not None else f"{self.path}: {reason}")


def normalise_spaces(text: str) -> str:
    """``text`` with its ends stripped and every run of whitespace one space."""
    return " ".join(text.split())


def read_lines(path: PathLike, *, keep_blank_ends: bool = False) -> list[str]:
    """Read a UTF-8 text file (``.gz`` allowed) into lines, without line endings (``\\n`` or ``\\r\\n``; or
    ``\\r`` in a file with no ``\\n`` at all, as old Macs wrote them).

    Lines are otherwise returned as they are (callers normalise whitespace after splitting fields). Blank
    lines at the very end of the file are dropped, unless ``keep_blank_ends`` (a file where a blank line means
    something, such as a sentence without alignment links); blank lines elsewhere are kept for the caller.

    Raises:
        CorpusError: the path is missing or a folder, the file is not valid gzip or UTF-8 (the message names
            the line of the first bad byte), the file holds no text, or a line holds a word (a run without
            whitespace) longer than ``MAX_WORD_CHARS`` characters.
    """
    path = Path(path)
    if not path.exists():
        raise CorpusError(path, None, "no such file")
    if path.is_dir():
        raise CorpusError(path, None, "is a folder, expected a text file")
    if path.suffix.lower() == ".zip":  # ManyThings' downloads: cmn-eng.zip holds cmn.txt
        raise CorpusError(path, None, "is a zip archive, expected a text file: unzip it, give the file")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise CorpusError(path, None, f"cannot read file: {e}") from None
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise CorpusError(
            path, line, f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {column})"
        ) from None
    # Split on "\n" only: str.splitlines() would also break lines at characters such as U+2028 or \x0c that
    # can occur inside a sentence, silently misaligning parallel files. A file without any "\n" but with "\r"
    # ends its lines the old Mac way; read whole, it would be one line.
    newline = "\r" if "\r" in text and "\n" not in text else "\n"
    lines = [line.removesuffix("\r") for line in text.split(newline)]
    if keep_blank_ends:
        if text.endswith(newline):
            lines.pop()  # the end of the last line, not a line of its own
    else:
        while lines and not lines[-1].strip():
            lines.pop()
    if not text.strip():
        raise CorpusError(path, None, "file is empty")
    _check_word_lengths(path, lines)
    return lines


def _check_word_lengths(path: PathLike, lines: list[str]) -> None:
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_WORD_CHARS:  # only such lines can hold a word that long
            longest = max(len(word) for word in line.split())
            if longest > MAX_WORD_CHARS:
                raise CorpusError(
                    path,
                    number,
                    f"a {longest}-character word; words longer than {MAX_WORD_CHARS} characters are not "
                    "supported (subword training slows down with the square of a word's length): split or "
                    "remove it",
                )


def _sentences(path: PathLike) -> list[str]:
    """The normalised lines of a one-sentence-per-line file; a blank line is an error."""
    sentences = [normalise_spaces(line) for line in read_lines(path)]
    for number, sentence in enumerate(sentences, start=1):
        if not sentence:
            raise CorpusError(path, number, "empty line; every line must hold one sentence")
    return sentences


def read_parallel(source_path: PathLike, target_path: PathLike) -> list[Pair]:
    """Read two line-aligned files (Multi30k: ``train.de`` + ``train.en``): line i translates line i.

    Either file may be the source, so one corpus serves both directions.

    Raises:
        CorpusError: a file is unreadable or has a blank line, or the two files have different line counts.
    """
    sources, targets = _sentences(source_path), _sentences(target_path)
    if len(sources) != len(targets):
        raise CorpusError(
            target_path,
            None,
            f"has {len(targets)} lines but {source_path} has {len(sources)}; "
            "parallel files must match line for line",
        )
    return [Pair(source, target) for source, target in zip(sources, targets, strict=True)]


def read_bitext(path: PathLike) -> list[Pair]:
    """Read ``source ||| target`` lines (the form of fast_align, eflomal and gold alignment sets).

    Raises:
        CorpusError: a line lacks the `` ||| `` separator or has an empty side, or the file is unreadable.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        source, bar, target = line.partition("|||")
        source, target = normalise_spaces(source), normalise_spaces(target)
        if not bar or "|||" in target:
            raise CorpusError(path, number, "expected one 'source ||| target' pair a line")
        if not source or not target:
            raise CorpusError(path, number, f"empty {'source' if not source else 'target'} side")
        pairs.append(Pair(source, target))
    return pairs


def read_tsv(path: PathLike) -> list[Pair]:
    """Read ``source<TAB>target`` lines.

    Raises:
        CorpusError: a line has no tab, more than one tab, or an empty side; the first line looks like a
            header (its two fields differ and both name a column or a language: ``source<TAB>target``,
            ``en<TAB>de``, ``English<TAB>French``); or the file is unreadable.
    """
    return [_tsv_pair(path, number, line) for number, line in enumerate(read_lines(path), start=1)]


def _tsv_pair(path: PathLike, number: int, line: str) -> Pair:
    if not line.strip():
        raise CorpusError(path, number, "empty line; expected source<TAB>target")
    source, tab, target = line.partition("\t")
    if not tab:
        raise CorpusError(path, number, "TSV line has no tab between source and target")
    if "\t" in target.strip():
        raise CorpusError(path, number, "TSV line has more than one tab; expected source<TAB>target")
    source, target = normalise_spaces(source), normalise_spaces(target)
    if not source or not target:
        raise CorpusError(path, number, f"TSV line has an empty {'source' if not source else 'target'} side")
    # Refused rather than skipped: every message and view names a pair by its line, counted from the first.
    if number == 1 and _looks_like_header(source, target):
        raise CorpusError(
            path,
            number,
            f"'{source}<TAB>{target}' looks like a header line, not a sentence pair (both fields name a "
            "column or a language); remove it, or move it below the first line if it is a real pair",
        )
    return Pair(source, target)


# What a header's field may name, before any "-" or "_" ("src_text", "zh-CN"): a column, a language by its
# ISO 639 code, or a language by its English name. English names only, so that a real first pair such as
# "Englisch<TAB>English" is not taken for a header.
_HEADER_NAMES = frozenset({
    "source", "target", "src", "tgt", "trg", "input", "output", "text", "sentence", "translation",
    "ar", "bg", "ca", "cs", "da", "de", "el", "en", "es", "et", "fa", "fi", "fr", "he", "hi", "hr", "hu",
    "id", "it", "ja", "ko", "lt", "lv", "nl", "no", "pl", "pt", "ro", "ru", "sk", "sl", "sr", "sv", "th",
    "tr", "uk", "vi", "zh", "ara", "ces", "cmn", "deu", "ell", "eng", "fin", "fra", "heb", "hin", "ita",
    "jpn", "kor", "nld", "pol", "por", "rus", "spa", "swe", "tur", "ukr", "vie", "zho",
    "arabic", "chinese", "czech", "danish", "dutch", "english", "finnish", "french", "german", "greek",
    "hebrew", "hindi", "hungarian", "italian", "japanese", "korean", "mandarin", "norwegian", "persian",
    "polish", "portuguese", "romanian", "russian", "spanish", "swedish", "thai", "turkish", "ukrainian",
    "vietnamese",
})


def _looks_like_header(source: str, target: str) -> bool:
    def names_a_column(field: str) -> bool:
        return re.split(r"[-_]", field.lower(), maxsplit=1)[0] in _HEADER_NAMES

    return source.lower() != target.lower() and names_a_column(source) and names_a_column(target)


def read_scan(path: PathLike) -> list[Pair]:
    """Read SCAN lines ``IN: <command> OUT: <actions>`` (Lake & Baroni, 2018); ``.gz`` files are fine.

    Raises:
        CorpusError: a line does not have that form or has an empty side, or the file is unreadable.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        line = normalise_spaces(line)
        command, out, actions = line.removeprefix("IN:").partition(" OUT:")
        if not line.startswith("IN:") or not out:
            raise CorpusError(path, number, "SCAN line must look like 'IN: <command> OUT: <actions>'")
        command, actions = command.strip(), actions.strip()
        if not command or not actions:
            raise CorpusError(
                path, number, f"SCAN line has an empty {'command' if not command else 'action'} side"
            )
        pairs.append(Pair(command, actions))
    return pairs


def filter_by_length(
    items: Sequence[T], *, max_len: int, lengths: Sequence[int] | None = None
) -> tuple[list[T], int]:
    """Drop items longer than ``max_len``; return the kept items (in order) and how many were dropped.

    Args:
        items: usually pairs; anything else (a pair with its token ids, say) when ``lengths`` is given.
        max_len: the largest length kept.
        lengths: ``lengths[i]`` is the length of ``items[i]``, in the caller's unit (tokens, say).
            Default: for pairs, the number of words of the longer side.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if lengths is None:
        if not all(isinstance(p, Pair) for p in items):
            raise ValueError("give lengths when the items are not Pairs")
        lengths = [max(len(p.source.split()), len(p.target.split())) for p in items]  # type: ignore
    elif len(lengths) != len(items):
        raise ValueError(f"got {len(lengths)} lengths for {len(items)} items")
    kept = [item for item, length in zip(items, lengths, strict=True) if length <= max_len]
    return kept, len(items) - len(kept)


# --- The corpora on disk, as the data module reads them (data.registry) ------------------------------------


def maybe_gzipped(path: Path) -> Path:
    """``path``, or ``path.gz`` where only that exists."""
    gzipped = path.with_name(path.name + ".gz")
    return gzipped if not path.exists() and gzipped.exists() else path


class ParallelFiles(CorpusReader):
    """``parallel``: line-aligned files ``<split>.<lang>`` in the folder ``path`` (gzipped ones too: KFTT's
    ``train.ja.gz``), the language codes being ``source_lang`` and ``target_lang`` (either direction works;
    default ``de`` into ``en``).

    Options: ``val_split`` names the validation files (``dev`` for KFTT's ``dev.ja.gz``; None: ``val``);
    ``test_split`` the test files (None: ``test``).
    """

    reads: ClassVar[frozenset[str]] = frozenset({"val_split"})
    default_test: ClassVar[str] = "test"

    def read(self) -> dict[SplitName, list[Pair]]:
        return {split: read_parallel(self.file(split), self.file(split, "target")) for split in SPLITS}

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        language = self.source_lang if side == "source" else self.target_lang
        return maybe_gzipped(Path(self.options.path or "") / f"{self.split_name(split)}.{language}")

    def split_name(self, split: SplitName) -> str:
        """The files' name for a split: ``val_split``, ``test_split`` or the split's own."""
        names = {"val": self.options.val_split or "val", "test": self.options.test_split or self.default_test}
        return names.get(split, split)


class Multi30k(ParallelFiles):
    """``multi30k``: as ``parallel``, with Multi30k's test set ``test2016`` as its test split (``test_split``
    ``test`` means it too; or name another, such as ``test2017`` or ``mscoco2017``)."""

    default_test: ClassVar[str] = "test2016"

    def split_name(self, split: SplitName) -> str:
        name = super().split_name(split)
        return "test2016" if name == "test" else name


class TsvFiles(ParallelFiles):
    """``tsv``: ``train.tsv``, ``val.tsv`` and ``test.tsv`` of ``source<TAB>target`` lines in the folder
    ``path``; ``val_split`` and ``test_split`` name other files (``<name>.tsv``)."""

    def read(self) -> dict[SplitName, list[Pair]]:
        test = self.file("test")
        if not test.is_file() and self.options.test_split is not None:
            raise CorpusError(
                test, None,
                f"no such file (test_split={self.options.test_split!r}; pass --data.test_split NAME to read "
                "NAME.tsv, or null for test.tsv)",
            )
        return {split: read_tsv(self.file(split)) for split in SPLITS}

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        return maybe_gzipped(Path(self.options.path or "") / f"{self.split_name(split)}.tsv")


class Scan(CorpusReader):
    """``scan``: the SCAN folder ``path``, with ``<scan_split>_split/tasks_{train,test}_<scan_split>.txt``
    (or ``.txt.gz``); ``scan_split`` is ``simple`` or ``length`` (SCAN's own splits). SCAN has no validation
    file, so a seeded 5% of its training pairs (``seed``) is held out as val. Word-level tokens."""

    tokenizer = "word"
    VAL_FRACTION = 0.05

    def read(self) -> dict[SplitName, list[Pair]]:
        train = read_scan(self.file("train"))
        test = read_scan(self.file("test"))
        self._count, self._held_out = len(train), self.held_out(len(train))
        return {
            "train": [p for i, p in enumerate(train) if i not in self._held_out],
            "val": [p for i, p in enumerate(train) if i in self._held_out],
            "test": test,
        }

    def held_out(self, count: int) -> set[int]:
        """Indices of the training file's pairs held out as val: a seeded share of ``VAL_FRACTION``."""
        order = list(range(count))
        random.Random(self.options.seed).shuffle(order)
        return set(order[: max(1, round(self.VAL_FRACTION * count))])

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        """SCAN's test file for test, its training file for train and val."""
        scan_split, part = self.options.scan_split, "test" if split == "test" else "train"
        stem = Path(self.options.path or "") / f"{scan_split}_split" / f"tasks_{part}_{scan_split}.txt"
        for candidate in (stem, stem.with_suffix(".txt.gz")):
            if candidate.is_file():
                return candidate
        raise CorpusError(stem, None, "no such file (nor with .gz)")

    def origin(self, split: SplitName, index: int, side: TextSide = "source") -> tuple[str, int | None]:
        if split == "test":
            return super().origin(split, index, side)
        # val is a seeded hold-out of SCAN's training file, train the rest of it
        inside = sorted(self._held_out) if split == "val" else [
            i for i in range(self._count) if i not in self._held_out]
        return str(self.file(split, side)), inside[index] + 1
