"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017).

Shape legend: B batch, S source length, T target length, D model dim, H heads, L layers, V vocabulary size.

Token ids go in, logits come out; every mask is derived inside from ``pad_id`` (see ``model.masks``). The
layers are in ``model.layers``, the architecture's config in ``model.config``, decoding in ``model.decoding``.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import MultiHeadAttention
from model.cache import DecoderCache
from model.config import TransformerConfig
from model.context import AttentionContext, StackContext
from model.decoding import BeamRows, beam_search, greedy_search
from model.dropout import Dropout
from model.layers import DecoderLayer, EncoderLayer, FeedForward
from model.masks import decoder_self_mask, padding_mask
from model.packing import Packing, TokenIndex
from model.positions import LearnedPositionalEmbedding, Positions, RelativePositionBias
from model.types import (
    LOGITS_ONLY,
    NO_HEAD_MASK,
    AlignedHead,
    AttentionMaps,
    DecoderOutput,
    DecoderRequest,
    EncoderOutput,
    HeadMask,
)

# Padding-free layers pay for their gathers and scatters only where padding is a sizeable share of the batch
# (measured in docs/performance.md).
PACK_FROM = 0.2
# Measured on a CPU only. On a GPU the layers' arithmetic is not the bottleneck, and the gathers and scatters
# would add many small kernels: packing stays off there until a GPU measurement says otherwise.
PACK_DEVICES = ("cpu",)


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
        # Fixed, not trained: set when a model is imported (Marian's final_logits_bias, -inf where a token
        # must never be predicted). Registered only when asked for, so other checkpoints keep their weights.
        if c.logits_bias:
            self.register_buffer("output_bias", torch.zeros(c.tgt_vocab_size))  # (V,)
        else:
            self.output_bias = None
        self.embed_scale = math.sqrt(c.d_model) if c.scale_embedding else 1.0
        init_weights(self)

    def _embed(
        self,
        embedding: nn.Embedding,
        ids: Tensor,
        side: str,
        offset: int = 0,
        packing: Packing | None = None,
        looked_up: Tensor | None = None,
    ) -> Tensor:
        rows = embedding(ids) if looked_up is None else looked_up  # (B, T, D)
        x = self.positions.embed(rows * self.embed_scale, side, offset)  # (B, T, D)
        return self.embed_dropout(x if packing is None else packing.pack(x))  # (B, T, D) or (N, D)

    def encode(
        self,
        src: Tensor,
        *,
        need_weights: bool = False,
        head_mask: Tensor | None = None,
        tokens: Packing | None = None,
        token_embeddings: Tensor | None = None,
    ) -> EncoderOutput:
        """Run the encoder over src (B, S). ``head_mask``: (L, H) or (B, L, H), see ``HeadMask``.

        ``tokens``: where the source's tokens sit (the ``Packing`` of ``src != pad_id``, found ahead): compute
        on them only and return them packed (see ``model.packing``), for ``decode`` to continue padding-free.
        ``token_embeddings``: (B, S, D) rows to use instead of the source embedding's rows for ``src`` (before
        the sqrt(D) scale and positions), e.g. to take gradients with respect to them; ``src`` still gives
        the padding mask.
        """
        src_attend = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        context = self._encoder_context(src_attend, tokens)
        x = self._embed(
            self.src_embed, src, "encoder", packing=tokens, looked_up=token_embeddings
        )  # (B, S, D) or (N, D)
        masks = HeadMask(encoder=head_mask)
        maps = []
        for i, layer in enumerate(self.encoder_layers):
            x, weights = layer(x, context, need_weights=need_weights, head_mask=masks.layer(i))
            if need_weights:
                maps.append(weights)
        return EncoderOutput(self.encoder_norm(x), src_attend, maps, tokens)

    def _encoder_context(self, src_attend: Tensor, packing: Packing | None) -> StackContext:
        """What every encoder layer shares: the padding mask, made safe once, and the position hooks."""
        positions = torch.arange(src_attend.size(-1), device=src_attend.device)  # (S,)
        return StackContext(
            AttentionContext.of(
                src_attend,
                rotate=self.positions.rotation(positions),
                score_bias=self.positions.self_bias("encoder", positions, positions),  # (1, H, S, S) or None
                packing=None if packing is None else (packing, packing),
            )
        )

    def decode(
        self,
        tgt_in: Tensor,
        encoded: EncoderOutput,
        *,
        cache: DecoderCache | None = None,
        head_mask: HeadMask | None = None,
        tokens: Packing | None = None,
        request: DecoderRequest = LOGITS_ONLY,
    ) -> DecoderOutput:
        """Run the decoder.

        Args:
            tgt_in: (B, T) decoder input ids, starting with BOS. With a cache, only the new positions (usually
                T = 1); earlier positions come from the cache, which is updated in place.
            encoded: the encoder's output for the same batch; or one row per sentence when ``tgt_in`` has G
                consecutive rows per sentence (its beams), which share its cross-attention keys and values
                (see ``model.decoding.BeamRows``).
            tokens: where the target's tokens sit (a ``Packing`` of ``tgt_in``, found ahead: no host-device
                sync): logits there only, returned packed as (N, V), so training skips the vocabulary
                projection of padding. A packed ``encoded`` needs it, the ``Packing`` of ``tgt_in != pad_id``.
            request: what to return besides the logits (``DecoderRequest``): every attention map, each
                layer's output, one head's cross-attention weights (``alignment``, read in a second pass
                without the causal mask if it says ``full_context``), or logits at the last position only.

        If ``encoded`` is packed, the decoder computes on the target tokens only too (see ``model.packing``);
        then it takes no cache, and returns logits at the non-padding inputs, (Nt, V).
        """
        if encoded.tokens is not None and (cache is not None or request.last_only):
            raise ValueError("a packed encoder output is for the teacher-forced pass, not cached steps")
        if request.alignment is not None and request.alignment.full_context and cache is not None:
            raise ValueError("full-context alignment reads the whole target: not for cached steps")
        context = self._decoder_context(tgt_in, encoded, cache, tokens)
        target = None if context.cross_attention.packing is None else context.cross_attention.packing[0]
        offset = 0 if cache is None else cache.length
        x = self._embed(self.tgt_embed, tgt_in, "decoder", offset, target)  # (B, T, D) or (Nt, D)
        masks = head_mask if head_mask is not None else NO_HEAD_MASK
        aligned = request.alignment
        in_pass = aligned is not None and not aligned.full_context  # read in this pass, beside the kernel
        if in_pass and not 0 <= aligned.layer < len(self.decoder_layers):
            layers = len(self.decoder_layers)
            raise ValueError(f"alignment_head's layer must be in [0, {layers}), got {aligned.layer}")
        self_maps, cross_maps, hidden, alignment = [], [], [], None
        for i, layer in enumerate(self.decoder_layers):
            this_one = in_pass and i == aligned.layer
            x, self_weights, cross_weights = layer(
                x,
                encoded.memory,
                context,
                need_weights=request.weights,
                cache=None if cache is None else cache.layers[i],
                head_mask=masks.layer(i),
                cross_weights_of_head=aligned.head if this_one else None,
            )
            if request.weights:
                self_maps.append(self_weights)
                cross_maps.append(cross_weights)
            if this_one:
                one = slice(aligned.head, aligned.head + 1)  # (B, 1, T, S) of the maps, or the head's own
                alignment = (cross_weights[:, one] if request.weights else cross_weights).squeeze(1)
            if request.hidden:
                hidden.append(x)
        if cache is not None:
            cache.length += tgt_in.size(1)
        if aligned is not None and aligned.full_context:
            layer, head = aligned.layer, aligned.head
            alignment = self.full_context_attention(tgt_in, encoded, layer, head, tokens=tokens)  # (B, T, S)
        if request.last_only:
            x = x[:, -1:]  # (B, 1, D)
        elif tokens is not None and target is None:  # packed, x holds the target tokens already
            x = tokens.pack(x)  # (N, D)
        logits = F.linear(self.decoder_norm(x), self.output_weight, self.output_bias)  # (B, T, V) or (N, V)
        return DecoderOutput(logits, self_maps, cross_maps, tuple(hidden), alignment)

    def full_context_attention(
        self, tgt_in: Tensor, encoded: EncoderOutput, layer: int, head: int | None = None, *,
        tokens: Packing | None = None,
    ) -> Tensor:
        """Decoder layer ``layer``'s cross-attention weights with the decoder's causal mask lifted: every
        target position attends the whole target, in a pass of layers 0 .. ``layer`` beside the causal one
        (the "full context" of Garg et al. 2019: a word's alignment may depend on the words after it,
        which translation must not see). Counted from 0; ``tokens`` as in ``decode``.

        Returns (B, H, T, S) every head's weights by the explicit path, or with ``head`` that head's
        (B, T, S) beside the fused kernel, for a loss on it (guided alignment).
        """
        layers = len(self.decoder_layers)
        if not 0 <= layer < layers:
            raise ValueError(f"the full-context layer must be in [0, {layers}), got {layer}")
        context = self._decoder_context(tgt_in, encoded, None, tokens, causal=False)
        target = None if context.cross_attention.packing is None else context.cross_attention.packing[0]
        x = self._embed(self.tgt_embed, tgt_in, "decoder", 0, target)  # (B, T, D) or (Nt, D)
        for i, decoder_layer in enumerate(self.decoder_layers[: layer + 1]):
            last = i == layer
            x, _, weights = decoder_layer(
                x, encoded.memory, context, need_weights=last and head is None,
                cross_weights_of_head=head if last else None,
            )
        return weights if head is None else weights.squeeze(1)

    def _decoder_context(
        self, tgt_in: Tensor, encoded: EncoderOutput, cache: DecoderCache | None, tokens: Packing | None,
        causal: bool = True,
    ) -> StackContext:
        """What every decoder layer shares: the causal (unless not ``causal``) and source masks, made safe
        once, self-attention's position hooks, and with a packed ``encoded`` the (target, source) packings."""
        packing = None
        if encoded.tokens is not None:
            if tokens is None:  # finding them here would make the host wait for the device
                raise ValueError("a packed encoder output needs the target's tokens too (decode's tokens)")
            packing = (tokens, encoded.tokens)  # (target, source)
        if not causal:
            self_attend = padding_mask(tgt_in, self.config.pad_id)  # (B, 1, 1, T): the whole target
        elif cache is None:
            self_attend = decoder_self_mask(tgt_in, self.config.pad_id)  # (B, 1, T, T)
        elif tgt_in.size(1) == 1:
            self_attend = None  # one new position attends to all cached ones and itself
        else:
            raise ValueError(f"cached decoding takes one position at a time, got {tgt_in.size(1)}")
        # Absolute positions: the new queries sit at offset .. offset+T-1, the keys (cached ones too) from 0.
        offset = 0 if cache is None else cache.length
        query_positions = torch.arange(offset, offset + tgt_in.size(1), device=tgt_in.device)  # (T,)
        key_positions = torch.arange(offset + tgt_in.size(1), device=tgt_in.device)  # (T',)
        self_attention = AttentionContext.of(
            self_attend,
            rotate=self.positions.rotation(query_positions),
            score_bias=self.positions.self_bias("decoder", query_positions, key_positions),  # (1, H, T, T')
            packing=None if packing is None else (packing[0], packing[0]),
        )
        cross_attention = AttentionContext.of(encoded.src_attend, packing=packing)
        beams = None if packing is not None else BeamRows.of(tgt_in.size(0), encoded.memory.size(0))
        return StackContext(self_attention, cross_attention, beams)

    @property
    def output_weight(self) -> Tensor:
        """The (V, D) projection of the decoder's output onto the target vocabulary: tied or its own."""
        return self.tgt_embed.weight if self.output_proj is None else self.output_proj.weight

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        *,
        return_attention: bool = False,
        head_mask: HeadMask | None = None,
        tokens: TokenIndex | None = None,
        alignment_head: AlignedHead | tuple[int, int] | None = None,
    ) -> Tensor | tuple[Tensor, AttentionMaps] | tuple[Tensor, Tensor]:
        """Teacher-forced pass.

        Args:
            src: (B, S) source ids, padded with ``pad_id``.
            tgt_in: (B, T) decoder input ids (BOS followed by the target shifted right), padded with
                ``pad_id``.
            return_attention: also return every layer's attention weights (explicit, slower path).
            head_mask: optional per-head multipliers for ablation studies.
            tokens: where the tokens of ``src`` and ``tgt_in`` sit (``TokenIndex``, found while collating or
                by ``TokenIndex.of``): logits at the target tokens only, packed as (N, V), their labels
                ``tokens.labels(tgt_out)``. Without ``return_attention``, on a device of ``PACK_DEVICES``,
                and where padding is at least ``PACK_FROM`` of the batch's positions, the layers then compute
                on the tokens only (see ``model.packing``). The padding share comes from the index's length,
                which the host knows: no host-device sync.
            alignment_head: (decoder layer, head), counted from 0 (an ``AlignedHead``): also return that
                head's cross-attention weights (B, T, S), the one head a guided-alignment loss supervises;
                every other head stays on the fused kernel (see ``decode``). With ``full_context``, read in a
                second pass without the causal mask (``full_context_attention``). Not with
                ``return_attention``, whose maps hold it.

        Returns:
            logits (B, T, V) (or (N, V) with ``tokens``), and with ``return_attention`` an ``AttentionMaps``,
            or with ``alignment_head`` the head's weights (B, T, S).
        """
        masks = head_mask if head_mask is not None else NO_HEAD_MASK
        source, target = self._packings(src, tgt_in, tokens, layers_may_pack=not return_attention)
        encoded = self.encode(src, need_weights=return_attention, head_mask=masks.encoder, tokens=source)
        if return_attention and alignment_head is not None:
            raise ValueError("alignment_head is for the training pass; return_attention returns every head")
        aligned = None if alignment_head is None else AlignedHead(*alignment_head)
        request = DecoderRequest(weights=return_attention, alignment=aligned)
        out = self.decode(tgt_in, encoded, head_mask=masks, tokens=target, request=request)
        if aligned is not None:
            return out.logits, out.alignment
        if not return_attention:
            return out.logits
        return out.logits, AttentionMaps(encoded.attention, out.self_attention, out.cross_attention)

    @staticmethod
    def _packings(
        src: Tensor, tgt_in: Tensor, tokens: TokenIndex | None, *, layers_may_pack: bool
    ) -> tuple[Packing | None, Packing | None]:
        """The one place packing is decided: the (source, target) ``Packing``s for ``encode`` and ``decode``.

        The target's whenever ``tokens`` is given (logits at the tokens only); the source's too where the
        layers pay for computing on tokens only: on a device of ``PACK_DEVICES``, with padding at least
        ``PACK_FROM`` of the batch's positions. Both from the index's lengths, which the host knows.
        """
        if tokens is None:
            return None, None
        source, target = tokens.packings(src.shape, tgt_in.shape)
        total = src.numel() + tgt_in.numel()
        pays = total - source.tokens - target.tokens >= PACK_FROM * total
        return (source if layers_may_pack and pays and src.device.type in PACK_DEVICES else None), target

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


def init_weights(model: Transformer) -> None:
    """Every initial weight of the model that is not torch's default for its module, set in one place.

    - Attention projections and the feed-forward network: Xavier/Glorot uniform (Glorot & Bengio 2010), as
      ``torch.nn.MultiheadAttention`` and fairseq's Transformer; attention biases zero.
    - Token embeddings: normal with std D^-0.5 and a zero padding row: scaled by sqrt(D) (§3.4), they give
      inputs of unit scale (as in fairseq).
    - A learned position table: normal with std sqrt(1/2), the root mean square of the sinusoid it replaces.
    - T5's relative position bias: zero, position-blind at the start; training finds what distances matter.

    LayerNorms (gain 1, bias 0), the feed-forward biases and an untied output projection keep torch's
    defaults.
    """
    c = model.config
    for embedding in {id(model.src_embed): model.src_embed, id(model.tgt_embed): model.tgt_embed}.values():
        nn.init.normal_(embedding.weight, mean=0.0, std=c.d_model**-0.5)
        nn.init.zeros_(embedding.weight[c.pad_id])
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            for linear in (module.in_proj, module.out_proj):
                nn.init.xavier_uniform_(linear.weight)
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
        elif isinstance(module, FeedForward):
            nn.init.xavier_uniform_(module.up.weight)
            nn.init.xavier_uniform_(module.down.weight)
        elif isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.table.weight, mean=0.0, std=0.5**0.5)
        elif isinstance(module, RelativePositionBias):
            nn.init.zeros_(module.table.weight)
