"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", §3) through the
encoder, composed with each decoder layer's cross-attention.

Cross-attention attends to the encoder's output, whose position j is a mixture of every source token; it does
not point at source token j itself. Rollout follows the mixing back: each encoder layer's head-averaged
attention A, with the residual connection as 0.5·A + 0.5·I and rows renormalised, multiplied from the last
layer down to the first. A cross-attention row times that product says how much of each *input* token it
reads.

Shape legend: see ``analysis.explain``.
"""

import torch
from torch import Tensor

from analysis.explain.attention import layer_average
from analysis.explain.trace import Explanation, Trace, layer_names, stack_layers, zero_invalid


def with_residual(attention: Tensor, residual: float = 0.5) -> Tensor:
    """(..., S, S) → (1 - residual)·A + residual·I, each row renormalised to sum to 1."""
    eye = torch.eye(attention.size(-1), dtype=attention.dtype, device=attention.device)
    mixed = (1.0 - residual) * attention + residual * eye  # (..., S, S)
    return mixed / mixed.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(mixed.dtype).tiny)


def rollout(layers: list[Tensor], residual: float = 0.5) -> Tensor:
    """Attention rollout of a stack of self-attention layers, first layer first.

    Args:
        layers: per layer (B, H, S, S) weights (or (B, S, S), already one map per layer).
        residual: the identity's share added for the residual connection (the paper's 0.5).

    Returns:
        (B, S, S): row i says how much of input token j reaches output position i,
        R = Ã_L · … · Ã_1 with Ã_l = with_residual(mean over heads of A_l).
    """
    result = None
    for weights in layers:
        a = with_residual(weights.float().mean(dim=1) if weights.dim() == 4 else weights.float(), residual)
        result = a if result is None else a @ result  # (B, S, S)
    if result is None:
        raise ValueError("rollout needs at least one layer")
    return result


def rollout_attention(trace: Trace, *, residual: float = 0.5) -> Explanation:
    """Every decoder layer's cross-attention (per head and head average) times the encoder's rollout.

    ``residual``: the identity's share for the residual connection (the paper's 0.5; 0 multiplies the raw
    attention maps, attention flow's simpler cousin). A model without encoder layers rolls out to I.
    """
    per_head = stack_layers(trace.cross)  # (B, L, H, T, S)
    if trace.encoder:
        mixing = rollout(trace.encoder, residual)  # (B, S, S)
        per_head = per_head @ mixing[:, None, None]  # (B, L, H, T, S)
    per_head = zero_invalid(per_head, trace.src_valid, trace.tgt_valid)
    return Explanation(
        "rollout", layer_average(per_head), per_head, layer_names(per_head.size(1)),
        trace.src_valid, trace.tgt_valid,
    )
