"""Validation-time logging of every explanation method's AER and agreement (viz.logger)."""

import pytest

from analysis.explain.registry import METHODS
from evaluation.explanations import explanation_alignment
from tests.conftest import read_events, short_tsv_corpus, train_tiny
from training.checkpoints import load_run
from viz.logger import AttentionLogger


def test_every_method_is_logged_per_layer_and_matches_the_final_weights(tiny_run):
    events = read_events(tiny_run)
    scalars = set(events.Tags()["scalars"])
    for name in METHODS:
        layers = ("embeddings",) if METHODS[name].gradients else ("layer_1", "layer_2")
        for layer in layers:
            assert {f"explain/{name}/aer_{layer}", f"explain/{name}/agreement_{layer}"} <= scalars, name
        assert f"explain/{name}/best_aer" in scalars
    assert all(s.value > 0 for s in events.Scalars("explain/seconds"))
    # The last validation's figures are those of the final weights, on the tiny config's 8 sentences.
    run = load_run(tiny_run / "checkpoints" / "last.ckpt")
    dm = run.datamodule
    scores = explanation_alignment(run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, dm.pairs("val")[:8],
                                   methods=["attention", "rollout"])
    for name in ("attention", "rollout"):
        for row in scores[name]["layers"]:
            logged = events.Scalars(f"explain/{name}/aer_{row['layer'].replace(' ', '_')}")[-1].value
            assert logged == pytest.approx(row["aer"], abs=1e-6)


def test_data_without_gold_alignments_logs_no_explanation_scores(tmp_path):
    corpus = short_tsv_corpus(tmp_path / "corpus")
    run_dir = train_tiny(
        tmp_path / "runs", "--data.dataset", "tsv", "--data.path", str(corpus), "--trainer.max_epochs", "1",
        "--data.tokenizer", "word",
    )
    scalars = set(read_events(run_dir).Tags()["scalars"])
    assert not any(tag.startswith("explain/") for tag in scalars)
    assert "val/loss" in scalars


def test_explanation_options_are_checked():
    with pytest.raises(ValueError, match="unknown explanation method 'saliency'"):
        AttentionLogger(explanation_methods=["saliency"])
    with pytest.raises(ValueError, match="ig_steps positive"):
        AttentionLogger(ig_steps=0)
    assert AttentionLogger(explanation_methods=["rollout"]).explanation_methods == ["rollout"]
    # By default every method but the costly Integrated Gradients.
    assert AttentionLogger().explanation_methods == [m for m in METHODS if m != "integrated_gradients"]
