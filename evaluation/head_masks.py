"""Naming attention heads and silencing them: ``Head``, every head of a model, and ``model.HeadMask``s.

Silencing a head multiplies its output by 0 before the heads are merged (``model.HeadMask``): the (L, H)
multipliers of each attention kind are 1 for a head that runs and 0 for one silenced. A stacked mask gives
every sentence of a batch its own multipliers, so that many ablations share one forward pass
(evaluation.ablation).

Shape legend: B batch, C ablations in one pass, L layers, H heads.

Layers and heads are counted from 0 in code and from 1 in everything shown to people (tables, figures, JSON).
"""

from collections.abc import Collection, Sequence
from typing import NamedTuple

import torch

from analysis.axes import KINDS  # KINDS is also the order of HeadMask's fields
from model import HeadMask, TransformerConfig


class Head(NamedTuple):
    """One attention head: its kind ("encoder", "decoder" or "cross"), layer and index, both from 0."""

    kind: str
    layer: int
    head: int

    def as_dict(self) -> dict:
        return {"kind": self.kind, "layer": self.layer + 1, "head": self.head + 1}

    def __str__(self) -> str:
        return f"{self.kind} layer {self.layer + 1} head {self.head + 1}"


def layer_counts(config: TransformerConfig) -> dict[str, int]:
    """Number of layers of each attention kind."""
    return {
        "encoder": config.num_encoder_layers,
        "decoder": config.num_decoder_layers,
        "cross": config.num_decoder_layers,
    }


def all_heads(config: TransformerConfig) -> list[Head]:
    """Every head of the model, kind by kind, layer by layer."""
    layers = layer_counts(config)
    return [Head(kind, i, j) for kind in KINDS for i in range(layers[kind]) for j in range(config.num_heads)]


def head_mask(config: TransformerConfig, silenced: Collection[Head] = (), *, device=None) -> HeadMask:
    """(L, H) multipliers of every kind: 0 for the ``silenced`` heads, 1 for the others."""
    layers = layer_counts(config)
    masks = {kind: torch.ones(layers[kind], config.num_heads, device=device) for kind in KINDS}
    for head in silenced:
        if head.kind not in masks or not (
            0 <= head.layer < layers[head.kind] and 0 <= head.head < config.num_heads
        ):
            raise ValueError(
                f"{head!r} is not a head of this model ({layers} layers, {config.num_heads} heads)"
            )
        masks[head.kind][head.layer, head.head] = 0.0
    return HeadMask(**masks)


def stacked_head_mask(
    config: TransformerConfig, ablations: Sequence[Collection[Head]], batch_size: int, *, device=None
) -> HeadMask:
    """Per-sentence masks for a batch of ``batch_size`` sentences repeated (``Tensor.repeat``) per ablation.

    Returns (C*B, L, H) masks of every kind; rows i*B .. (i+1)*B - 1 silence the heads of ``ablations[i]``.
    """
    masks = [head_mask(config, silenced, device=device) for silenced in ablations]
    return HeadMask(
        *(torch.stack([m[k] for m in masks]).repeat_interleave(batch_size, dim=0) for k in range(len(KINDS)))
    )  # each (C*B, L, H)
