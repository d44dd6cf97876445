"""Counting the arithmetic of a computation: matrix-multiply FLOPs, as the textbook formulas count them."""

from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def matmul_flops(fn) -> int:
    """Matmul FLOPs (2 per multiply-add) of one call of ``fn()``, counted by ``FlopCounterMode``.

    Counted under the math attention backend, where attention is plain batched matmuls (fused CPU kernels are
    invisible to the counter); the count is that of the model, whichever kernel later runs it.
    """
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()
