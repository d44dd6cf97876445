"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017).

Shape legend: B batch, S source length, T target length, D model dim, H heads, L layers, V vocabulary size.

Token ids go in, logits come out; every mask is derived inside from ``pad_id`` (see ``model.masks``).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import KVCache, MultiHeadAttention
from model.masks import decoder_self_mask, padding_mask
from model.positions import POSITIONAL, Positions

Positional = Literal["sinusoidal", "learned", "rope", "alibi", "relative", "none"]
Activation = Literal["relu", "gelu"]


@dataclass(frozen=True)
class TransformerConfig:
    """Architecture of the Transformer. Frozen and validated once; every field is a primitive.

    The defaults are the model of ``python train.py`` (configs/default.yaml), small enough to train on a
    laptop CPU; ``training.module.TranslationModule`` takes its defaults from here. The paper's base model is
    ``d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048, norm_first=False``.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 128
    num_heads: int = 4
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    d_ff: int = 512
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: Activation = "relu"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    max_len: int = 256
    # Pre-LN (normalise each sublayer's input) trains stably without long warm-up (Xiong et al. 2020);
    # post-LN (normalise after the residual sum) is the paper's §3.1 arrangement.
    norm_first: bool = True
    # Share the target embedding with the output projection (§3.4, Press & Wolf 2017).
    tie_output_embedding: bool = True
    # One embedding table for source and target; needs one shared vocabulary.
    share_embeddings: bool = False
    # Position signal, see model.positions: "sinusoidal" (§3.5) and "learned" add to the embeddings; "rope"
    # rotates self-attention's queries and keys; "alibi" and "relative" bias self-attention's scores; "none"
    # leaves the encoder a bag of words and gives the decoder order only through its causal mask.
    positional: Positional = "sinusoidal"

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.d_model % self.num_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
        for name, value in ids.items():
            smallest = min(self.src_vocab_size, self.tgt_vocab_size)
            if not 0 <= value < smallest:
                raise ValueError(
                    f"{name} ({value}) must be a valid id of both vocabularies (size {smallest})"
                )
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {', '.join(POSITIONAL)}; got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"positional 'sinusoidal' needs an even d_model (sine and cosine pairs), got {self.d_model}"
            )
        head_dim = self.d_model // self.num_heads
        if self.positional == "rope" and head_dim % 2 != 0:
            raise ValueError(
                f"positional 'rope' needs an even head dimension (rotated feature pairs), got d_model "
                f"{self.d_model} / num_heads {self.num_heads} = {head_dim}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one vocabulary, got src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size}"
            )


class AttentionMaps(NamedTuple):
    """Attention weights of every layer, returned when asked for, never stored on modules."""

    encoder: list[Tensor]  # per layer (B, H, S, S)
    decoder: list[Tensor]  # per layer (B, H, T, T)
    cross: list[Tensor]  # per layer (B, H, T, S)


class EncoderOutput(NamedTuple):
    memory: Tensor  # (B, S, D)
    src_attend: Tensor  # (B, 1, 1, S) boolean, True = real source token
    attention: list[Tensor]  # per layer (B, H, S, S); empty unless asked for


class DecoderOutput(NamedTuple):
    logits: Tensor  # (B, T, V)
    self_attention: list[Tensor]  # per layer (B, H, T, T); empty unless asked for
    cross_attention: list[Tensor]  # per layer (B, H, T, S); empty unless asked for


@dataclass
class DecoderCache:
    """Everything incremental decoding keeps between steps: one self- and one cross-attention cache per
    layer."""

    layers: list[tuple[KVCache, KVCache]] = field(default_factory=list)
    length: int = 0  # target positions decoded so far; the next position's index

    @classmethod
    def empty(cls, num_layers: int, reserve: int = 16) -> "DecoderCache":
        """A cache with room for ``reserve`` target positions before its buffers must grow."""
        return cls(
            [(KVCache(static=False, reserve=reserve), KVCache(static=True)) for _ in range(num_layers)]
        )

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (B',), e.g. the beams that survive a beam-search step."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)


class HeadMask(NamedTuple):
    """Multipliers of each head's output, 1 keeps a head and 0 silences it: (L, H), or (B, L, H)
    per sentence."""

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None


def _layer_slice(mask: Tensor | None, layer: int) -> Tensor | None:
    """The (H,) or (B, H) head multipliers of one layer."""
    if mask is None:
        return None
    return mask[layer] if mask.dim() == 2 else mask[:, layer]


class Dropout(nn.Module):
    """Dropout whose mask costs less on the CPU.

    On the CPU, ``F.dropout`` draws its mask with ``bernoulli_``, about twice as slow as comparing uniform
    samples with ``p`` (28 ms against 13 ms for a (64, 30, 1024) tensor on a 2-core Xeon); dropout was a
    quarter of a training step there. On other devices ``F.dropout``'s fused kernel is used.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        keep = (torch.rand_like(x) >= self.p).to(x.dtype)
        return x * keep * (1.0 / (1.0 - self.p))


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


class Sublayer(nn.Module):
    """Residual connection around a sublayer, with layer norm before (pre-LN) or after (post-LN, §5.4)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, fn) -> tuple[Tensor, Tensor | None]:
        """fn maps the (normalised) input to (output, attention weights or None)."""
        if self.norm_first:
            out, weights = fn(self.norm(x))
            return x + self.dropout(out), weights
        out, weights = fn(x)
        return self.norm(x + self.dropout(out)), weights


def _no_weights(out: Tensor) -> tuple[Tensor, None]:
    return out, None


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.feed_forward = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.attn_block = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.ff_block = Sublayer(c.d_model, c.dropout, c.norm_first)

    def forward(
        self,
        x: Tensor,
        attend: Tensor,
        need_weights: bool,
        head_mask: Tensor | None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, S, D), attend: (B, 1, 1, S) → (B, S, D), weights (B, H, S, S) or None.

        ``rotate`` and ``score_bias`` (1, H, S, S): the self-attention position hooks, see
        ``model.positions``.
        """
        x, weights = self.attn_block(
            x,
            lambda h: self.self_attn(
                h, h, h, attend, need_weights, head_mask=head_mask, rotate=rotate, score_bias=score_bias
            ),
        )
        x, _ = self.ff_block(x, lambda h: _no_weights(self.feed_forward(h)))
        return x, weights


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout)
        self.feed_forward = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.self_block = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.cross_block = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.ff_block = Sublayer(c.d_model, c.dropout, c.norm_first)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_attend: Tensor | None,
        src_attend: Tensor,
        need_weights: bool,
        cache: tuple[KVCache, KVCache] | None,
        head_masks: tuple[Tensor | None, Tensor | None],
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: (B, T, D), memory: (B, S, D) → (B, T, D), self weights (B, H, T, T'),
        cross weights (B, H, T, S).

        ``rotate`` and ``score_bias`` (1, H, T, T'): self-attention's position hooks;
        cross-attention has none.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)
        self_mask, cross_mask = head_masks
        x, self_weights = self.self_block(
            x,
            lambda h: self.self_attn(
                h, h, h, self_attend, need_weights,
                cache=self_cache, head_mask=self_mask, rotate=rotate, score_bias=score_bias,
            ),
        )
        x, cross_weights = self.cross_block(
            x,
            lambda h: self.cross_attn(
                h, memory, memory, src_attend, need_weights, cache=cross_cache, head_mask=cross_mask
            ),
        )
        x, _ = self.ff_block(x, lambda h: _no_weights(self.feed_forward(h)))
        return x, self_weights, cross_weights


class Transformer(nn.Module):
    """Encoder-decoder Transformer over token ids.

    ``forward`` is the teacher-forced training pass; ``encode``/``decode`` split it so that decoding runs the
    encoder once; ``generate`` decodes greedily or with beam search, with a key/value cache.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        for embedding in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            # With embeddings scaled by sqrt(D) (§3.4), std D^-0.5 gives inputs of unit scale (as in fairseq).
            nn.init.normal_(embedding.weight, mean=0.0, std=c.d_model**-0.5)
            nn.init.zeros_(embedding.weight[c.pad_id])
        self.positions = Positions(c.positional, d_model=c.d_model, num_heads=c.num_heads, max_len=c.max_len)
        self.embed_dropout = Dropout(c.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.num_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_decoder_layers))
        # Pre-LN leaves the residual stream unnormalised: normalise it once at the end of each stack.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output_proj = (
            None if c.tie_output_embedding else nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        )
        for layer in (*self.encoder_layers, *self.decoder_layers):
            for module in layer.modules():
                if isinstance(module, FeedForward):
                    nn.init.xavier_uniform_(module.up.weight)
                    nn.init.xavier_uniform_(module.down.weight)

    def _embed(self, embedding: nn.Embedding, ids: Tensor, side: str, offset: int = 0) -> Tensor:
        x = embedding(ids) * math.sqrt(self.config.d_model)  # (B, T, D)
        return self.embed_dropout(self.positions.embed(x, side, offset))

    def encode(
        self, src: Tensor, *, need_weights: bool = False, head_mask: Tensor | None = None
    ) -> EncoderOutput:
        """Run the encoder over src (B, S). ``head_mask``: (L, H) or (B, L, H), see ``HeadMask``."""
        src_attend = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        x = self._embed(self.src_embed, src, "encoder")
        positions = torch.arange(src.size(1), device=src.device)  # (S,)
        rotate = self.positions.rotation(positions)
        score_bias = self.positions.self_bias("encoder", positions, positions)  # (1, H, S, S) or None
        maps = []
        for i, layer in enumerate(self.encoder_layers):
            x, weights = layer(x, src_attend, need_weights, _layer_slice(head_mask, i), rotate, score_bias)
            if need_weights:
                maps.append(weights)
        return EncoderOutput(self.encoder_norm(x), src_attend, maps)

    def decode(
        self,
        tgt_in: Tensor,
        encoded: EncoderOutput,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
        head_mask: HeadMask | None = None,
        last_only: bool = False,
        keep: Tensor | None = None,
    ) -> DecoderOutput:
        """Run the decoder.

        Args:
            tgt_in: (B, T) decoder input ids, starting with BOS. With a cache, only the new positions (usually
                T = 1); earlier positions come from the cache, which is updated in place.
            encoded: the encoder's output for the same batch.
            last_only: compute logits for the last position only (B, 1, V), all that decoding needs.
            keep: (B, T) boolean; compute logits only where True, returned packed as (N, V). Training keeps
                the non-padding targets and so skips the vocabulary projection of padding.
        """
        offset = 0 if cache is None else cache.length
        if cache is None:
            self_attend = decoder_self_mask(tgt_in, self.config.pad_id)  # (B, 1, T, T)
        elif tgt_in.size(1) == 1:
            self_attend = None  # one new position attends to all cached ones and itself
        else:
            raise ValueError(f"cached decoding takes one position at a time, got {tgt_in.size(1)}")
        masks = head_mask if head_mask is not None else HeadMask()
        x = self._embed(self.tgt_embed, tgt_in, "decoder", offset)
        # Absolute positions: the new queries sit at offset .. offset+T-1, the keys (cached ones too) from 0.
        query_positions = torch.arange(offset, offset + tgt_in.size(1), device=tgt_in.device)  # (T,)
        key_positions = torch.arange(offset + tgt_in.size(1), device=tgt_in.device)  # (T',)
        rotate = self.positions.rotation(query_positions)
        score_bias = self.positions.self_bias("decoder", query_positions, key_positions)  # (1, H, T, T')|None
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.decoder_layers):
            x, self_weights, cross_weights = layer(
                x,
                encoded.memory,
                self_attend,
                encoded.src_attend,
                need_weights,
                None if cache is None else cache.layers[i],
                (_layer_slice(masks.decoder, i), _layer_slice(masks.cross, i)),
                rotate,
                score_bias,
            )
            if need_weights:
                self_maps.append(self_weights)
                cross_maps.append(cross_weights)
        if cache is not None:
            cache.length += tgt_in.size(1)
        if last_only:
            x = x[:, -1:]  # (B, 1, D)
        elif keep is not None:
            x = x[keep]  # (N, D)
        x = self.decoder_norm(x)
        weight = self.tgt_embed.weight if self.output_proj is None else self.output_proj.weight
        return DecoderOutput(F.linear(x, weight), self_maps, cross_maps)  # logits (B, T, V) or (N, V)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        return_attention: bool = False,
        *,
        head_mask: HeadMask | None = None,
        keep: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """Teacher-forced pass.

        Args:
            src: (B, S) source ids, padded with ``pad_id``.
            tgt_in: (B, T) decoder input ids (BOS followed by the target shifted right), padded with
                ``pad_id``.
            return_attention: also return every layer's attention weights (explicit, slower path).
            head_mask: optional per-head multipliers for ablation studies.
            keep: (B, T) boolean, e.g. ``tgt_out != pad_id``: logits only at these positions, packed as
                (N, V).

        Returns:
            logits (B, T, V) (or (N, V) with ``keep``), and with ``return_attention`` an ``AttentionMaps``.
        """
        masks = head_mask if head_mask is not None else HeadMask()
        encoded = self.encode(src, need_weights=return_attention, head_mask=masks.encoder)
        out = self.decode(tgt_in, encoded, need_weights=return_attention, head_mask=masks, keep=keep)
        if not return_attention:
            return out.logits
        return out.logits, AttentionMaps(encoded.attention, out.self_attention, out.cross_attention)

    @property
    def device(self) -> torch.device:
        """The device of the model's weights, where its inputs must be."""
        return self.tgt_embed.weight.device

    def generated_ids(self, tokens: Tensor) -> list[list[int]]:
        """Rows of ``generate``'s output (B, L) as token id lists without EOS and padding."""
        c = self.config
        return [[t for t in row if t != c.pad_id and t != c.eos_id] for row in tokens.tolist()]

    def new_cache(self, reserve: int = 16) -> DecoderCache:
        """An empty decoding cache with room for ``reserve`` target positions (BOS included)."""
        return DecoderCache.empty(self.config.num_decoder_layers, reserve)

    @torch.no_grad()
    def generate(
        self,
        src: Tensor,
        max_len: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.6,
        *,
        head_mask: HeadMask | None = None,
    ) -> Tensor:
        """Translate a batch of source sentences.

        Args:
            src: (B, S) source ids, padded with ``pad_id``.
            max_len: most tokens to generate per sentence (EOS included). Default: twice the sentence's source
                length (without padding) plus 10. Always capped at the model's ``max_len``: the decoder reads
                BOS and every generated token but the last, at positions 0 .. max_len - 1.
            beam_size: 1 decodes greedily; more runs batched beam search.
            length_penalty: GNMT length-penalty exponent alpha (Wu et al. 2016), beam search only.

        Returns:
            (B, L) int64: the tokens after BOS, each row ending at its first EOS and padded with ``pad_id``.
        """
        from model.decoding import beam_search, greedy_search  # decoding builds on this module

        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        if max_len is None:  # per sentence, from its own length, so a sentence decodes alike in any batch
            max_len = 2 * (src != self.config.pad_id).sum(dim=1) + 10  # (B,)
        limits = torch.as_tensor(max_len, device=src.device).clamp(max=self.config.max_len)
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if beam_size == 1:
            return greedy_search(self, src, limits, head_mask=head_mask)
        return beam_search(self, src, limits, beam_size, length_penalty, head_mask=head_mask)
