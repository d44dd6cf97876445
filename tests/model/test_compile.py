"""The training forward (model and loss) compiles whole: no graph break for any position variant, and batches
of other shapes compile no more often than dynamic shapes need.

A graph break splits the compiled step, and usually marks a host-device sync (``.item()``, ``nonzero``); a
recompile at every batch shape would spend more time compiling than training. ``torch._dynamo.explain`` and a
compile counter (the eager backend: only the tracing is tested, in seconds) check both on the CPU.
"""


import pytest
import torch
import torch._dynamo.testing

from model.positions import POSITIONAL
from model.transformer import PACK_FROM
from tests.helpers.tiny_batches import batch, training_module


def padding_share(b) -> float:
    tokens = b.src_tokens.numel() + b.tgt_tokens.numel()
    return 1 - tokens / (b.src.numel() + b.tgt_in.numel())


@pytest.mark.parametrize("positional", POSITIONAL)
def test_the_training_forward_has_no_graph_break(positional):
    m = training_module(positional)
    b = batch(6, 9, seed=0)
    assert padding_share(b) >= PACK_FROM  # the packed path: every gather and scatter traced too
    explained = torch._dynamo.explain(m._training_loss)(b)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_batches_of_other_shapes_recompile_only_as_dynamic_shapes_need():
    """The first shape compiles a static graph, the second one dynamic in every size that changed, and later
    shapes reuse it; only the padding share crossing ``PACK_FROM`` (packed or padded layers) compiles anew."""
    torch._dynamo.reset()
    # The variant whose positions depend most on the lengths; no dropout, so that eager and compiled agree.
    m = training_module("relative", dropout=0.0)
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(m._training_loss, backend=counter)
    batches = [batch(6, 9, seed=0), batch(8, 12, seed=1), batch(5, 15, seed=2),  # padded
               batch(4, 7, seed=3, padded=False), batch(7, 5, seed=4, padded=False)]  # no padding
    frames = []
    for b in batches:
        torch.testing.assert_close(compiled(b), m._training_loss(b))
        frames.append(counter.frame_count)
    assert [padding_share(b) >= PACK_FROM for b in batches] == [True, True, True, False, False]
    assert frames == [1, 2, 2, 3, 3]
