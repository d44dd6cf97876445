"""docs/architecture.md's walk-through "Adding an explanation method", held to what it says: a method is its
function and one row of ``analysis.explain.registry.METHODS``, and every place that offers, scores or shows
methods takes it from there (training's logger, ``evaluate.py explain``, the gold scores, the tab)."""

import pytest
import torch

from analysis.explain import registry
from analysis.explain.registry import METHODS, Method
from analysis.explain.trace import Explanation, Trace, layer_names, zero_invalid
from data.gold import GoldSet
from data.tokenizer import Tokenizer
from data.toy import make_toy_splits
from evaluation.gold_alignment import gold_alignment, gold_items
from model import Transformer
from tests.conftest import tiny_config


def mean_cross_attention(trace: Trace) -> Explanation:
    """The walk-through's method: each decoder layer's cross-attention averaged over its heads."""
    per_layer = torch.stack([weights.float().mean(dim=1) for weights in trace.cross], dim=1)  # (B, L, T, S)
    per_layer = zero_invalid(per_layer, trace.src_valid, trace.tgt_valid)
    return Explanation("mean_attention", per_layer, None, layer_names(per_layer.size(1)), trace.src_valid,
                       trace.tgt_valid)


@pytest.fixture
def new_method(monkeypatch):
    """The one row the walk-through adds."""
    monkeypatch.setitem(METHODS, "mean_attention", Method(mean_cross_attention, "mean cross-attention"))
    return "mean_attention"


def test_the_new_method_is_scored_against_gold_as_the_others_are(new_method):
    """Its maps are raw attention's per-layer maps (the mean of a layer's heads) computed another way, so the
    gold scores, which never ask which method made a map, must give it the same figures per layer."""
    splits = make_toy_splits(train_size=200, val_size=8, test_size=1, seed=5)
    src, tgt = (Tokenizer.train([getattr(p, side) for p in splits["train"] + splits["val"]], kind="word")
                for side in ("source", "target"))
    torch.manual_seed(0)
    model = Transformer(tiny_config(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size)).eval()
    items = gold_items(GoldSet(splits["val"]), src, tgt, model.config.max_len, "toy val")
    scores = gold_alignment(model, items, methods=[new_method, "attention"], batch_size=4)
    mine, attention = scores[new_method].alignment_scores(), scores["attention"].alignment_scores()
    assert mine.heads is None  # its Explanation has no per-head maps
    assert [row.layer for row in mine.layers] == [row.layer for row in attention.layers] == ["layer 1",
                                                                                               "layer 2"]
    assert [row.aer for row in mine.layers] == pytest.approx([row.aer for row in attention.layers], abs=1e-6)
    assert [row.agreement for row in mine.layers] == pytest.approx(
        [row.agreement for row in attention.layers], abs=1e-6)


def test_the_new_method_is_offered_by_evaluate_and_training_and_served_to_the_tab(new_method):
    import evaluate
    from viz.tab.plugin import vocabulary

    args = evaluate.parse_args(["explain", "run.ckpt", "--methods", new_method, "attention"])
    assert args.methods == [new_method, "attention"]
    assert registry.check_methods([new_method]) == [new_method]
    served = {method["name"]: method for method in vocabulary()["methods"]}
    assert served[new_method]["label"] == "mean cross-attention"
    assert served[new_method]["weights"] is False and served[new_method]["costly"] is False
