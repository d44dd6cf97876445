"""The small types that ``Transformer.encode``/``decode``, decoding and their callers share.

Shape legend: B batch, S source length, T target length, V vocabulary size, L layers, H heads.

They live apart from ``model.transformer`` so that ``model.decoding`` needs them without the model, and the
model can import decoding for ``Transformer.generate``.
"""

from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor

from model.packing import Packing


class AttentionMaps(NamedTuple):
    """Attention weights of every layer, returned when asked for, never stored on modules."""

    encoder: list[Tensor]  # per layer (B, H, S, S)
    decoder: list[Tensor]  # per layer (B, H, T, T)
    cross: list[Tensor]  # per layer (B, H, T, S)


class AlignedHead(NamedTuple):
    """The one cross-attention head a guided-alignment loss supervises (``Transformer.forward``'s
    ``alignment_head``), counted from 0."""

    layer: int
    head: int
    # Read with the decoder's causal mask lifted, every target position seeing the whole target, in a
    # second pass up to ``layer`` (Garg et al. 2019's full context; ``Transformer.full_context_attention``).
    full_context: bool = False


@dataclass(frozen=True)
class DecoderRequest:
    """What a caller of ``Transformer.decode`` wants back besides the logits (as Hugging Face's
    ``output_attentions`` and ``output_hidden_states``, or fairseq's ``alignment_layer``); nothing by default.
    """

    weights: bool = False  # every layer's self- and cross-attention maps, by the explicit path
    hidden: bool = False  # each layer's output (B, T, D) before the final norm (the logit lens reads them)
    # One head's cross-attention weights (B, T, S), beside the fused kernel, for a loss on them.
    alignment: AlignedHead | None = None
    last_only: bool = False  # logits at the last position only (B, 1, V), all that decoding needs


LOGITS_ONLY = DecoderRequest()  # nothing but the logits, at every position


class EncoderOutput(NamedTuple):
    memory: Tensor  # (B, S, D), or (N, D) tokens with a packing
    src_attend: Tensor  # (B, 1, 1, S) boolean, True = real source token
    attention: list[Tensor]  # per layer (B, H, S, S); empty unless asked for
    tokens: Packing | None = None  # where memory's tokens sit in the (B, S) batch, if packed


class DecoderOutput(NamedTuple):
    logits: Tensor  # (B, T, V)
    self_attention: list[Tensor]  # per layer (B, H, T, T); empty unless asked for
    cross_attention: list[Tensor]  # per layer (B, H, T, S); empty unless asked for
    hidden: tuple[Tensor, ...] = ()  # per layer's output (B, T, D) before the final norm; empty unless asked
    alignment: Tensor | None = None  # (B, T, S): one cross-attention head's weights, when asked for


class HeadMask(NamedTuple):
    """Multipliers of each head's output, 1 keeps a head and 0 silences it: (L, H), or (B, L, H)
    per sentence."""

    encoder: Tensor | None = None
    decoder: Tensor | None = None
    cross: Tensor | None = None

    def layer(self, index: int) -> "HeadMask":
        """The multipliers of layer ``index`` of each stack: (H,), or (B, H) per sentence."""

        def of_layer(multipliers: Tensor | None) -> Tensor | None:
            if multipliers is None:
                return None
            return multipliers[index] if multipliers.dim() == 2 else multipliers[:, index]

        return HeadMask(of_layer(self.encoder), of_layer(self.decoder), of_layer(self.cross))


NO_HEAD_MASK = HeadMask()  # every head kept
