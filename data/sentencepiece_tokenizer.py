"""A SentencePiece model whose pieces are looked up in a vocabulary of their own, behind
``data.tokenizer.Tokenizer``'s interface: the tokenizer of a model trained elsewhere (a Marian / OPUS-MT
model's ``source.spm`` or ``target.spm`` with its ``vocab.json``, which ``export.marian`` reads), so that
evaluation, the gold-alignment scoring and the ATTENTION tab read its text as they read this project's.

``sentencepiece`` is optional (``pip install -e .[hf]``); it is imported when such a tokenizer is built.

Encoding is ``transformers``' ``MarianTokenizer``'s: a leading language code (``>>fra<<``) is a token of its
own, the rest is SentencePiece's pieces (after its own normalisation, NFKC for OPUS-MT), each looked up in the
vocabulary, ``<unk>`` where it is missing. Decoding too: the pieces between unknown tokens are joined by
SentencePiece, an unknown token stays visible as ``<unk>``. The whole tokenizer (model bytes and vocabulary)
is one JSON string (``to_json``), so that a run's checkpoint holds it as it holds a ``tokenizers`` JSON, and
``data.tokenizer.tokenizer_from_json`` tells the two apart.
"""

import base64
import json
from collections.abc import Iterable, Sequence

from data.special import SPECIALS

MARKER = "sentencepiece_model"  # the key that makes a tokenizer JSON this class's
_METASPACE = "▁"


def load_processor(model: bytes):
    """A ``SentencePieceProcessor`` of serialized model bytes; a one-line ``ValueError`` if they are not."""
    try:
        import sentencepiece
    except ImportError:
        raise ValueError("a SentencePiece tokenizer needs sentencepiece: pip install -e .[hf]") from None
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=model)
    except RuntimeError as error:
        raise ValueError(f"not a SentencePiece model ({str(error).strip().splitlines()[0]})") from None


def _encode_with_offsets(processor, text: str):
    """SentencePiece's pieces of ``text``, each with the ``begin`` and ``end`` of the UTF-8 bytes of ``text``
    it spells. Releases differ in how they are asked: older ones answer ``out_type="immutable_proto"`` (and
    give serialized bytes for ``"proto"``), newer ones (0.2.3) refuse it and answer ``"proto"``."""
    try:
        return processor.encode(text, out_type="immutable_proto").pieces
    except ValueError:
        return processor.encode(text, out_type="proto").pieces


class SentencePieceTokenizer:
    """One side's SentencePiece model and vocabulary, in this project's ids.

    Args:
        model: the SentencePiece model file's bytes.
        tokens: per id of this project, its token: ids 0..3 are pad, BOS, EOS and unknown
            (``data.special.SPECIALS``) whatever their names, every later id a piece (or language code) of the
            vocabulary; a token listed twice is encoded as its first id.
    """

    kind = "sentencepiece"

    def __init__(self, *, model: bytes, tokens: Sequence[str]) -> None:
        if len(tokens) <= SPECIALS.unk_id:
            raise ValueError(f"a vocabulary needs the {SPECIALS.unk_id + 1} special ids, got {len(tokens)}")
        self.model, self._tokens = bytes(model), list(tokens)
        self._processor = load_processor(self.model)
        self._ids: dict[str, int] = {}
        for i, token in enumerate(self._tokens[SPECIALS.unk_id + 1:], start=SPECIALS.unk_id + 1):
            self._ids.setdefault(token, i)
        self._skipped = frozenset((SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id))

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def _pieces(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """The pieces of ``text`` and each one's ``[start, end)`` characters of ``text`` (``encode_spans``).
        """
        pieces, spans = [], []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a language code, as MarianTokenizer
            pieces.append(text[: end + 2])
            spans.append((0, 0))  # spells no word
            offset, text = end + 2, text[end + 2:]
        else:
            offset = 0
        encoded = _encode_with_offsets(self._processor, text)
        # SentencePiece counts UTF-8 bytes of the text as given (before its normalisation); characters here.
        character = {}
        position = 0
        for index, char in enumerate(text):
            character[position] = index
            position += len(char.encode("utf-8"))
        character[position] = len(text)
        for piece in encoded:
            start, end = character[piece.begin], character[piece.end]
            while start < end and text[start].isspace():  # the space a ▁ stands for is no word's
                start += 1
            if start == end and piece.piece.strip(_METASPACE) and start < len(text):
                end = start + 1  # a piece normalisation made of part of a character (ﬁ → f, i): that word's
            pieces.append(piece.piece)
            spans.append((offset + start, offset + end))
        return pieces, spans

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without EOS (``data.batching.collate`` adds it)."""
        return self.encode_spans(text)[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def encode_spans(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``encode(text)`` and, per token, the ``[start, end)`` span of the characters of ``text`` it spells
        (SentencePiece's offsets into the text as given, before its normalisation). The space a ``▁`` stands
        for is left out of its token's span; a lone ``▁`` and a language code spell no word (an empty span,
        ``data.words``)."""
        pieces, spans = self._pieces(text)
        return [self._ids.get(piece, SPECIALS.unk_id) for piece in pieces], spans

    def decode(self, ids: Iterable[int]) -> str:
        """Plain text of ``ids``, skipping pad, BOS and EOS; unknown tokens stay visible as ``<unk>``."""
        text, run = "", []
        for token in self.tokens([i for i in ids if i not in self._skipped]):
            if token == self._tokens[SPECIALS.unk_id]:
                text += self._processor.decode_pieces(run) + token + " "
                run = []
            else:
                run.append(token)
        text += self._processor.decode_pieces(run)
        return text.replace(_METASPACE, " ").strip()

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The token of each id, special tokens included (labels for attention-plot axes)."""
        out = []
        for i in ids:
            if not 0 <= i < len(self._tokens):
                raise ValueError(f"id {i} is outside the vocabulary of size {self.vocab_size}")
            out.append(self._tokens[i])
        return out

    def to_json(self) -> str:
        """The model's bytes (base64) and the vocabulary as one JSON string; ``from_json`` restores it."""
        model = base64.b64encode(self.model).decode("ascii")
        return json.dumps({MARKER: model, "tokens": self._tokens}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "SentencePieceTokenizer":
        try:
            saved = json.loads(text)
            return cls(model=base64.b64decode(saved[MARKER], validate=True), tokens=saved["tokens"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"not a SentencePiece tokenizer JSON ({error})") from None

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer(vocab_size={self.vocab_size})"
