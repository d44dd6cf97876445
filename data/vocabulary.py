"""How a run's two tokenizers are made: the settings that shape them (checked once), trained on the training
split, or restored from a run's files and refused where they were trained otherwise than the settings say.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.scripts import PreTokenize, text_handling
from data.tokenizer import Tokenizer, TokenizerKind

TOKENIZER_FILES = {"src": "src_tokenizer.json", "tgt": "tgt_tokenizer.json"}
# The largest vocab_size: 4 times the largest vocabularies in use (Gemma's, about 256,000 pieces), so that no
# real corpus meets it; a mistyped 10**12 made the tokenizer library abort the process.
MAX_VOCAB_SIZE = 2**20


@dataclass(frozen=True)
class TokenizerSettings:
    """The data module's tokenizer options (their meaning: ``TranslationDataModule``), ``kind`` resolved
    (the option, or the dataset's default) and ``pre_tokenize`` as given (None: chosen from the text)."""

    kind: TokenizerKind
    vocab_size: int
    split_punctuation: bool
    pre_tokenize: PreTokenize | None
    shared_vocab: bool

    def __post_init__(self) -> None:
        if self.kind not in ("word", "bpe", "unigram"):
            raise ValueError(f"tokenizer must be word, bpe, unigram or None, got {self.kind!r}")
        if self.pre_tokenize not in (None, "whitespace", "cjk"):
            raise ValueError(f"pre_tokenize must be whitespace, cjk or None, got {self.pre_tokenize!r}")
        for option in ("split_punctuation", "pre_tokenize"):
            if getattr(self, option) and self.kind == "word":
                raise ValueError(f"{option} needs tokenizer bpe or unigram; the tokenizer is word")
        if self.vocab_size > MAX_VOCAB_SIZE:
            column = 4 * self.vocab_size / 2**20  # MiB: one float32 number a piece; at least 4 here
            power = min(int(math.log(column, 1024)), 4)
            unit = ("MiB", "GiB", "TiB", "PiB", "EiB")[power]
            raise ValueError(
                f"vocab_size must be at most {MAX_VOCAB_SIZE}, got {self.vocab_size}: the model's embedding "
                f"table for it would take {column / 1024**power:.1f} {unit} for each of its d_model columns "
                "(float32)"
            )

    def train(self, sources: list[str], targets: list[str], log) -> tuple[Tokenizer, Tokenizer]:
        """The source and target tokenizers trained on these texts (one, shared, with ``shared_vocab``);
        ``log(message)`` is told how a side written in Chinese or Japanese characters is split."""
        if self.shared_vocab:
            shared = self._train(sources + targets, "both sides", log)
            return shared, shared
        return self._train(sources, "source", log), self._train(targets, "target", log)

    def _train(self, texts: list[str], side: str, log) -> Tokenizer:
        kwargs: dict[str, Any] = {"kind": self.kind, "vocab_size": self.vocab_size,
                                  "split_punctuation": self.split_punctuation}
        if self.kind != "word":
            # A shared vocabulary's texts hold the source side first: sample both.
            half = len(texts) // 2 if side == "both sides" else 0
            handling = text_handling(texts[:2500] + texts[half:half + 2500])
            kwargs["pre_tokenize"] = self.pre_tokenize or handling.pre_tokenize
            kwargs["normalization"] = handling.normalization
            if kwargs["pre_tokenize"] == "cjk" or handling.normalization == "nfc":
                pieces = ("a piece per Han or Kana character" if kwargs["pre_tokenize"] == "cjk"
                          else "words split at spaces")
                log(
                    f"Tokenizer ({side}): pre_tokenize={kwargs['pre_tokenize']} ({pieces}), "
                    f"{handling.normalization.upper()} normalisation"
                    + (" (full-width punctuation kept)." if handling.normalization == "nfc" else ".")
                )
        return Tokenizer.train(texts, **kwargs)

    def restore(self, directory: str | Path) -> tuple[Tokenizer, Tokenizer]:
        """The tokenizers a run wrote into ``directory`` (``TOKENIZER_FILES``), not retrained.

        Raises:
            ValueError: they were trained otherwise than the settings that shape training say (``kind``;
                ``pre_tokenize`` when given; ``split_punctuation``; ``shared_vocab`` when true): the setting,
                the file and what it holds are named, since the run would record settings it never used.
        """
        paths = [Path(directory) / TOKENIZER_FILES[side] for side in ("src", "tgt")]
        src, tgt = (Tokenizer.load(path) for path in paths)
        # One way only: tokenizers trained apart on the same words (the copy and reverse tasks) are one too.
        if self.shared_vocab and src.to_json() != tgt.to_json():
            raise ValueError(f"shared_vocab is true but {paths[0]} and {paths[1]} hold two vocabularies")
        for path, restored in zip(paths, (src, tgt), strict=True):
            pre_tokenize, split_punctuation = restored.pre_tokenization
            asked = {
                "tokenizer": (self.kind, restored.kind),
                "pre_tokenize": (self.pre_tokenize, pre_tokenize),
                "split_punctuation": (self.split_punctuation, split_punctuation),
            }
            if restored.kind == "word":  # splits at spaces only, whatever the other two say
                asked = {"tokenizer": asked["tokenizer"]}
            for setting, (wanted, held) in asked.items():
                if wanted is not None and wanted != held:
                    raise ValueError(
                        f"{setting}={wanted} but {path} was trained with {setting}={held}: leave "
                        f"{setting} as the tokenizers were trained, or drop tokenizer_dir to train new ones"
                    )
        return src, tgt

    @staticmethod
    def save(directory: str | Path, src: Tokenizer, tgt: Tokenizer) -> None:
        """Write the tokenizers into ``directory`` as :meth:`restore` reads them."""
        src.save(Path(directory) / TOKENIZER_FILES["src"])
        tgt.save(Path(directory) / TOKENIZER_FILES["tgt"])
