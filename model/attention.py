"""Multi-head attention ("Attention Is All You Need", §3.2), with a fused path and a weight-returning path.

Shape legend: B batch, Tq query length, Tk key length, D model dim, H heads, Dh head dim (D / H).

Masks are boolean with ``True`` = may attend, broadcastable to (B, H, Tq, Tk).

What a call shares with the other layers of its stack (mask, position hooks, packing) comes in one
``AttentionContext`` (``model.context``). Two of its hooks carry position signals in without copies of this
module (see ``model.positions``): ``rotate`` transforms the queries and the new keys before they are scored or
cached (RoPE), and ``score_bias`` is added to the scaled scores (ALiBi, T5's relative bias).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.context import NO_CONTEXT, AttentionContext
from model.masks import KeyMask
from model.packing import Packing


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


def _padded(x: Tensor, packing: Packing | None) -> Tensor:
    """Packed tokens (N, C) padded to (B, T, C) by their packing; x as it is without one."""
    return x if packing is None else packing.pad(x)


class MultiHeadAttention(nn.Module):
    """h-head scaled dot-product attention with learned input and output projections.

    The input projection is one (3D, D) matrix holding the query, key and value projections in that order,
    the layout of ``torch.nn.MultiheadAttention``, so self-attention costs one matmul. The initial weights are
    set with the model's (``model.init.init_weights``).

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
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: (B, Tq, D).
            key, value: (B, Tk, D). Pass the same tensor three times for self-attention.
                Or (B/G, Tk, D), each row shared by G consecutive query rows (the beams of a sentence in
                beam search): the keys and values are projected and cached once per row, and the G rows'
                queries attend to them as G * Tq queries of one row, with no copy of the keys.
            context: the mask, position hooks and packing of the call (see ``model.context``). With a cache,
                the mask's Tk counts the cached keys too; with shared keys it is (B/G, H, 1, Tk). With a
                packing, query holds the (Nq, D) tokens of a (B, Tq) batch, key and value the (Nk, D) ones
                of a (B, Tk) batch: projected as tokens, padded for attention, the output packed like the
                query. A packing takes no cache and no shared keys.
            need_weights: also return the attention weights (the explicit path instead of the fused kernel).
            cache: keys/values from earlier decoding steps; updated in place.
            head_mask: (H,) or (B, H) multipliers of each head's output before the heads are merged: 1 keeps
                a head, 0 silences it (head ablation, Michel et al. 2019).

        Returns:
            output (B, Tq, D) (or (Nq, D) when packed) and weights (B, H, Tq, Tk), or None when
            ``need_weights`` is False. A query whose keys are all masked gets zero weights and zero output
            (before the output projection), never NaN.
        """
        q, k, v = self._project(query, key, value, context, cache)  # (B, H, Tq, Dh), 2 x (B|B/G, H, Tk, Dh)
        groups = self._query_rows_per_key_row(q, k, context)
        if groups > 1:
            q = self._fold_groups(q, groups)  # (B/G, H, G*Tq, Dh)
        if need_weights:
            out, weights = self._attend_explicitly(q, k, v, context)  # (B, H, Tq, Dh), (B, H, Tq, Tk)
        else:
            out, weights = self._attend_fused(q, k, v, context), None  # (B, H, Tq, Dh)
        if groups > 1:
            out = self._unfold_groups(out, groups)  # (B, H, Tq, Dh)
            weights = None if weights is None else self._unfold_groups(weights, groups)  # (B, H, Tq, Tk)
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
        if cache is not None and cache.static and cache.key is not None:  # cross-attention's later steps
            q = self._split_heads(self._in_linear(query, 0, 1))  # (B, H, Tq, Dh)
            k, v = cache.stored()  # (B, H, Tk, Dh) each
            return (q if context.rotate is None else context.rotate(q)), k, v
        if query is key and key is value:  # self-attention: one matmul for all three
            q, k, v = _padded(self.in_proj(query), query_packing).chunk(3, dim=-1)  # 3 x (B, T, D)
        else:
            q = _padded(self._in_linear(query, 0, 1), query_packing)  # (B, Tq, D)
            if key is value:  # cross-attention: one matmul for keys and values
                k, v = _padded(self._in_linear(key, 1, 3), key_packing).chunk(2, dim=-1)  # 2 x (B, Tk, D)
            else:
                k = _padded(self._in_linear(key, 1, 2), key_packing)  # (B, Tk, D)
                v = _padded(self._in_linear(value, 2, 3), key_packing)  # (B, Tk, D)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if context.rotate is not None:
            # Keys are rotated at their own positions before they are cached, so cached keys never change.
            q, k = context.rotate(q), context.rotate(k)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, Tk_past + Tk, Dh)
        return q, k, v

    def _in_linear(self, x: Tensor, first: int, end: int) -> Tensor:
        """x (B, T, D) through the input projection's rows of blocks [first, end) (0 query, 1 key, 2 value):
        (B, T, (end - first) * D)."""
        d, b = self.d_model, self.in_proj.bias
        rows = slice(first * d, end * d)
        return F.linear(x, self.in_proj.weight[rows], None if b is None else b[rows])

    def _query_rows_per_key_row(self, q: Tensor, k: Tensor, context: AttentionContext) -> int:
        """G: 1, or the query rows that share each key row (checked against the mask and score bias)."""
        batch, key_rows = q.size(0), k.size(0)
        if key_rows == batch:
            return 1
        groups = batch // max(key_rows, 1)
        if groups * key_rows != batch or context.score_bias is not None:
            with_bias = " with a score_bias" if context.score_bias is not None else ""
            raise ValueError(f"{batch} query rows cannot share {key_rows} key rows{with_bias}")
        shape = None if context.mask is None else context.mask.attend.shape
        if shape is not None and (shape[-2] != 1 or shape[0] not in (1, key_rows)):
            raise ValueError(f"shared keys need one mask row per key row, got a mask {tuple(shape)}")
        return groups

    def _attend_explicitly(
        self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext
    ) -> tuple[Tensor, Tensor]:
        """Scores, softmax and weighted values written out: output (B, H, Tq, Dh), weights (B, H, Tq, Tk)."""
        weights = self._weights(q, k, context.mask, context.score_bias)  # (B, H, Tq, Tk)
        # F.dropout, as the fused kernel drops its weights inside (dropout_p), where no module reaches.
        return F.dropout(weights, p=self._dropout_p(), training=self.training) @ v, weights

    def _weights(self, q: Tensor, k: Tensor, mask: KeyMask | None, score_bias: Tensor | None) -> Tensor:
        """Softmax of the scaled, biased and masked scores of q (B, H, Tq, Dh) against k (B, H, Tk, Dh):
        (B, H, Tq, Tk), zero in the rows of queries without a key."""
        scores = (q @ k.transpose(-2, -1)) * self.head_dim**-0.5  # (B, H, Tq, Tk)
        if score_bias is not None:
            scores = scores + score_bias.to(scores.dtype)
        if mask is not None:
            scores = scores.masked_fill(~mask.attend, torch.finfo(scores.dtype).min)
        weights = scores.float().softmax(dim=-1).to(q.dtype)
        if mask is not None:
            weights = weights * mask.has_key  # a query with no key: zero weights (see ``KeyMask``)
        return weights

    def _attend_fused(self, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> Tensor:
        """The same output through ``F.scaled_dot_product_attention``, no weights: (B, H, Tq, Dh)."""
        mask = None if context.mask is None else context.mask.attend
        attn_mask = mask
        if context.score_bias is not None:
            # Every row keeps a key (see ``KeyMask``), so -inf never fills a whole row (NaN).
            bias = context.score_bias.to(q.dtype)
            attn_mask = bias if mask is None else torch.where(mask, bias, float("-inf"))  # (B|1, H, Tq, Tk)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self._dropout_p())
        return out if context.mask is None else out * context.mask.has_key  # (B, H, Tq, Dh)

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def project_values(self, value: Tensor) -> Tensor:
        """The value vectors of every head, as ``forward`` computes them: value (B, Tk, D) → (B, H, Tk, Dh).

        For explanations that weigh attention by what it carries (``analysis.explain.value_norms``); the
        output projection's per-head slices are ``out_proj.weight[:, h * Dh:(h + 1) * Dh]``.
        """
        return self._split_heads(self._in_linear(value, 2, 3))  # (B, H, Tk, Dh)

    def head_weights(
        self, query: Tensor, key: Tensor, head: int, *, context: AttentionContext = NO_CONTEXT
    ) -> Tensor:
        """The attention weights of one head (counted from 0), as ``forward`` computes them before dropout:
        (B, 1, Tq, Tk).

        Only this head's rows of the query and key projections are computed, so a loss on one head's
        attention (guided alignment) costs one head's scores beside the fused kernel's pass over all heads,
        and its gradient reaches no other head's projections. ``query``, ``key`` and ``context`` as for
        ``forward``, without a cache or shared keys.
        """
        if not 0 <= head < self.num_heads:
            raise ValueError(f"head must be in [0, {self.num_heads}), got {head}")
        packings = context.packing if context.packing is not None else (None, None)
        w, b = self.in_proj.weight, self.in_proj.bias

        def project(x: Tensor, block: int, packing: Packing | None) -> Tensor:
            start = block * self.d_model + head * self.head_dim
            rows = slice(start, start + self.head_dim)  # this head's rows of the block
            projected = F.linear(x, w[rows], None if b is None else b[rows])  # (B, T, Dh) or (N, Dh)
            return _padded(projected, packing).unsqueeze(1)  # (B, 1, T, Dh)

        q, k = project(query, 0, packings[0]), project(key, 1, packings[1])  # (B, 1, Tq|Tk, Dh)
        if context.rotate is not None:
            q, k = context.rotate(q), context.rotate(k)

        def of_head(x: Tensor | None) -> Tensor | None:  # a mask or bias with a row per head: this one's
            return x if x is None or x.size(1) == 1 else x[:, head : head + 1]  # (B|1, 1, ...)

        mask = context.mask
        mask = None if mask is None else KeyMask(of_head(mask.attend), of_head(mask.has_key))
        return self._weights(q, k, mask, of_head(context.score_bias))  # (B, 1, Tq, Tk)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def _merge_heads(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.d_model)  # (B, T, D)

    @staticmethod
    def _fold_groups(q: Tensor, groups: int) -> Tensor:
        """Queries (B, H, Tq, Dh) of G consecutive rows as G * Tq queries of one row: (B/G, H, G*Tq, Dh)."""
        return q.unflatten(0, (-1, groups)).transpose(1, 2).flatten(2, 3)  # (B/G, H, G*Tq, Dh)

    @staticmethod
    def _unfold_groups(x: Tensor, groups: int) -> Tensor:
        """Undo ``_fold_groups`` on outputs (B/G, H, G*Tq, Dh) or weights (B/G, H, G*Tq, Tk)."""
        return x.unflatten(2, (groups, -1)).transpose(1, 2).flatten(0, 1)  # (B, H, Tq, Dh|Tk)
