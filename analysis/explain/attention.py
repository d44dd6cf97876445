"""Raw cross-attention: the weights each decoder position puts on each source token, per head and per layer.

Shape legend: see ``analysis.explain``.
"""

from torch import Tensor

from analysis.explain.trace import Explanation, Trace, layer_names, stack_layers, zero_invalid


def layer_average(per_head: Tensor) -> Tensor:
    """(B, L, H, T, S) → (B, L, T, S): the mean over a layer's heads (rows still sum to 1)."""
    return per_head.mean(dim=2)


def cross_attention(trace: Trace) -> Explanation:
    """Row t of decoder layer l is the cross-attention of the position that *produces* target token t."""
    per_head = zero_invalid(stack_layers(trace.cross), trace.src_valid, trace.tgt_valid)  # (B, L, H, T, S)
    return Explanation(
        "attention", layer_average(per_head), per_head, layer_names(per_head.size(1)),
        trace.src_valid, trace.tgt_valid,
    )
