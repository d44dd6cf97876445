"""Shifted attention (Shift-Att; Chen et al. 2020, "Accurate Word Alignment Induction from Neural Machine
Translation", §3.2).

The decoder position that *produces* y_i reads y_{i-1}; by then it often looks where the next word comes from.
Shift-Att reads y_i's alignment one step later, at the position whose *input* is y_i (and which produces
y_{i+1}). With rows labelled by produced tokens (row t reads token t - 1 and produces token t), target token t
takes row t + 1.

Shape legend: see ``analysis.explain``.
"""

import torch
from torch import Tensor

from analysis.explain.attention import layer_average
from analysis.explain.trace import Explanation, Trace, layer_names, stack_layers, zero_invalid


def shift_rows(scores: Tensor) -> Tensor:
    """scores (..., T, S) → (..., T, S) whose row t is row t + 1 of ``scores``; the last row is 0 (no
    position reads the last produced token, EOS)."""
    return torch.cat([scores[..., 1:, :], torch.zeros_like(scores[..., :1, :])], dim=-2)  # (..., T, S)


def shifted_valid(tgt_valid: Tensor) -> Tensor:
    """(B, T) → (B, T): the rows with a shifted reading, those whose next position is real (EOS loses it)."""
    return torch.cat([tgt_valid[:, 1:], torch.zeros_like(tgt_valid[:, :1])], dim=1)  # (B, T)


def shifted_attention(trace: Trace) -> Explanation:
    """Cross-attention per head and per layer, each target token read at the step that takes it as input.

    EOS (the last row of each sentence) has no such step: its row is zero and not valid, so no score counts
    it; gold links never involve EOS.
    """
    valid = shifted_valid(trace.tgt_valid)
    per_head = zero_invalid(shift_rows(stack_layers(trace.cross)), trace.src_valid, valid)  # (B, L, H, T, S)
    return Explanation(
        "shift_att", layer_average(per_head), per_head, layer_names(per_head.size(1)), trace.src_valid, valid
    )
