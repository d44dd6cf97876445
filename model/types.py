"""The small types that ``Transformer.encode``/``decode``, decoding and their callers share.

Shape legend: B batch, S source length, T target length, V vocabulary size, L layers, H heads.

They live apart from ``model.transformer`` so that ``model.decoding`` needs them without the model, and the
model can import decoding for ``Transformer.generate``.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from model.attention import KVCache
from model.packing import Packing


class AttentionMaps(NamedTuple):
    """Attention weights of every layer, returned when asked for, never stored on modules."""

    encoder: list[Tensor]  # per layer (B, H, S, S)
    decoder: list[Tensor]  # per layer (B, H, T, T)
    cross: list[Tensor]  # per layer (B, H, T, S)


class AlignedHead(NamedTuple):
    """The one cross-attention head a guided-alignment loss supervises (``Transformer.forward``'s
    ``alignment_head``), counted from 0."""

    layer: int
    head: int
    # Read with the decoder's causal mask lifted, every target position seeing the whole target, in a
    # second pass up to ``layer`` (Garg et al. 2019's full context; ``Transformer.full_context_attention``).
    full_context: bool = False


class EncoderOutput(NamedTuple):
    memory: Tensor  # (B, S, D), or (N, D) tokens with a packing
    src_attend: Tensor  # (B, 1, 1, S) boolean, True = real source token
    attention: list[Tensor]  # per layer (B, H, S, S); empty unless asked for
    packing: Packing | None = None  # where memory's tokens sit in the (B, S) batch, if packed


class DecoderOutput(NamedTuple):
    logits: Tensor  # (B, T, V)
    self_attention: list[Tensor]  # per layer (B, H, T, T); empty unless asked for
    cross_attention: list[Tensor]  # per layer (B, H, T, S); empty unless asked for
    hidden: tuple[Tensor, ...] = ()  # per layer's output (B, T, D) before the final norm; empty unless asked
    alignment: Tensor | None = None  # (B, T, S): one cross-attention head's weights, when asked for


@dataclass
class DecoderCache:
    """Everything incremental decoding keeps between steps: one self- and one cross-attention cache per
    layer."""

    layers: list[tuple[KVCache, KVCache]] = field(default_factory=list)
    length: int = 0  # target positions decoded so far; the next position's index

    @classmethod
    def empty(cls, num_layers: int, reserve: int = 16) -> "DecoderCache":
        """A cache with room for ``reserve`` target positions before its buffers must grow."""
        return cls(
            [(KVCache(static=False, reserve=reserve), KVCache(static=True)) for _ in range(num_layers)]
        )

    def reorder(self, index: Tensor) -> None:
        """Keep the decoded rows in ``index`` (B',), e.g. the beams that survive a beam-search step.

        A cross-attention cache with one row per source sentence, shared by the G rows of its beams (see
        ``MultiHeadAttention``), stays as it is: beam search only moves rows among the beams of a sentence.
        """
        self_cache, cross_cache = self.layers[0] if self.layers else (KVCache(), KVCache())
        shared = cross_cache.key is not None and cross_cache.key.size(0) != self_cache.key.size(0)
        if shared and index.device.type == "cpu":  # every layer alike
            # Checked where it costs no host-device sync; on a GPU it would make every beam step wait.
            groups = self_cache.key.size(0) // cross_cache.key.size(0)
            rows = torch.arange(index.numel(), device=index.device)
            assert torch.equal(index // groups, rows // groups), "a row moved to another sentence"
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if not shared:
                cross_cache.reorder(index)

    def keep_sentences(self, sentences: Tensor, groups: int) -> None:
        """Keep only the sentences in ``sentences`` (B',), each decoded as ``groups`` consecutive rows (its
        beams), e.g. those beam search has not finished yet. A cross-attention cache with one row per sentence
        keeps that row; every other cache keeps the sentence's ``groups`` rows."""
        rows = (sentences[:, None] * groups + torch.arange(groups, device=sentences.device)).view(-1)
        for self_cache, cross_cache in self.layers:
            shared = cross_cache.key is not None and cross_cache.key.size(0) != self_cache.key.size(0)
            self_cache.reorder(rows)
            cross_cache.reorder(sentences if shared else rows)


class HeadMask(NamedTuple):
    """Multipliers of each head's output, 1 keeps a head and 0 silences it: (L, H), or (B, L, H)
    per sentence."""

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None

    def layer(self, index: int) -> "HeadMask":
        """The multipliers of layer ``index`` of each stack: (H,), or (B, H) per sentence."""

        def of_layer(multipliers: Tensor | None) -> Tensor | None:
            if multipliers is None:
                return None
            return multipliers[index] if multipliers.dim() == 2 else multipliers[:, index]

        return HeadMask(of_layer(self.encoder), of_layer(self.decoder), of_layer(self.cross))


NO_HEAD_MASK = HeadMask()  # every head kept
