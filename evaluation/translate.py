"""Batched translation of raw sentences with a trained model, and the length-sorted batches it and the head
analyses read.

Shape legend: B batch, S source length, L generated length.
"""

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from data.batching import Batch, collate
from data.pairs import Pair
from data.tokenizer import Tokenizer
from model import HeadMask, Transformer

UNKNOWN_SHOWN = 20  # unknown pieces named in the line that reports them


def length_sorted_batches(
    sources: Sequence[list[int]], targets: Sequence[list[int]] | None, batch_size: int
) -> Iterator[Batch]:
    """Batches of ``batch_size`` sentences of similar length (little padding); ``Batch.index`` gives the
    order."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        yield collate([(i, sources[i], [] if targets is None else targets[i]) for i in chunk])


def pair_batches(
    pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, batch_size: int
) -> list[Batch]:
    """Source and reference of every pair, tokenized, in :func:`length_sorted_batches`."""
    sources = src_tokenizer.encode_batch([p.source for p in pairs])
    targets = tgt_tokenizer.encode_batch([p.target for p in pairs])
    return list(length_sorted_batches(sources, targets, batch_size))


@dataclass(frozen=True)
class Decoding:
    """How sentences are translated: beam search (1: greedy) with GNMT's length penalty, ``batch_size``
    sentences at a time, at most ``max_len`` tokens each (None: twice the source length + 10)."""

    beam_size: int = 1
    length_penalty: float = 0.6
    batch_size: int = 64
    max_len: int | None = None

    def options(self) -> dict:
        """The keyword arguments of :func:`translate_hypotheses`."""
        return asdict(self)


class Hypothesis(NamedTuple):
    ids: list[int]  # the generated tokens, EOS and padding removed
    finished: bool  # False: cut by the length limit before it generated EOS


@torch.no_grad()
def translate_hypotheses(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sources: Sequence[str],
    *,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    batch_size: int = 64,
    max_len: int | None = None,
    head_mask: HeadMask | None = None,
    progress=None,
) -> list[Hypothesis]:
    """The translation of each source sentence, in input order, and whether it ended with EOS.

    ``progress``, if given, is called with the number of sentences finished after each batch.
    """
    device = model.device
    encoded = [src_tokenizer.encode(text) for text in sources]
    outputs: list[Hypothesis] = [Hypothesis([], True) for _ in sources]
    for batch in length_sorted_batches(encoded, None, batch_size):
        tokens = model.generate(
            batch.src.to(device), max_len=max_len, beam_size=beam_size, length_penalty=length_penalty,
            head_mask=head_mask,
        )  # (B, L)
        ended = (tokens == model.config.eos_id).any(dim=1).tolist()
        for index, ids, finished in zip(batch.index.tolist(), model.generated_ids(tokens), ended):
            outputs[index] = Hypothesis(ids, finished)
        if progress is not None:
            progress(len(batch.index))
    return outputs


def unknown_pieces_line(datamodule, sentences: Sequence[str]) -> str | None:
    """One line naming the pieces of ``sentences`` (as the run reads them: ``read_text``) that the run's
    source tokenizer reads as ``<unk>``, each once, in order; None where it knows them all."""
    pieces = [text[a:b] for text in sentences for a, b in datamodule.unknown_spans(text)]
    if not pieces:
        return None
    shown = list(dict.fromkeys(pieces))
    listed = " ".join(shown[:UNKNOWN_SHOWN]) + (" …" if len(shown) > UNKNOWN_SHOWN else "")
    return f"{len(pieces)} source piece{'s' if len(pieces) > 1 else ''} unknown to this run: {listed}"


def translate(model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, sources: Sequence[str],
              **options) -> list[list[int]]:
    """Token ids (EOS and padding removed) of the translation of each source sentence, in input order; the
    options are those of :func:`translate_hypotheses`."""
    return [h.ids for h in translate_hypotheses(model, src_tokenizer, tgt_tokenizer, sources, **options)]
