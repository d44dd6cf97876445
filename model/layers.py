"""The layers of the Transformer: the feed-forward network and one encoder and one decoder layer.

Shape legend: B batch, S source length, T target length (T' with cached positions), D model dim, H heads.

Each sublayer (attention or feed-forward) sits on a residual connection with dropout on its output (§5.4),
and a LayerNorm either before it (pre-LN, ``norm_first``) or after the residual sum (post-LN, §3.1).
"""

import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import MultiHeadAttention, head_weights
from model.cache import KVCache
from model.config import TransformerConfig
from model.context import StackContext
from model.dropout import Dropout
from model.types import NO_HEAD_MASK, HeadMask


class FeedForward(nn.Module):
    """Position-wise feed-forward network (§3.3)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        # silu (x * sigmoid(x)) is Marian's "swish", the activation of the OPUS-MT models.
        self.activation = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        # Registered in this order so that parameters() keeps the order of earlier versions, which optimizer
        # states in checkpoints rely on.
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.feed_forward = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.self_attn_norm = nn.LayerNorm(c.d_model)
        self.feed_forward_norm = nn.LayerNorm(c.d_model)
        self.dropout = Dropout(c.dropout)

    def forward(
        self,
        x: Tensor,
        context: StackContext,
        *,
        need_weights: bool = False,
        head_mask: HeadMask = NO_HEAD_MASK,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, S, D) → (B, S, D), weights (B, H, S, S) or None.

        ``context``: the encoder's, built once by ``Transformer.encode``; with its packing, x holds the (N, D)
        tokens of the batch, and so does the output. ``head_mask``: this layer's (H,) or (B, H) ``encoder``
        multipliers, see ``MultiHeadAttention``.
        """

        def self_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h, h, h,
                context=context.self_attention, need_weights=need_weights, head_mask=head_mask.encoder,
            )

        if self.norm_first:  # pre-LN: normalise each sublayer's input
            h, weights = self_attention(self.self_attn_norm(x))
            x = x + self.dropout(h)
            x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        else:  # post-LN: normalise after each residual sum
            h, weights = self_attention(x)
            x = self.self_attn_norm(x + self.dropout(h))
            x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, then the feed-forward network."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        # Registered in this order so that parameters() keeps the order of earlier versions, which optimizer
        # states in checkpoints rely on.
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.feed_forward = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.self_attn_norm = nn.LayerNorm(c.d_model)
        self.cross_attn_norm = nn.LayerNorm(c.d_model)
        self.feed_forward_norm = nn.LayerNorm(c.d_model)
        self.dropout = Dropout(c.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        context: StackContext,
        *,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
        head_mask: HeadMask = NO_HEAD_MASK,
        cross_weights_of_head: int | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: (B, T, D), memory: (B, S, D) → (B, T, D), self weights (B, H, T, T'),
        cross weights (B, H, T, S); or, with ``cross_weights_of_head`` and no ``need_weights``, no self
        weights and the cross weights of that one head (B, 1, T, S), computed beside the fused kernel
        (``model.attention.head_weights``).

        ``context``: the decoder's, built once by ``Transformer.decode``: its self-attention's mask is
        (B, 1, T, T'), (B, 1, 1, T) in a full-context pass (``Transformer.full_context_attention``), or None
        for one cached step, which may attend every position so far; its
        cross-attention's (B, 1, 1, S) and no position hooks. With its packings, x holds the (Nt, D) target
        tokens and memory the (Ns, D) source tokens (see ``model.packing``); the output is packed like x.
        ``cache``: the (self, cross) caches of this layer, updated in place. ``head_mask``: this layer's (H,)
        or (B, H) ``decoder`` and ``cross`` multipliers, see ``MultiHeadAttention``.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)

        def self_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h, h, h,
                context=context.self_attention, need_weights=need_weights, cache=self_cache,
                head_mask=head_mask.decoder,
            )

        def cross_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            beams, multipliers = context.beams, head_mask.cross
            if beams is not None:  # a sentence's beams read its one row of memory as one row of queries
                h, multipliers = beams.fold(h), beams.head_mask(multipliers)  # (B/G, G*T, D), (B/G, H)
            out, weights = self.cross_attn(
                h, memory, memory,
                context=context.cross_attention, need_weights=need_weights, cache=cross_cache,
                head_mask=multipliers,
            )
            if weights is None and cross_weights_of_head is not None:
                weights = head_weights(
                    self.cross_attn, h, memory, cross_weights_of_head, context=context.cross_attention
                )  # (B, 1, T, S)
            if beams is not None:
                out = beams.unfold(out)  # (B, T, D)
                weights = None if weights is None else beams.unfold_weights(weights)  # (B, H|1, T, S)
            return out, weights

        if self.norm_first:  # pre-LN: normalise each sublayer's input
            h, self_weights = self_attention(self.self_attn_norm(x))
            x = x + self.dropout(h)
            h, cross_weights = cross_attention(self.cross_attn_norm(x))
            x = x + self.dropout(h)
            x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        else:  # post-LN: normalise after each residual sum
            h, self_weights = self_attention(x)
            x = self.self_attn_norm(x + self.dropout(h))
            h, cross_weights = cross_attention(x)
            x = self.cross_attn_norm(x + self.dropout(h))
            x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))
        return x, self_weights, cross_weights
