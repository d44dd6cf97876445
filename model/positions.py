"""Position signals of the Transformer, one switch (``TransformerConfig.positional``), six variants.

Shape legend: B batch, T length, D model dim, H heads, Dh head dim, Tq query length, Tk key length.

Where each variant acts (encoder self-attention / decoder self-attention / cross-attention):

=============  =======================================  ==================================  ================
variant        encoder self                             decoder self                        cross
=============  =======================================  ==================================  ================
sinusoidal     fixed sine/cosine added to embeddings    the same, target positions          via embeddings
learned        a learned table added to embeddings      its own learned table               via embeddings
rope           queries and keys rotated                 the same, causal positions          nothing
alibi          bias -m_h * |i - j| on the scores        bias -m_h * (i - j), j <= i         nothing
relative       T5 bias, bidirectional buckets           T5 bias, unidirectional buckets     nothing
none           nothing: the encoder is a bag of words   nothing: order only from the mask   nothing
=============  =======================================  ==================================  ================

"via embeddings": absolute signals are part of the encoder output and the decoder state that cross-attention
reads, as in the original Transformer. Cross-attention gets no positional term of its own under rope, alibi
and relative, because its query and key positions count tokens of different sequences.

Two hooks reach ``MultiHeadAttention`` in its ``AttentionContext``: ``rotate`` (a callable applied to queries
and new keys, its positions bound by ``Positions.rotation``) and ``score_bias`` (a float (1, H, Tq, Tk) tensor
added to the scaled scores).
Everything depends on absolute positions only, so incremental decoding computes the same numbers: the query
of a cached step sits at position ``cache.length``, and rotated keys enter the cache already rotated.
"""

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

POSITIONAL = ("sinusoidal", "learned", "rope", "alibi", "relative", "none")
SIDES = ("encoder", "decoder")


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sine/cosine position signal added to the embeddings (Vaswani et al. 2017, §3.5); D even."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        if d_model % 2 != 0:
            raise ValueError(f"the sinusoidal encoding needs an even d_model, got {d_model}")
        position = torch.arange(max_len).unsqueeze(1)  # (max_len, 1)
        inv_freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (D/2,)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * inv_freq)
        pe[:, 1::2] = torch.cos(position * inv_freq)
        self.register_buffer("pe", pe, persistent=False)  # (max_len, D), rebuilt rather than checkpointed

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (B, T, D), positions ``offset .. offset+T-1`` → (B, T, D)."""
        check_length(offset + x.size(1), self.pe.size(0))
        return x + self.pe[offset : offset + x.size(1)].to(x.dtype)  # (T, D) broadcast over B


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per absolute position, added to the embeddings (Gehring et al. 2017; BERT)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)  # initialised by ``model.transformer.init_weights``

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (B, T, D), positions ``offset .. offset+T-1`` → (B, T, D)."""
        check_length(offset + x.size(1), self.table.num_embeddings)
        return x + self.table.weight[offset : offset + x.size(1)].to(x.dtype)  # (T, D) broadcast over B


class Rotary(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021, §3.4.2).

    Each pair of features (2i, 2i+1) of a query or key at position m is rotated by the angle m * theta_i,
    theta_i = 10000^(-2i/Dh), so the score of query m and key n depends on m - n only.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2 != 0:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (Dh/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        """x: (B, H, T, Dh) at ``positions`` (T,) → the rotated x, same shape and dtype."""
        angles = positions.to(self.inv_freq.dtype)[:, None] * self.inv_freq  # (T, Dh/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, Dh/2) each
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (B, H, T, Dh/2, 2)
        return rotated.flatten(-2)  # (B, H, T, Dh), pairs back in place


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's head-specific slopes (Press et al. 2022, §3): the geometric sequence that starts at and has
    ratio 2^(-8/H); for H not a power of two, those of the nearest lower power of two, then every other slope
    of twice that many (the paper's code). Returns (H,) float32."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_two(num_heads)
    else:
        lower = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two(lower) + alibi_slopes(2 * lower)[0::2][: num_heads - lower].tolist()
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(nn.Module):
    """Attention with linear biases (Press et al. 2022): score(i, j) += -m_h * distance(i, j), no parameters.

    Causal (decoder): distance i - j for keys j <= i, as in the paper (later keys are masked anyway).
    Symmetric (encoder): distance |i - j|, since a bidirectional encoder also attends forward.
    """

    def __init__(self, num_heads: int, *, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)  # (H,)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Absolute positions (Tq,), (Tk,) → bias (1, H, Tq, Tk) float32."""
        distance = query_positions[:, None] - key_positions[None, :]  # (Tq, Tk), i - j
        distance = distance.clamp(min=0) if self.causal else distance.abs()
        return -self.slopes[None, :, None, None] * distance.to(self.slopes.dtype)  # (1, H, Tq, Tk)


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position (key position minus query position), Raffel et al. 2020 §2.1.

    Half the buckets (all when unidirectional) count exact distances 0 .. num_buckets/2 - 1; the rest grow
    logarithmically up to ``max_distance``, beyond which every distance shares the last bucket. Bidirectional
    buckets keep keys before and after the query apart; unidirectional ones give every later key bucket 0.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """T5's bucketed relative position bias: one learned scalar per bucket and head, one table per stack
    shared by its layers (Raffel et al. 2020 §2.1)."""

    def __init__(
        self, num_heads: int, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.table = nn.Embedding(num_buckets, num_heads)  # initialised by ``model.transformer.init_weights``

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Absolute positions (Tq,), (Tk,) → bias (1, H, Tq, Tk) float32."""
        relative = key_positions[None, :] - query_positions[:, None]  # (Tq, Tk)
        buckets = relative_position_bucket(
            relative,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.table(buckets).permute(2, 0, 1)[None].float()  # (Tq, Tk, H) → (1, H, Tq, Tk)


def check_length(length: int, max_len: int) -> None:
    if length > max_len:
        raise ValueError(
            f"sequence of {length} positions is longer than max_len ({max_len}); "
            "raise the model's max_len or filter long sentences"
        )


class Positions(nn.Module):
    """Every position signal of one Transformer: what is added to the embeddings, how self-attention's queries
    and keys are rotated, and what bias its scores get. Cross-attention gets none of the last two.

    Args:
        kind: one of ``POSITIONAL``.
        d_model: model dimension D.
        num_heads: heads H.
        max_len: the longest sequence, in positions, for every variant (tables are this long).
    """

    def __init__(self, kind: str, *, d_model: int, num_heads: int, max_len: int) -> None:
        super().__init__()
        if kind not in POSITIONAL:
            raise ValueError(f"positional must be one of {', '.join(POSITIONAL)}; got {kind!r}")
        self.kind = kind
        self.max_len = max_len
        # One module per concern; the attributes a variant does not use stay None.
        self.sinusoid = SinusoidalPositionalEncoding(d_model, max_len) if kind == "sinusoidal" else None
        self.learned = (
            nn.ModuleDict({side: LearnedPositionalEmbedding(d_model, max_len) for side in SIDES})
            if kind == "learned"
            else None
        )
        self.rotary = Rotary(d_model // num_heads) if kind == "rope" else None
        if kind == "alibi":
            self.bias = nn.ModuleDict({
                "encoder": ALiBi(num_heads, causal=False),
                "decoder": ALiBi(num_heads, causal=True),
            })
        elif kind == "relative":
            self.bias = nn.ModuleDict({
                "encoder": RelativePositionBias(num_heads, bidirectional=True),
                "decoder": RelativePositionBias(num_heads, bidirectional=False),
            })
        else:
            self.bias = None

    def embed(self, x: Tensor, side: str, offset: int = 0) -> Tensor:
        """Add the absolute signal, if any, to x (B, T, D) at positions ``offset .. offset+T-1``."""
        if self.sinusoid is not None:
            return self.sinusoid(x, offset)
        if self.learned is not None:
            return self.learned[side](x, offset)
        check_length(offset + x.size(1), self.max_len)
        return x

    def rotation(self, positions: Tensor) -> Callable[[Tensor], Tensor] | None:
        """The ``rotate`` hook of self-attention for queries and new keys at ``positions`` (T,), or None."""
        return None if self.rotary is None else partial(self.rotary, positions=positions)

    def self_bias(self, side: str, query_positions: Tensor, key_positions: Tensor) -> Tensor | None:
        """The ``score_bias`` of one side's self-attention, (1, H, Tq, Tk) float32, or None."""
        return None if self.bias is None else self.bias[side](query_positions, key_positions)
