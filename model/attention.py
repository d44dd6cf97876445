"""Multi-head attention ("Attention Is All You Need", §3.2), with a fused path and a weight-returning path.

Shape legend: B batch, Tq query length, Tk key length, D model dim, H heads, Dh head dim (D / H).

Masks are boolean with ``True`` = may attend, broadcastable to (B, H, Tq, Tk).

What a call shares with the other layers of its stack (mask, position hooks, packing) comes in one
``AttentionContext`` (``model.context``). Two of its hooks carry position signals in without copies of this
module (see ``model.positions``): ``rotate`` transforms the queries and the new keys before they are scored or
cached (RoPE), and ``score_bias`` is added to the scaled scores (ALiBi, T5's relative bias).
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.cache import KVCache
from model.context import NO_CONTEXT, AttentionContext
from model.masks import KeyMask
from model.packing import Packing


def _padded(x: Tensor, packing: Packing | None) -> Tensor:
    """Packed tokens (N, C) padded to (B, T, C) by their packing; x as it is without one."""
    return x if packing is None else packing.pad(x)


def softmax_weights(q: Tensor, k: Tensor, mask: KeyMask | None, score_bias: Tensor | None) -> Tensor:
    """Softmax of the scaled, biased and masked scores of q (B, H, Tq, Dh) against k (B, H, Tk, Dh):
    (B, H, Tq, Tk), zero in the rows of queries without a key. The path that returns weights."""
    scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5  # (B, H, Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias.to(scores.dtype)
    if mask is not None:
        scores = scores.masked_fill(~mask.attend, torch.finfo(scores.dtype).min)
    weights = scores.float().softmax(dim=-1).to(q.dtype)
    if mask is not None:
        weights = weights * mask.has_key  # a query with no key: zero weights (see ``KeyMask``)
    return weights


def fused_attention(q: Tensor, k: Tensor, v: Tensor, context: AttentionContext, dropout_p: float) -> Tensor:
    """``softmax_weights`` times v, through ``F.scaled_dot_product_attention``: (B, H, Tq, Dh)."""
    mask = None if context.mask is None else context.mask.attend
    attn_mask = mask
    if context.score_bias is not None:
        # Every row keeps a key (see ``KeyMask``), so -inf never fills a whole row (NaN).
        bias = context.score_bias.to(q.dtype)
        attn_mask = bias if mask is None else torch.where(mask, bias, float("-inf"))  # (B|1, H, Tq, Tk)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    return out if context.mask is None else out * context.mask.has_key  # (B, H, Tq, Dh)


def _of_head(x: Tensor | None, head: int) -> Tensor | None:
    """A mask or score bias (B|1, H|1, Tq, Tk): the rows of one head, (B|1, 1, Tq, Tk)."""
    return x if x is None or x.size(1) == 1 else x[:, head : head + 1]


class MultiHeadAttention(nn.Module):
    """h-head scaled dot-product attention with learned input and output projections.

    The input projection is one (3D, D) matrix holding the query, key and value projections in that order,
    the layout of ``torch.nn.MultiheadAttention``, so self-attention costs one matmul. The initial weights are
    set with the model's (``model.transformer.init_weights``).

    Args:
        d_model: model dimension D.
        num_heads: number of heads H; must divide ``d_model``.
        dropout: dropout on the attention weights (training only).
        bias: whether the projections have biases.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        context: AttentionContext = NO_CONTEXT,
        need_weights: bool = False,
        cache: KVCache | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` (B, Tq, D) to ``key``/``value`` (B, Tk, D); for self-attention pass the same
        tensor three times.

        Args:
            context: the mask, position hooks and packing of the call (see ``model.context``). With a cache,
                the mask's Tk counts the cached keys too. With a packing, query holds the (Nq, D) tokens of a
                (B, Tq) batch, key and value the (Nk, D) ones of a (B, Tk) batch: projected as tokens, padded
                for attention, the output packed like the query. A packing takes no cache.
            need_weights: also return the attention weights (the explicit path instead of the fused kernel).
            cache: keys/values from earlier decoding steps; updated in place.
            head_mask: (H,) or (B, H) multipliers of each head's output before the heads are merged: 1 keeps
                a head, 0 silences it (head ablation, Michel et al. 2019).

        Returns:
            output (B, Tq, D) (or (Nq, D) when packed) and weights (B, H, Tq, Tk), or None when
            ``need_weights`` is False. A query whose keys are all masked gets zero weights and zero output
            (before the output projection), never NaN.
        """
        q, k, v = self._project(query, key, value, context, cache)  # (B, H, Tq, Dh), 2 x (B, H, Tk, Dh)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            weights = softmax_weights(q, k, context.mask, context.score_bias)  # (B, H, Tq, Tk)
            # F.dropout, as the fused kernel drops its weights inside (dropout_p), where no module reaches.
            out = F.dropout(weights, p=dropout_p, training=self.training) @ v  # (B, H, Tq, Dh)
        else:
            out, weights = fused_attention(q, k, v, context, dropout_p), None  # (B, H, Tq, Dh)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).reshape(-1, self.num_heads, 1, 1)  # (B|1, H, 1, 1)
        out = self._merge_heads(out)  # (B, Tq, D)
        if context.packing is not None:
            out = context.packing[0].pack(out)  # (Nq, D)
        return self.out_proj(out), weights

    def _project(
        self, query: Tensor, key: Tensor, value: Tensor, context: AttentionContext, cache: KVCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Project into heads, rotate, use and update the cache: q (B, H, Tq, Dh), k and v (B, H, Tk, Dh).

        Packed inputs are projected as tokens, then padded: (N, 3D) → (B, T, 3D).
        """
        query_packing, key_packing = context.packing if context.packing is not None else (None, None)
        if key_packing is not None and (cache is not None or key.size(0) != key_packing.tokens):
            raise ValueError("packed inputs take no cache, and as many key rows as their packing has tokens")
        d = self.d_model
        if cache is not None and cache.static and cache.key is not None:  # cross-attention's later steps
            q = self._split_heads(self._in_linear(query, slice(0, d)))  # (B, H, Tq, Dh)
            k, v = cache.stored()  # (B, H, Tk, Dh) each
            return (q if context.rotate is None else context.rotate(q)), k, v
        if query is key and key is value:  # self-attention: one matmul for all three
            q, k, v = _padded(self.in_proj(query), query_packing).chunk(3, dim=-1)  # 3 x (B, T, D)
        else:
            q = _padded(self._in_linear(query, slice(0, d)), query_packing)  # (B, Tq, D)
            if key is value:  # cross-attention: one matmul for keys and values, 2 x (B, Tk, D)
                k, v = _padded(self._in_linear(key, slice(d, 3 * d)), key_packing).chunk(2, dim=-1)
            else:
                k = _padded(self._in_linear(key, slice(d, 2 * d)), key_packing)  # (B, Tk, D)
                v = _padded(self._in_linear(value, slice(2 * d, 3 * d)), key_packing)  # (B, Tk, D)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if context.rotate is not None:
            # Keys are rotated at their own positions before they are cached, so cached keys never change.
            q, k = context.rotate(q), context.rotate(k)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, Tk_past + Tk, Dh)
        return q, k, v

    def _in_linear(self, x: Tensor, rows: slice) -> Tensor:
        """x (B, T, D) through the input projection's ``rows`` (query [0, D), key [D, 2D), value [2D, 3D)):
        (B, T, len(rows))."""
        b = self.in_proj.bias
        return F.linear(x, self.in_proj.weight[rows], None if b is None else b[rows])

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def _merge_heads(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.d_model)  # (B, T, D)


# What the explanations and guided alignment read of one attention, beside what it computes.


def project_values(attention: MultiHeadAttention, value: Tensor) -> Tensor:
    """The value vectors of every head, as ``attention`` computes them: value (B, Tk, D) → (B, H, Tk, Dh).

    For explanations that weigh attention by what it carries (``analysis.explain.value_norms``); the
    output projection's per-head slices are ``out_proj.weight[:, h * Dh:(h + 1) * Dh]``.
    """
    d = attention.d_model
    return attention._split_heads(attention._in_linear(value, slice(2 * d, 3 * d)))


def head_weights(
    attention: MultiHeadAttention, query: Tensor, key: Tensor, head: int, *,
    context: AttentionContext = NO_CONTEXT,
) -> Tensor:
    """The attention weights of one head (counted from 0), as ``attention`` computes them before dropout:
    (B, 1, Tq, Tk).

    Only this head's rows of the query and key projections are computed, so a loss on one head's attention
    (guided alignment) costs one head's scores beside the fused kernel's pass over all heads, and its gradient
    reaches no other head's projections. ``query``, ``key`` and ``context`` as for
    ``MultiHeadAttention.forward``, without a cache.
    """
    if not 0 <= head < attention.num_heads:
        raise ValueError(f"head must be in [0, {attention.num_heads}), got {head}")
    query_packing, key_packing = context.packing if context.packing is not None else (None, None)
    dh = attention.head_dim
    start = head * dh  # this head's rows of the query block; the key block's are D further
    q = _padded(attention._in_linear(query, slice(start, start + dh)), query_packing)  # (B, Tq, Dh)
    start += attention.d_model
    k = _padded(attention._in_linear(key, slice(start, start + dh)), key_packing)  # (B, Tk, Dh)
    q, k = q.unsqueeze(1), k.unsqueeze(1)  # (B, 1, Tq|Tk, Dh)
    if context.rotate is not None:
        q, k = context.rotate(q), context.rotate(k)
    mask = context.mask
    mask = None if mask is None else KeyMask(_of_head(mask.attend, head), _of_head(mask.has_key, head))
    return softmax_weights(q, k, mask, _of_head(context.score_bias, head))  # (B, 1, Tq, Tk)
