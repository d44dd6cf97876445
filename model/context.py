"""What the layers of a stack share for one call: built once in ``encode``/``decode``, passed as one argument.

Shape legend: B batch, H heads, Tq query length, Tk key length (cached keys included), Dh head dim.

Masks, position hooks and packing are the same for every layer of a stack, so ``Transformer`` builds them once
per call and hands each layer one ``StackContext``; a layer hands each attention its ``AttentionContext``. A
new position variant or input layout then changes how the context is built, not every signature.
"""

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from model.decoding import BeamRows
from model.masks import KeyMask, guard_empty_rows
from model.packing import Packing


@dataclass(frozen=True)
class AttentionContext:
    """Everything one attention takes for a call besides its inputs, the same for every layer of a stack.

    Build it with ``AttentionContext.of``, which makes the mask safe once for all the layers that use it.
    """

    mask: KeyMask | None = None  # True = may attend, broadcastable to (B, H, Tq, Tk); None: every key
    # Maps queries (B, H, Tq, Dh) and the new keys (B, H, Tk_new, Dh) to rotated ones (RoPE): self-attention.
    rotate: Callable[[Tensor], Tensor] | None = None
    score_bias: Tensor | None = None  # float (1|B, H, Tq, Tk), added to the scaled scores (ALiBi, T5)
    packing: tuple[Packing, Packing] | None = None  # (query, key) packings of padding-free inputs

    @classmethod
    def of(
        cls,
        mask: Tensor | None = None,
        *,
        rotate: Callable[[Tensor], Tensor] | None = None,
        score_bias: Tensor | None = None,
        packing: tuple[Packing, Packing] | None = None,
    ) -> "AttentionContext":
        """The context of a boolean ``mask`` (True = may attend, broadcastable to (B, H, Tq, Tk)), made safe
        here once (``guard_empty_rows``), and of the hooks."""
        return cls(None if mask is None else guard_empty_rows(mask), rotate, score_bias, packing)


@dataclass(frozen=True)
class StackContext:
    """The per-call inputs every layer of a stack shares: its self-attention's and, in the decoder, its
    cross-attention's."""

    self_attention: AttentionContext
    cross_attention: AttentionContext | None = None  # the decoder's; None in the encoder
    # The decoder's rows per encoder output row, when a sentence's beams share its row; None: one each.
    beams: BeamRows | None = None


NO_CONTEXT = AttentionContext()  # attend every key, no position hooks, padded inputs
