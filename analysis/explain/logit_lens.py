"""The logit lens (nostalgebraist 2020): each decoder layer's output read through the final norm and the
output projection, as if the decoder stopped there.

It shows at which layer the decoder settles on each word: per layer and target position, the top tokens, and
the probability and rank of the token finally produced. Unlike the other methods it maps target positions to
the vocabulary, not to the source, so it has its own result type and no AER.

Shape legend: see ``analysis.explain``.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class LogitLens:
    top_ids: Tensor  # (B, L, T, k) the k most probable tokens of each layer's reading
    top_probs: Tensor  # (B, L, T, k)
    produced_prob: Tensor  # (B, L, T) probability of ``produced`` in each layer's reading
    produced_rank: Tensor  # (B, L, T) int64, 0 = the layer's most probable token


@dataclass(frozen=True)
class FinalNorm:
    """The LayerNorm after the decoder stack (pre-LN models), as plain tensors; None where there is none."""

    weight: Tensor  # (D,)
    bias: Tensor | None  # (D,)
    eps: float


def logit_lens(
    hidden: list[Tensor],
    output_weight: Tensor,
    produced: Tensor,
    *,
    final_norm: FinalNorm | None = None,
    output_bias: Tensor | None = None,
    top_k: int = 3,
) -> LogitLens:
    """Read every decoder layer's output as the model reads its last one.

    Args:
        hidden: per decoder layer, its output (B, T, D) before the final norm (``Transformer.decode`` with
            ``DecoderRequest(hidden=True)``).
        output_weight: (V, D) the output projection (the tied target embedding, or ``output_proj.weight``).
        produced: (B, T) the token at each position to follow through the layers (the reference under
            forced decoding, or the model's own output).
        final_norm: the norm applied before the output projection; None for post-LN models, whose layers end
            in their own norm.
        output_bias: (V,) a fixed bias the model adds to its logits (an imported Marian model's), or None.
        top_k: how many top tokens to keep per layer and position.

    Returns:
        ``LogitLens``; the last layer's reading is the model's own output distribution.
    """
    if not hidden:
        raise ValueError("the logit lens needs at least one layer's output")
    if top_k < 1 or top_k > output_weight.size(0):
        raise ValueError(f"top_k must be in [1, {output_weight.size(0)}], got {top_k}")
    x = torch.stack([h.detach().float() for h in hidden], dim=1)  # (B, L, T, D)
    if final_norm is not None:
        bias = None if final_norm.bias is None else final_norm.bias.detach().float()
        x = F.layer_norm(x, x.shape[-1:], final_norm.weight.detach().float(), bias, final_norm.eps)
    bias = None if output_bias is None else output_bias.detach().float()
    log_probs = F.linear(x, output_weight.detach().float(), bias).log_softmax(dim=-1)  # (B, L, T, V)
    top = log_probs.topk(top_k, dim=-1)
    index = produced[:, None, :, None].expand(-1, x.size(1), -1, 1)  # (B, L, T, 1)
    chosen = log_probs.gather(-1, index)  # (B, L, T, 1)
    rank = (log_probs > chosen).sum(dim=-1)  # (B, L, T): tokens strictly more probable
    return LogitLens(top.indices, top.values.exp(), chosen.squeeze(-1).exp(), rank)
