"""Tokenization and vocabulary: a thin wrapper around the HuggingFace ``tokenizers`` library.

Three kinds, all with the special tokens of :data:`data.special.SPECIALS` at ids 0..3:

* ``"word"``: one token per whitespace-separated word (the toy tasks and SCAN), so word ``i`` of a sentence is
  token ``i``; decoding joins tokens with spaces.
* ``"bpe"`` and ``"unigram"``: subwords for real corpora. Text is Unicode-normalised and split with the
  Metaspace scheme (a word starts with ``▁``), which is reversible: decoding gives plain detokenised text for
  sacreBLEU. With ``split_punctuation``, each punctuation character is also a piece of its own, so ``dog.``
  and ``dog`` share the subword ``▁dog`` instead of taking two vocabulary entries; a piece after punctuation
  carries no ``▁``, so this stays reversible.

Chinese and Japanese are written without spaces, so with the Metaspace scheme alone a whole clause would be
one piece for the subword trainer, whose time grows with the square of a piece's length.
``pre_tokenize="cjk"`` makes each Han, Hiragana and Katakana character a piece of its own first (the first of
a word keeps its ``▁``, which BPE writes apart, ``▁`` then the character, where it never learnt the two
together): subwords never cross a character there, as in the character-level Chinese of BERT's tokenizer,
while Latin words in the same text still learn subwords. Decoding joins the pieces back without spaces.

Normalisation: NFKC (compatibility forms folded: ``ﬁ`` becomes ``fi``) for text in other scripts; NFC for
Chinese, Japanese and Korean text (``normalization="nfc"``), since NFKC would turn their full-width
punctuation ``，？！：`` into ASCII ``,?!:``, so that translations would come out with punctuation their
references do not have. NFC changes no character a reader can see.

A trained tokenizer is saved as one JSON file and restored from it, so evaluation never retrains it.
Restoring also matters because the library's unigram trainer is not reproducible: on the same text it orders
some pieces, and so numbers them, differently from run to run. Word-level and BPE training, as set up here,
are reproducible.
"""

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from data.corpora import CorpusError
from data.scripts import Normalization, PreTokenize
from data.sentencepiece_tokenizer import MARKER, SentencePieceTokenizer
from data.special import SPECIALS

TokenizerKind = Literal["word", "bpe", "unigram"]
_METASPACE = "▁"
# One piece per Han, Hiragana or Katakana character (with the iteration marks and the long-vowel mark, which
# are written inside such words); a word's first character keeps the ▁ before it.
_CJK_PIECE = r"▁?[\p{Han}\p{Hiragana}\p{Katakana}々〆〻ー]"


def _check_specials(tok: tokenizers.Tokenizer) -> None:
    """The project assumes the special tokens sit at the ids of SPECIALS; refuse a tokenizer that differs."""
    for token, expected in zip(
        SPECIALS.tokens, (SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id, SPECIALS.unk_id), strict=True
    ):
        actual = tok.token_to_id(token)
        if actual != expected:
            raise ValueError(f"tokenizer maps special token {token!r} to id {actual}, expected {expected}")


class Tokenizer:
    """A trained tokenizer for one language (or both, with a shared vocabulary).

    ``encode`` adds no special tokens: BOS/EOS are added in exactly one place, :func:`data.batching.collate`.
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        """Wrap a trained ``tokenizers.Tokenizer``; see :meth:`train`, :meth:`load`, :meth:`from_json`."""
        _check_specials(tokenizer)
        self._tok = tokenizer
        self._special_ids = frozenset((SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id))

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        kind: TokenizerKind = "word",
        vocab_size: int = 8000,
        split_punctuation: bool = False,
        pre_tokenize: PreTokenize = "whitespace",
        normalization: Normalization = "nfkc",
    ) -> "Tokenizer":
        """Train a tokenizer of the given kind on ``texts`` (the training split only).

        ``vocab_size`` counts the special tokens; a word-level vocabulary is smaller when the text has fewer
        distinct words, and keeps the most frequent words when it has more. ``split_punctuation`` (subwords
        only) makes every punctuation character a piece of its own before subwords are learnt;
        ``pre_tokenize="cjk"`` (subwords only) each Han and Kana character; ``normalization`` is the Unicode
        form subword text is put in (``data.scripts.text_handling`` picks both for a corpus).
        """
        if vocab_size <= len(SPECIALS.tokens):
            raise ValueError(
                f"vocab_size must exceed the {len(SPECIALS.tokens)} special tokens, got {vocab_size}"
            )
        if split_punctuation and kind == "word":
            raise ValueError(
                "split_punctuation needs a subword tokenizer (bpe or unigram): word-level decoding joins "
                "tokens with spaces, so split punctuation would not come back as it was"
            )
        if pre_tokenize not in ("whitespace", "cjk"):
            raise ValueError(f"pre_tokenize must be 'whitespace' or 'cjk', got {pre_tokenize!r}")
        if normalization not in ("nfkc", "nfc"):
            raise ValueError(f"normalization must be 'nfkc' or 'nfc', got {normalization!r}")
        if kind == "word" and (pre_tokenize != "whitespace" or normalization != "nfkc"):
            raise ValueError(
                "a word-level tokenizer splits at spaces only and does not normalise: pre_tokenize and "
                "normalization are for subword tokenizers (bpe or unigram)"
            )
        specials = SPECIALS.tokens
        if kind == "word":
            tok = tokenizers.Tokenizer(models.WordLevel(unk_token=SPECIALS.unk))
            tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            trainer = trainers.WordLevelTrainer(
                vocab_size=vocab_size, special_tokens=specials, show_progress=False
            )
        elif kind in ("bpe", "unigram"):
            if kind == "bpe":
                tok = tokenizers.Tokenizer(models.BPE(unk_token=SPECIALS.unk))
                trainer = trainers.BpeTrainer(
                    vocab_size=vocab_size, special_tokens=specials, show_progress=False
                )
            else:
                tok = tokenizers.Tokenizer(models.Unigram())
                trainer = trainers.UnigramTrainer(
                    vocab_size=vocab_size,
                    special_tokens=specials,
                    unk_token=SPECIALS.unk,
                    show_progress=False,
                )
            tok.normalizer = normalizers.NFKC() if normalization == "nfkc" else normalizers.NFC()
            # Metaspace first, on the whole text, so that only a word's first piece carries the ▁.
            steps = [pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always")]
            if pre_tokenize == "cjk":
                steps.append(pre_tokenizers.Split(tokenizers.Regex(_CJK_PIECE), behavior="isolated"))
            if split_punctuation:
                steps.append(pre_tokenizers.Punctuation())
            tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
            tok.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always")
        else:
            raise ValueError(f"kind must be 'word', 'bpe' or 'unigram', got {kind!r}")
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @property
    def kind(self) -> TokenizerKind:
        """``"word"``, ``"bpe"`` or ``"unigram"``."""
        model = self._tok.model
        return (
            "word"
            if isinstance(model, models.WordLevel)
            else "bpe"
            if isinstance(model, models.BPE)
            else "unigram"
        )

    @property
    def pre_tokenization(self) -> tuple[PreTokenize, bool]:
        """How :meth:`train` split text before learning pieces: ``(pre_tokenize, split_punctuation)``, read
        from the pre-tokenizer (a word-level tokenizer's is ``("whitespace", False)``)."""
        pre = json.loads(self._tok.to_str())["pre_tokenizer"] or {}
        steps = {step["type"] for step in pre.get("pretokenizers", [pre])}
        return ("cjk" if "Split" in steps else "whitespace"), "Punctuation" in steps

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included: every id is in ``range(vocab_size)``."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens; unknown words or characters become ``unk_id``."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[self.encode(t) for t in texts]``, computed in parallel."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_spans(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``encode(text)`` and, per token, the ``[start, end)`` span of the characters of ``text`` it spells.

        Spans index the text as given (before NFKC normalisation), as the library tracks them. The space a
        Metaspace ``▁`` stands for is left out of its token's span, and a lone ``▁`` spells no character of
        the text: its span is empty (``start == end``), so it belongs to no word (``data.words``).
        """
        encoding = self._tok.encode(text, add_special_tokens=False)
        spans = []
        for token, (start, end) in zip(encoding.tokens, encoding.offsets, strict=True):
            if token == _METASPACE:
                start = end
            elif token.startswith(_METASPACE) and start < end and text[start].isspace():
                start += 1
            spans.append((start, end))
        return encoding.ids, spans

    def decode(self, ids: Iterable[int]) -> str:
        """Plain detokenised text of ``ids``, skipping pad, BOS and EOS wherever they are.

        Unknown tokens stay visible as ``<unk>``, so a lossy tokenization is never silent.
        """
        return self._tok.decode([i for i in ids if i not in self._special_ids], skip_special_tokens=False)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The token string of each id, special tokens included (labels for attention-plot axes)."""
        out = []
        for i in ids:
            token = self._tok.id_to_token(i)
            if token is None:
                raise ValueError(f"id {i} is outside the vocabulary of size {self.vocab_size}")
            out.append(token)
        return out

    def to_json(self) -> str:
        """The whole tokenizer (vocabulary, merges, normaliser, pre-tokenizer, decoder) as a JSON string."""
        return self._tok.to_str()

    @classmethod
    def from_json(cls, text: str) -> "Tokenizer":
        """Restore a tokenizer from :meth:`to_json`'s string."""
        try:
            tok = tokenizers.Tokenizer.from_str(text)
        except Exception as e:  # noqa: BLE001  # the Rust library raises a bare Exception
            raise ValueError(f"not a tokenizer JSON: {e}") from None
        return cls(tok)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path``, creating its folder if needed; whole or not at all.

        Raises:
            CorpusError: the write failed (a full disk): one line naming ``path``, and no part of it left.
        """
        path = Path(path)
        staged = path.with_name(f".{path.name}.partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged.write_text(self.to_json(), encoding="utf-8")
            staged.replace(path)
        except OSError as error:
            staged.unlink(missing_ok=True)
            raise CorpusError(path, None, f"cannot write it ({error.strerror or error})") from error

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """Read a tokenizer written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tokenizer file")
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: {e}") from None

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"


def tokenizer_from_json(text: str) -> "Tokenizer | SentencePieceTokenizer":
    """A tokenizer from its ``to_json`` string: an imported model's ``SentencePieceTokenizer`` (its JSON
    starts with ``MARKER``) or a ``Tokenizer`` trained here."""
    if isinstance(text, str) and text.startswith('{"' + MARKER + '"'):
        return SentencePieceTokenizer.from_json(text)
    return Tokenizer.from_json(text)
