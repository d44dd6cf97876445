"""What a corpus reader is: the contract between one dataset and the data module (``data.registry`` lists
them by name).

A reader is made once per data module from the module's options (:class:`CorpusOptions`), which it checks at
once, and reads nothing until :meth:`CorpusReader.read`. It knows its languages, the tokenizer its text wants
by default, and where each pair it read came from, so that a bad pair is named by file and line.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import ClassVar, Literal

from data.pairs import Pair

SplitName = Literal["train", "val", "test"]
TextSide = Literal["source", "target"]
SPLITS: tuple[SplitName, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class ToyOptions:
    """The toy tasks' options (``--data.toy.*``; ``data.toy`` generates the tasks).

    Args:
        train_size: number of training pairs.
        val_size: number of validation pairs.
        test_size: number of test pairs.
        split: ``random`` or ``length`` (test sentences longer than any seen in training).
        max_train_words: with ``split=length``: the longest training sentence, in words.
        phenomena: ``toy`` only: one-to-many, many-to-one and unaligned words, with their gold links.
        script: ``toy`` only: ``latin`` or ``han`` (the target in Chinese characters, without spaces).
    """

    train_size: int = 50_000
    val_size: int = 1_000
    test_size: int = 1_000
    split: Literal["random", "length"] = "random"
    max_train_words: int = 12
    phenomena: bool = False
    script: Literal["latin", "han"] = "latin"


@dataclass(frozen=True)
class CorpusOptions:
    """The data module's options that say what to read; each reader reads its own (their meaning: the
    readers' docstrings). ``source_lang`` and ``target_lang`` are as given (None: the reader's choice)."""

    path: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    val_split: str | None = None
    test_split: str | None = None
    scan_split: str = "simple"
    held_out_pairs: int = 1000
    seed: int = 1234
    toy: ToyOptions = ToyOptions()


# Options that only some corpora read and that are refused, away from their defaults, by the others (a reader
# names those it reads in ``CorpusReader.reads``). The rest (test_split, scan_split, the toy's sizes) are
# ignored where they do not apply, as every saved configuration sets them.
VARIANT_OPTIONS = ("val_split", "held_out_pairs", "toy.phenomena", "toy.script")


def refused_variant(options: CorpusOptions, reads: frozenset[str]) -> str | None:
    """The first of :data:`VARIANT_OPTIONS` set away from its default that a reader of ``reads`` ignores."""
    defaults = CorpusOptions()
    return next((name for name in VARIANT_OPTIONS
                 if name not in reads and attrgetter(name)(options) != attrgetter(name)(defaults)), None)


class CorpusReader(ABC):
    """One dataset: its options checked, its languages, its three splits, where each pair came from.

    Subclasses set the class attributes, check their options in ``__init__`` (after ``super().__init__``)
    and write :meth:`read`; a reader of files writes :meth:`file` and gets :meth:`origin` with it.

    Attributes:
        reads_files: ``path`` is required (a folder or a file).
        tokenizer: the tokenizer its text wants when none is named: ``word`` for a closed vocabulary,
            ``bpe`` for natural language.
        reads: the options of :data:`VARIANT_OPTIONS` it reads.
    """

    reads_files: ClassVar[bool] = True
    tokenizer: Literal["word", "bpe", "unigram"] = "bpe"
    reads: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, name: str, options: CorpusOptions) -> None:
        if self.reads_files and options.path is None:
            raise ValueError(f"dataset={name!r} reads files: give the corpus folder as path")
        self.name, self.options = name, options
        self.source_lang, self.target_lang = self.languages()

    def languages(self) -> tuple[str, str]:
        """The source and target languages: as given, else Multi30k's German into English."""
        source, target = self.options.source_lang, self.options.target_lang
        return source or "de", target or "en"

    @abstractmethod
    def read(self) -> dict[SplitName, list[Pair]]:
        """Every split's pairs as read (``train``, ``val``, ``test``); called once.

        Raises:
            CorpusError: a file is missing or malformed (the message names the file and line).
        """

    def check_tokenizer(self, kind: str) -> None:
        """Refuse (ValueError) a tokenizer kind that cannot read this corpus's text; any reads it here."""

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        """The file a split's side is read from."""
        raise NotImplementedError(f"dataset {self.name!r} reads no files")

    def origin(self, split: SplitName, index: int, side: TextSide = "source") -> tuple[str, int | None]:
        """Where pair ``index`` of a split was read, after :meth:`read`: (file, line), or a description and
        None. Training indices count all training pairs, before any is dropped. Default: line ``index + 1``
        of :meth:`file`."""
        return str(self.file(split, side)), index + 1
