"""The inputs every explanation method reads (``Trace``) and the one type they all return (``Explanation``).

Shape legend: see ``analysis.explain``.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# (N, S, D) source token embeddings (of sentences of the batch, repeated or interpolated), (N,) int64 the
# sentence of the traced batch each belongs to and (N,) int64 a target position of it → (N,) the
# teacher-forced log-probability of that sentence's target token there. One position a row: a row's backward
# pass then holds one vocabulary-sized row of logits, not T of them.
LogProbs = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Trace:
    """One teacher-forced pass over a batch of sentence pairs, as plain tensors.

    Attention weights are those the model used (rows sum to 1); value vectors and output projections are those
    of each decoder layer's cross-attention. ``embeddings`` and ``log_probs`` are for the gradient methods;
    None where the caller did not provide them.
    """

    cross: list[Tensor]  # per decoder layer (B, H, T, S)
    encoder: list[Tensor]  # per encoder layer (B, H, S, S)
    src_valid: Tensor  # (B, S) bool, True = real source token (EOS included)
    tgt_valid: Tensor  # (B, T) bool, True = real target position (EOS included)
    cross_values: list[Tensor] | None = None  # per decoder layer (B, H, S, Dh)
    cross_out_weights: list[Tensor] | None = None  # per decoder layer (D, H*Dh): out_proj.weight
    src_words: Tensor | None = None  # (B, S) bool, True = a source token that is no special token
    embeddings: Tensor | None = None  # (B, S, D) source token embeddings, as the encoder looks them up
    log_probs: LogProbs | None = None

    def __post_init__(self) -> None:
        if not self.cross:
            raise ValueError("a Trace needs the cross-attention of at least one decoder layer")
        B, _, T, S = self.cross[0].shape
        if tuple(self.src_valid.shape) != (B, S) or tuple(self.tgt_valid.shape) != (B, T):
            raise ValueError(
                f"src_valid {tuple(self.src_valid.shape)} and tgt_valid {tuple(self.tgt_valid.shape)} must "
                f"be (B, S) = {(B, S)} and (B, T) = {(B, T)} for cross-attention of shape "
                f"{tuple(self.cross[0].shape)}"
            )

    @property
    def words(self) -> Tensor:
        """(B, S) bool: the positions gradient methods attribute to (all valid ones if unknown)."""
        return self.src_valid if self.src_words is None else self.src_words & self.src_valid


@dataclass(frozen=True)
class Explanation:
    """One method's target × source matrices for a batch: per layer, and per head where the method has heads.

    Rows are target positions (the tokens produced, EOS last), columns source positions. Scores may be
    weights (rows summing to 1), norms (≥ 0) or signed attributions (``signed``); a row's alignment is its
    largest score among valid source positions (``analysis.explain.scores``). Rows outside ``tgt_valid``
    (padding, and for Shift-Att the EOS row) have no reading and are zero.
    """

    method: str
    per_layer: Tensor  # (B, L, T, S)
    per_head: Tensor | None  # (B, L, H, T, S); None when the method has no heads
    layers: tuple[str, ...]  # L labels shown to people: "layer 1", ..., or "embeddings"
    src_valid: Tensor  # (B, S) bool
    tgt_valid: Tensor  # (B, T) bool, the rows that have a reading
    signed: bool = False

    def __post_init__(self) -> None:
        B, L, T, S = self.per_layer.shape
        if len(self.layers) != L:
            raise ValueError(f"{self.method}: {len(self.layers)} layer labels for {L} layers")
        if self.per_head is not None and (self.per_head.dim() != 5 or self.per_head.shape[:2] != (B, L)
                                          or self.per_head.shape[3:] != (T, S)):
            raise ValueError(
                f"{self.method}: per_head {tuple(self.per_head.shape)} does not match per_layer "
                f"{(B, L, T, S)}"
            )


def layer_names(count: int) -> tuple[str, ...]:
    """Labels of ``count`` layers, counted from 1 as everything shown to people is."""
    return tuple(f"layer {i + 1}" for i in range(count))


def zero_invalid(scores: Tensor, src_valid: Tensor, tgt_valid: Tensor) -> Tensor:
    """scores (B, ..., T, S) with padded rows and columns set to 0."""
    keep = tgt_valid[:, :, None] & src_valid[:, None, :]  # (B, T, S)
    keep = keep.view(keep.size(0), *([1] * (scores.dim() - 3)), *keep.shape[1:])  # (B, 1.., T, S)
    return scores.masked_fill(~keep, 0.0)


def stack_layers(layers: list[Tensor]) -> Tensor:
    """Per layer (B, H, T, S) → (B, L, H, T, S), float32, detached."""
    return torch.stack([layer.detach().float() for layer in layers], dim=1)  # (B, L, H, T, S)
