"""Value-weighted attention: how much of each source token actually reaches the output of a head or a layer
(Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector Norms", §3).

A head's output at target position i is Σ_j α_ij f_h(x_j) with f_h(x_j) = v_j W_O^h (the value vector of
source token j through the head's slice of the output projection). A large weight on a token whose vector is
tiny moves nothing; the norm ‖α_ij f_h(x_j)‖ measures what is moved. Per layer, the heads' contributions are
summed as vectors before the norm, ‖Σ_h α^h_ij f_h(x_j)‖, as the layer's output sums them. The output
projection's bias is the same for every source token and is left out, as in the paper.

Shape legend: see ``analysis.explain``.
"""

import torch
from torch import Tensor

from analysis.explain.trace import Explanation, Trace, layer_names, zero_invalid


def transformed_values(values: Tensor, out_weight: Tensor) -> Tensor:
    """f_h(x_j) = v_j W_O^h for every head: values (B, H, S, Dh), out_weight (D, H*Dh) → (B, H, S, D).

    ``out_weight`` is ``nn.Linear.weight`` of the output projection, so head h's slice is its columns
    h*Dh .. (h+1)*Dh.
    """
    H, Dh = values.shape[1], values.shape[3]
    per_head = out_weight.view(out_weight.size(0), H, Dh)  # (D, H, Dh)
    return torch.einsum("bhsk,dhk->bhsd", values, per_head)  # (B, H, S, D)


def value_weighted(weights: Tensor, values: Tensor, out_weight: Tensor) -> tuple[Tensor, Tensor]:
    """Per head ‖α_ij f_h(x_j)‖ and per layer ‖Σ_h α^h_ij f_h(x_j)‖ of one attention layer.

    Args:
        weights: (B, H, T, S) attention weights.
        values: (B, H, S, Dh) value vectors of the keys.
        out_weight: (D, H*Dh) the output projection's weight.

    Returns:
        per head (B, H, T, S) and per layer (B, T, S), ≥ 0.
    """
    f = transformed_values(values.float(), out_weight.float())  # (B, H, S, D)
    alpha = weights.float()
    per_head = alpha * f.norm(dim=-1).unsqueeze(2)  # (B, H, T, S): ‖α f‖ = α ‖f‖ as α ≥ 0
    summed = torch.einsum("bhts,bhsd->btsd", alpha, f)  # (B, T, S, D)
    return per_head, summed.norm(dim=-1)  # (B, H, T, S), (B, T, S)


def value_weighted_attention(trace: Trace) -> Explanation:
    """Value-weighted cross-attention of every decoder layer, per head and per layer."""
    if trace.cross_values is None or trace.cross_out_weights is None:
        raise ValueError("value_norms needs the trace's cross_values and cross_out_weights")
    heads, layers = zip(*(
        value_weighted(w.detach(), v.detach(), o.detach())
        for w, v, o in zip(trace.cross, trace.cross_values, trace.cross_out_weights, strict=True)
    ))
    per_head = zero_invalid(torch.stack(heads, dim=1), trace.src_valid, trace.tgt_valid)  # (B, L, H, T, S)
    per_layer = zero_invalid(torch.stack(layers, dim=1), trace.src_valid, trace.tgt_valid)  # (B, L, T, S)
    return Explanation(
        "value_norms", per_layer, per_head, layer_names(per_layer.size(1)), trace.src_valid, trace.tgt_valid
    )
