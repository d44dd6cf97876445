"""Multi-head attention ("Attention Is All You Need", §3.2), with a fused path and a weight-returning path.

Shape legend: B batch, Tq query length, Tk key length, D model dim, H heads, Dh head dim (D / H).

Masks are boolean with ``True`` = may attend, broadcastable to (B, H, Tq, Tk).

Two hooks carry position signals in without copies of this module (see ``model.positions``): ``rotate``
transforms the queries and the new keys before they are scored or cached (RoPE), and ``score_bias`` is added
to the scaled scores (ALiBi, T5's relative bias).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.masks import KeyMask, guard_empty_rows
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
        return self.key[:, :, : self.length], self.value[:, :, : self.length]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the beams it extends). index: (B',) int64."""
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


def _same(x: Tensor) -> Tensor:
    return x


class MultiHeadAttention(nn.Module):
    """h-head scaled dot-product attention with learned input and output projections.

    The input projection is one (3D, D) matrix holding the query, key and value projections in that order,
    the layout of ``torch.nn.MultiheadAttention``, so self-attention costs one matmul.

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
        nn.init.xavier_uniform_(self.in_proj.weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if bias:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        mask: Tensor | KeyMask | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
        head_mask: Tensor | None = None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
        packing: tuple[Packing, Packing] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: (B, Tq, D).
            key, value: (B, Tk, D). Pass the same tensor three times for self-attention.
                Or (B/G, Tk, D), each row shared by G consecutive query rows (the beams of a sentence in
                beam search): the keys and values are projected and cached once per row, and the G rows'
                queries attend to them as G * Tq queries of one row, with no copy of the keys.
            mask: boolean, True = may attend, broadcastable to (B, H, Tq, Tk); with shared keys, to
                (B/G, H, 1, Tk). With a cache, Tk counts the cached keys too. Or its ``KeyMask``, made once
                for all the layers that use the mask.
            need_weights: also return the attention weights (takes the explicit path instead of the fused
                kernel).
            cache: keys/values from earlier decoding steps; updated in place.
            head_mask: (H,) or (B, H) multipliers of each head's output before the heads are merged:
                1 keeps a head, 0 silences it (head ablation, Michel et al. 2019).
            rotate: maps queries (B, H, Tq, Dh) and the new keys (B, H, Tk_new, Dh) to rotated ones of the
                same shape, before keys enter the cache; for self-attention, where both share positions.
            score_bias: float, broadcastable to (B, H, Tq, Tk), added to the scaled scores before the mask;
                the fused kernel gets it as its float ``attn_mask`` with masked keys at -inf.
            packing: the (query, key) packings of padding-free inputs (see ``model.packing``): query (Nq, D)
                holds the tokens of a (B, Tq) batch, key and value (Nk, D) those of a (B, Tk) one. They are
                projected as tokens, padded for attention, and the output is packed like the query. Not with
                a cache or shared keys.

        Returns:
            output (B, Tq, D) (or (Nq, D) with ``packing``) and weights (B, H, Tq, Tk), or None when
            ``need_weights`` is False.
            A query whose keys are all masked gets zero weights and zero output (before the output
            projection), never NaN.
        """
        if packing is not None and (cache is not None or key.size(0) != packing[1].tokens):
            raise ValueError("packed inputs take no cache, and as many key rows as their packing has tokens")
        q, k, v = self._project(query, key, value, cache, rotate, packing)
        dropout_p = self.dropout if self.training else 0.0
        batch = q.size(0)
        groups = batch // max(k.size(0), 1)  # query rows per key row
        if k.size(0) != batch:
            if groups * k.size(0) != batch or score_bias is not None:
                raise ValueError(
                    f"{batch} query rows cannot share {k.size(0)} key rows"
                    + (" with a score_bias" if score_bias is not None else "")
                )
            shape = None if mask is None else (mask.attend if isinstance(mask, KeyMask) else mask).shape
            if shape is not None and (shape[-2] != 1 or shape[0] not in (1, k.size(0))):
                raise ValueError(f"shared keys need one mask row per key row, got a mask {tuple(shape)}")
            q = self._fold_groups(q, groups)  # (B/G, H, G*Tq, Dh)

        has_key = None
        if mask is not None:
            # A query row with no key to attend would make softmax 0/0: it attends everything, then is zeroed.
            mask, has_key = mask if isinstance(mask, KeyMask) else guard_empty_rows(mask)

        if need_weights:
            scores = (q @ k.transpose(-2, -1)) * self.head_dim**-0.5  # (B, H, Tq, Tk)
            if score_bias is not None:
                scores = scores + score_bias.to(scores.dtype)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            weights = scores.float().softmax(dim=-1).to(q.dtype)
            if has_key is not None:
                weights = weights * has_key
            # F.dropout, as the fused kernel drops its weights inside (dropout_p), where no module reaches.
            out = F.dropout(weights, p=dropout_p, training=self.training) @ v  # (B, H, Tq, Dh)
        else:
            weights = None
            attn_mask = mask
            if score_bias is not None:
                # Every row keeps a key (see ``KeyMask``), so -inf never fills a whole row (NaN).
                bias = score_bias.to(q.dtype)
                attn_mask = (
                    bias if mask is None else torch.where(mask, bias, float("-inf"))
                )  # (B|1, H, Tq, Tk)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p
            )  # (B, H, Tq, Dh)
            if has_key is not None:
                out = out * has_key

        if groups > 1:
            out = self._unfold_groups(out, groups)  # (B, H, Tq, Dh)
            weights = None if weights is None else self._unfold_groups(weights, groups)  # (B, H, Tq, Tk)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).reshape(-1, self.num_heads, 1, 1)  # (B|1, H, 1, 1)
        out = self._merge_heads(out)  # (B, Tq, D)
        if packing is not None:
            out = packing[0].pack(out)  # (Nq, D)
        return self.out_proj(out), weights

    def _project(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        cache: KVCache | None,
        rotate: Callable | None = None,
        packing: tuple[Packing, Packing] | None = None,
    ) -> tuple[Tensor, ...]:
        """Project into heads, rotate, use and update the cache: q (B, H, Tq, Dh), k and v (B, H, Tk, Dh).

        Packed inputs are projected as tokens, then padded: (N, 3D) → (B, T, 3D).
        """
        pad_query, pad_key = (packing[0].pad, packing[1].pad) if packing is not None else (_same, _same)
        w, b = self.in_proj.weight, self.in_proj.bias
        d = self.d_model
        if cache is not None and cache.static and cache.key is not None:
            q = self._split_heads(F.linear(query, w[:d], None if b is None else b[:d]))
            if rotate is not None:
                q = rotate(q)
            return q, cache.key[:, :, : cache.length], cache.value[:, :, : cache.length]

        if query is key and key is value:
            q, k, v = pad_query(self.in_proj(query)).chunk(3, dim=-1)  # 3 x (B, T, D)
        else:
            q = pad_query(F.linear(query, w[:d], None if b is None else b[:d]))  # (B, Tq, D)
            if key is value:
                k, v = pad_key(F.linear(key, w[d:], None if b is None else b[d:])).chunk(2, dim=-1)
            else:
                k = pad_key(F.linear(key, w[d : 2 * d], None if b is None else b[d : 2 * d]))
                v = pad_key(F.linear(value, w[2 * d :], None if b is None else b[2 * d :]))
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if rotate is not None:
            # Keys are rotated at their own positions before they are cached, so cached keys never change.
            q, k = rotate(q), rotate(k)

        if cache is not None and cache.static:
            # Stored contiguous: attention reads them at every decoding step, and strided ones read slower.
            cache.key, cache.value, cache.length = k.contiguous(), v.contiguous(), k.size(2)
        elif cache is not None:
            k, v = cache.append(k, v)  # (B, H, Tk_past + Tk, Dh)
        return q, k, v

    def project_values(self, value: Tensor) -> Tensor:
        """The value vectors of every head, as ``forward`` computes them: value (B, Tk, D) → (B, H, Tk, Dh).

        For explanations that weigh attention by what it carries (``analysis.explain.value_norms``); the
        output projection's per-head slices are ``out_proj.weight[:, h * Dh:(h + 1) * Dh]``.
        """
        d, b = self.d_model, self.in_proj.bias
        bias = None if b is None else b[2 * d :]
        projected = F.linear(value, self.in_proj.weight[2 * d :], bias)  # (B, Tk, D)
        return self._split_heads(projected)

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
