"""Padding-free activations: the tokens of a padded batch, packed one after another.

Shape legend: B batch, T padded length, N tokens (non-padding positions), C channels.

Every layer of the Transformer but attention acts on each position alone: the projections, the feed-forward
network, LayerNorm, dropout and the residual sums. Run on a padded (B, T, D) batch they spend their work on
padding too, about a third of it for sentences of 10 to 30 tokens batched at random. The training pass keeps
activations packed as (N, D) instead and pads them only around the attention kernel, which needs the (B, T)
layout; padded positions enter it as zeros, are masked as keys and are dropped again from its output. This is
the "padding removal" of the Effective Transformer and of ByteTransformer (Zhai et al. 2023).

Where the tokens sit depends on the batch only, so a training loop finds it on the CPU while collating and
hands the model a ``TokenIndex``: finding it on a GPU (``nonzero``) would make the host wait for the device.
"""

from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor


def token_index(keep: Tensor) -> Tensor:
    """The flat positions ``b * T + t`` of the True entries of ``keep`` (B, T), row-major: (N,) int64.

    ``nonzero``: on a GPU the host waits for the device to learn N. Collating finds it on the CPU instead.
    """
    return keep.flatten().nonzero().squeeze(1)  # (N,)


class TokenIndex(NamedTuple):
    """Where the tokens of a teacher-forced batch sit (see ``token_index``): the one way to ask
    ``Transformer.forward`` for logits at the target tokens only, packed as (N, V).

    Collating finds it on the CPU, so that the training pass asks the device nothing; ``TokenIndex.of`` finds
    it now. A batch's targets ``tgt_out`` have their tokens where ``tgt_in`` has its.
    """

    source: Tensor  # (Ns,) int64: token_index(src != pad_id), src (B, S)
    target: Tensor  # (Nt,) int64: token_index(tgt_in != pad_id), tgt_in (B, T)

    @classmethod
    def of(cls, src: Tensor, tgt_in: Tensor, pad_id: int) -> "TokenIndex":
        """The tokens of ``src`` (B, S) and ``tgt_in`` (B, T), found now: on a GPU the host waits for it."""
        return cls(token_index(src != pad_id), token_index(tgt_in != pad_id))

    def packings(self, src_shape: tuple[int, int], tgt_shape: tuple[int, int]) -> tuple["Packing", "Packing"]:
        """The ``Packing``s of the (B, S) source and the (B, T) target: where their tokens sit."""
        return Packing(self.source, *src_shape), Packing(self.target, *tgt_shape)

    def labels(self, tgt_out: Tensor) -> Tensor:
        """(B, T) → (N,): the targets of the packed logits, in their order."""
        return tgt_out.flatten().index_select(0, self.target)  # (N,)


@dataclass(frozen=True)
class Packing:
    """Where the N tokens of a (B, T) batch sit: ``pack`` gathers them, ``pad`` puts them back.

    Build it with ``Packing.of(keep)``; ``keep`` (B, T) is True at the tokens.
    """

    index: Tensor  # (N,) int64: flat positions b * T + t of the tokens, in row-major order
    batch: int  # B
    length: int  # T

    @classmethod
    def of(cls, keep: Tensor) -> "Packing":
        """The packing of the True positions of ``keep`` (B, T) boolean."""
        return cls(token_index(keep), keep.size(0), keep.size(1))

    @property
    def tokens(self) -> int:
        """N, the number of tokens."""
        return self.index.numel()

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, C) → (N, C): the tokens' rows, in row-major order."""
        return x.flatten(0, 1).index_select(0, self.index)  # (N, C)

    def select(self, ids: Tensor) -> Tensor:
        """(B, T) → (N,): the tokens' entries, e.g. the labels of the kept logits."""
        return ids.flatten().index_select(0, self.index)  # (N,)

    def pad(self, x: Tensor) -> Tensor:
        """(N, C) → (B, T, C), zeros at the padding."""
        padded = x.new_zeros(self.batch * self.length, x.size(-1))  # (B*T, C)
        return padded.index_copy(0, self.index, x).view(self.batch, self.length, -1)  # (B, T, C)
