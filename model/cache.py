"""What incremental decoding keeps between steps: the projected keys and values of every attention.

Shape legend: B batch (decoded rows), H heads, T positions, Dh head dim.

The caches are explicit state owned by the caller (``Transformer.new_cache``, ``model.decoding``), never
hidden on modules. In beam search the G beams of a sentence share one cross-attention cache row, the
sentence's (see ``model.decoding.BeamRows``); ``DecoderCache`` keeps such rows where they are when it reorders
beams.
"""

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Projected keys and values of one attention module, kept between decoding steps.

    Decoder self-attention appends the new position's key and value at every step (``static=False``), into a
    buffer of ``reserve`` positions allocated at the first step (decoding knows how many it will need), which
    grows by doubling if more come, so a step copies only the new position. Cross-attention projects the
    encoder output once, at the first step, and reuses it (``static=True``). The cache is explicit state owned
    by the caller, never hidden on the module.
    """

    static: bool = False
    key: Tensor | None = None  # (B, H, capacity, Dh); positions [0, length) are filled
    value: Tensor | None = None  # (B, H, capacity, Dh)
    length: int = 0
    reserve: int = 16  # positions to allocate at the first append

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Store new positions (B, H, t, Dh); return every position so far, (B, H, length, Dh) views."""
        t = key.size(2)
        if self.key is None or self.length + t > self.key.size(2):
            capacity = max(2 * (self.length + t), self.reserve)
            grown_key = key.new_empty(key.size(0), key.size(1), capacity, key.size(3))
            grown_value = value.new_empty(grown_key.shape)
            if self.key is not None:
                grown_key[:, :, : self.length] = self.key[:, :, : self.length]
                grown_value[:, :, : self.length] = self.value[:, :, : self.length]
            self.key, self.value = grown_key, grown_value
        self.key[:, :, self.length : self.length + t] = key
        self.value[:, :, self.length : self.length + t] = value
        self.length += t
        return self.stored()

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new keys and values (B, H, t, Dh): appended, or as the whole of a static cache; return
        every position stored, (B, H, length, Dh)."""
        if not self.static:
            return self.append(key, value)
        # Stored contiguous: attention reads them at every decoding step, and strided ones read slower.
        self.key, self.value, self.length = key.contiguous(), value.contiguous(), key.size(2)
        return self.stored()

    def stored(self) -> tuple[Tensor, Tensor]:
        """The keys and values stored so far, (B, H, length, Dh) views."""
        return self.key[:, :, : self.length], self.value[:, :, : self.length]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the beams it extends). index: (B',) int64."""
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


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
        ``model.decoding.BeamRows``), stays as it is: beam search only moves rows among a sentence's beams.
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
