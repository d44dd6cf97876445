"""The layers of the Transformer: the feed-forward network and one encoder and one decoder layer.

Shape legend: B batch, S source length, T target length (T' with cached positions), D model dim, H heads.

Each sublayer (attention or feed-forward) sits on a residual connection with dropout on its output (§5.4),
and a LayerNorm either before it (pre-LN, ``norm_first``) or after the residual sum (post-LN, §3.1).
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import KVCache, MultiHeadAttention
from model.config import TransformerConfig
from model.masks import KeyMask
from model.packing import Packing


class Dropout(nn.Module):
    """Dropout whose CPU mask is drawn as random bits; the model's one dropout module.

    On the CPU, ``F.dropout`` draws its mask with ``bernoulli_`` and ``rand_like`` makes one float per
    element, each from a serial run of the generator. Here the mask comes from 16-bit integers cut from
    full-range 64-bit draws, four per draw: a position is kept when its integer is at least ``round(p * 2^16)
    - 2^15`` (so the keep rate is 1 - p to within 2^-17) and scaled by the exact inverse of that rate: a
    quarter as many draws from the serial generator, so faster on a CPU (measured in docs/performance.md).
    The draws come from torch's default generator, so seeding it fixes the masks. On other devices
    ``F.dropout``'s fused kernel is used.
    Attention weights are dropped inside the attention kernel instead (see ``MultiHeadAttention``).
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            # Compiled, F.dropout's mask is drawn inside the generated kernel (and random_ over the full int64
            # range would break the graph).
            return F.dropout(x, self.p, training=True)
        dropped = round(self.p * 2**16)  # of the 2^16 values a 16-bit integer takes
        if dropped == 2**16:
            return x * 0.0
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # every bit random
        keep = bits.view(torch.int16)[:n].view(x.shape) >= dropped - 2**15
        return x * (keep.to(x.dtype) * (2**16 / (2**16 - dropped)))


class FeedForward(nn.Module):
    """Position-wise feed-forward network (§3.3)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = F.gelu if activation == "gelu" else F.relu

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))


def _map_old_norm_names(renames: dict[str, str]):
    """A load_state_dict pre-hook that renames a layer's old parameter names to today's.

    Checkpoints written before the sublayers were spelled out in ``forward`` name a layer's norms
    ``<block>.norm.weight``; ``renames`` maps each old block name to today's norm attribute.
    """

    def hook(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
        for key in list(state_dict):
            for old, new in renames.items():
                old_prefix = f"{prefix}{old}.norm."
                if key.startswith(old_prefix):
                    state_dict[f"{prefix}{new}.{key[len(old_prefix):]}"] = state_dict.pop(key)

    return hook


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
        self.register_load_state_dict_pre_hook(
            _map_old_norm_names({"attn_block": "self_attn_norm", "ff_block": "feed_forward_norm"})
        )

    def forward(
        self,
        x: Tensor,
        *,
        attend: Tensor | KeyMask,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
        packing: Packing | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, S, D), attend: (B, 1, 1, S) or its ``KeyMask`` → (B, S, D), weights (B, H, S, S) or None.

        ``head_mask``: (H,) or (B, H), see ``MultiHeadAttention``. ``rotate`` and ``score_bias``
        (1, H, S, S): the self-attention position hooks, see ``model.positions``. ``packing``: x holds the
        (N, D) tokens of the batch (see ``model.packing``), and so does the output.
        """

        def self_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h, h, h,
                mask=attend, need_weights=need_weights, head_mask=head_mask, rotate=rotate,
                score_bias=score_bias, packing=None if packing is None else (packing, packing),
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
        self.register_load_state_dict_pre_hook(
            _map_old_norm_names(
                {
                    "self_block": "self_attn_norm",
                    "cross_block": "cross_attn_norm",
                    "ff_block": "feed_forward_norm",
                }
            )
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        self_attend: Tensor | KeyMask | None,
        src_attend: Tensor | KeyMask,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
        self_head_mask: Tensor | None = None,
        cross_head_mask: Tensor | None = None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
        packing: tuple[Packing, Packing] | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: (B, T, D), memory: (B, S, D) → (B, T, D), self weights (B, H, T, T'),
        cross weights (B, H, T, S).

        ``self_attend``: (B, 1, T, T'), or None for one cached step, which may attend every position so far;
        ``src_attend``: (B, 1, 1, S). Either mask may come as its ``KeyMask``, made once for every layer.
        ``cache``: the (self, cross) caches of this layer, updated in place. ``rotate`` and ``score_bias``
        (1, H, T, T'): self-attention's position hooks; cross-attention has none. ``packing``: the (target,
        source) packings when x holds the (Nt, D) target tokens and memory the (Ns, D) source tokens (see
        ``model.packing``); the output is packed like x.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)
        self_packing = None if packing is None else (packing[0], packing[0])  # (target, target)

        def self_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h, h, h,
                mask=self_attend, need_weights=need_weights, cache=self_cache, head_mask=self_head_mask,
                rotate=rotate, score_bias=score_bias, packing=self_packing,
            )

        def cross_attention(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.cross_attn(
                h, memory, memory,
                mask=src_attend, need_weights=need_weights, cache=cross_cache, head_mask=cross_head_mask,
                packing=packing,
            )

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
