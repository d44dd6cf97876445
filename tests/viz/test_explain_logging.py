"""Validation-time logging of every explanation method's AER and agreement (viz.logger)."""

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboard.util import tensor_util

from analysis.explain.registry import METHODS
from analysis.explain.scores import AlignmentScores, HeadScores, LayerScore
from evaluation.explanations import explanation_alignment
from evaluation.forced import sentence_pass
from tests.conftest import read_events, short_tsv_corpus, train_tiny
from tests.helpers.attention_logging import default_run, hand_made, recorded
from training.checkpoints import load_run
from viz.logger import AttentionLogger
from viz.tab.metadata import ABOUT, AER, EXPLAIN_TAG, HEAD_SCORES, LAYER_SCORES, explain_tag

__all__ = ["hand_made", "recorded"]  # the attention logger's fixtures (tests/helpers), used here


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
        for row in scores[name].layers:
            logged = events.Scalars(f"explain/{name}/aer_{row.layer.replace(' ', '_')}")[-1].value
            assert logged == pytest.approx(row.aer, abs=1e-6)


def test_a_full_context_layer_is_scored_from_its_own_pass(tiny_run, monkeypatch):
    """A head trained with the whole target in view is scored as it trained: explanation_alignment hands the
    layer to every teacher-forced pass it makes."""
    from evaluation import explanations

    passes = []
    real = explanations.forced_pass

    def watched(model, batch, **options):
        passes.append(options)
        return real(model, batch, **options)

    monkeypatch.setattr(explanations, "forced_pass", watched)
    run = load_run(tiny_run / "checkpoints" / "last.ckpt")
    dm = run.datamodule
    explanation_alignment(run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, dm.pairs("val")[:8],
                          methods=["attention"], full_context=1)
    assert passes and all(options == {"full_context": 1} for options in passes)


def test_data_without_gold_alignments_logs_no_explanation_scores(tmp_path):
    corpus = short_tsv_corpus(tmp_path / "corpus")
    run_dir = train_tiny(
        tmp_path / "runs", "--data.dataset", "tsv", "--data.path", str(corpus), "--trainer.max_epochs", "1",
        "--data.tokenizer", "word",
    )
    scalars = set(read_events(run_dir).Tags()["scalars"])
    assert not any(tag.startswith("explain/") for tag in scalars - {"explain/probe_seconds"})
    assert "explain/probe_seconds" in scalars  # the probes' maps need no gold links
    assert "val/loss" in scalars


def test_explanation_options_are_checked():
    with pytest.raises(ValueError, match="unknown explanation method 'saliency'"):
        AttentionLogger(explanation_methods=["saliency"])
    with pytest.raises(ValueError, match="ig_steps positive"):
        AttentionLogger(ig_steps=0)
    assert AttentionLogger(explanation_methods=["rollout"]).explanation_methods == ["rollout"]
    # By default every method but the costly ones: Integrated Gradients.
    assert AttentionLogger().explanation_methods == [m for m, method in METHODS.items() if not method.costly]
    assert [m for m in METHODS if m not in AttentionLogger().explanation_methods] == ["integrated_gradients"]


# -- what the ATTENTION tab gets: each probe's maps and logit lens, and the scores as tensors ---------------


def test_every_probe_has_every_methods_map_and_its_lens_and_the_scores_are_tensors(tiny_run):
    events = read_events(tiny_run)
    tensors = set(events.Tags()["tensors"])
    for number in (0, 1):
        text = json.loads(tensor_util.make_ndarray(events.Tensors(f"attention/sentence_{number}/text")[-1]
                                                   .tensor_proto).item())
        T, S = len(text["target_out"]), len(text["source_tokens"])
        assert [m["name"] for m in text["methods"]] == list(METHODS)
        for name in METHODS:
            tag = f"attention/sentence_{number}/explain/{name}"
            if name == "attention":  # its map is the cross weights
                assert tag not in tensors
                continue
            logged = [tensor_util.make_ndarray(e.tensor_proto) for e in events.Tensors(tag)]
            assert len(logged) == 2 and logged[-1].dtype == np.float16  # both validations
            heads = (2, 2) if not METHODS[name].gradients else (1,)  # (L, H) or (L,) of the tiny model
            assert logged[-1].shape == (*heads, T, S)
            if len(heads) == 2:
                per_layer = events.Tensors(f"{tag}/per_layer")[-1].tensor_proto
                assert tensor_util.make_ndarray(per_layer).shape == (2, T, S)
        lens = json.loads(tensor_util.make_ndarray(events.Tensors(f"attention/sentence_{number}/lens")[-1]
                                                   .tensor_proto).item())
        assert np.array(lens["top_probs"]).shape == (2, T, 3)
        assert np.array(lens["produced_rank"]).shape == (2, T)
    assert all(s.value > 0 for s in events.Scalars("explain/probe_seconds"))
    for name in METHODS:
        scores = {score: tensor_util.make_ndarray(events.Tensors(f"attention/explain/{name}/{score}")[-1]
                                                  .tensor_proto) for score in ("aer", "agreement")}
        layers = 1 if METHODS[name].gradients else 2
        assert scores["aer"].shape == scores["agreement"].shape == (layers,)
        head_tag = f"attention/explain/{name}/head_aer"
        assert (head_tag in tensors) == (not METHODS[name].gradients)
        # The tensor is the scalar TensorBoard plots.
        scalar = events.Scalars(f"explain/{name}/aer_{'embeddings' if layers == 1 else 'layer_2'}")[-1].value
        assert scores["aer"][-1] == pytest.approx(scalar, abs=1e-6)


def test_the_score_tensors_are_named_by_the_one_list_of_score_keys():
    """Each method's scores reach the tab under the keys of ``viz.tab.metadata`` (the fields of its
    ``LayerScore`` and ``HeadScores``), each tag matched by the pattern the routes read them with."""
    assert LAYER_SCORES == tuple(field.name for field in dataclasses.fields(HeadScores))
    assert set(LAYER_SCORES) == {field.name for field in dataclasses.fields(LayerScore)} - {"layer"}
    writer = SimpleNamespace(summaries=[])
    writer.add_summary = lambda summary, step: writer.summaries.append(summary)
    layers = (LayerScore("layer 1", 0.5, 0.25), LayerScore("layer 2", 0.75, 0.125))
    scores = {"rollout": AlignmentScores(layers, HeadScores([[0.5, 0.25]] * 2, [[0.125, 0.0625]] * 2)),
              "grad_x_input": AlignmentScores((LayerScore("embeddings", 0.375, 0.5),), None)}
    AttentionLogger()._log_score_tensors(SimpleNamespace(file_writer=writer), scores, step=3, budget=10**6)
    logged = {value.tag: tensor_util.make_ndarray(value.tensor) for summary in writer.summaries
              for value in summary.value}
    assert {tag: EXPLAIN_TAG.match(tag).groups() for tag in logged} == {
        explain_tag(name, part): (name, part) for name in scores
        for part in (*LAYER_SCORES, *(HEAD_SCORES if name == "rollout" else ()), ABOUT)}
    assert logged[explain_tag("rollout", AER)].tolist() == [0.5, 0.75]
    assert logged[explain_tag("rollout", "agreement")].tolist() == [0.25, 0.125]
    assert logged[explain_tag("rollout", "head_agreement")].tolist() == [[0.125, 0.0625]] * 2
    assert logged[explain_tag("grad_x_input", AER)].tolist() == [0.375]
    assert json.loads(logged[explain_tag("grad_x_input", ABOUT)].item()) == {
        "label": METHODS["grad_x_input"].label, "layers": ["embeddings"]}


def _probe_bytes(logger, module, datamodule, probe) -> int:
    """What one probe takes of the budget: its weights, its explanation maps and its lens."""
    _, src_ids, tgt_ids = probe
    seen = sentence_pass(module.model, src_ids, tgt_ids)
    maps = seen.sentence_maps()
    weights = sum(torch.stack(layers).to(torch.float16).numpy().nbytes for layers in maps.values())
    return weights + logger._explain_probe(module.model, datamodule.tgt_tokenizer, seen).nbytes


def _validate(logger, module, datamodule, experiment, monkeypatch):
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    trainer = SimpleNamespace(logger=SimpleNamespace(experiment=experiment), current_epoch=0,
                              sanity_checking=False, datamodule=datamodule, global_step=5)
    logger.on_validation_epoch_end(trainer, module)


def _counted(summaries) -> int:
    """The bytes the budget counts of what was written: arrays, the lens JSON and the score summaries."""
    total = 0
    for tag, value in summaries.items():
        if tag.startswith("attention/explain/"):
            total += len(value.SerializeToString())
        elif tag.endswith("/lens"):
            total += len(value.tensor.string_val[0])
        elif tag.startswith("attention/sentence_") and not tag.endswith("/text"):
            total += len(value.tensor.tensor_content)
    return total


def test_a_small_budget_leaves_out_whole_probes_with_their_explanations_and_no_gap(
    hand_made, recorded, monkeypatch
):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=3, num_images=0, max_tokens=10, stats_sentences=0)
    logger._prepare(datamodule)
    sizes = [_probe_bytes(logger, module, datamodule, probe) for probe in logger._probes]
    assert sizes[1] > sizes[2]  # PAIRS: probe 1 is the larger, probe 2 would fit where probe 1 does not
    logger.max_bytes = sizes[0] + sizes[2]
    with pytest.warns(UserWarning, match=r"probe sentence 1 would take .* the ATTENTION tab shows probe "
                                         r"sentences 0 to 0 only"):
        _validate(logger, module, datamodule, experiment, monkeypatch)
    summaries = experiment.summaries
    logged = {tag.split("/")[1] for tag in summaries if tag.startswith("attention/sentence_")}
    assert logged == {"sentence_0"}
    parts = {tag.removeprefix("attention/sentence_0/") for tag in summaries if "sentence_0" in tag}
    assert {"text", "encoder", "decoder", "cross", "lens", "explain/value_norms",
            "explain/value_norms/per_layer", "explain/integrated_gradients"} <= parts
    assert _counted(summaries) <= logger.max_bytes
    # Probe 0 written whole, to the byte the budget counted.
    probe = {tag: value for tag, value in summaries.items() if not tag.startswith("attention/explain/")}
    assert _counted(probe) == sizes[0]


def test_explanation_scores_that_do_not_fit_are_left_out_of_the_tab_with_a_warning(
    hand_made, recorded, monkeypatch
):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=1, num_images=0, max_tokens=10, stats_sentences=0,
                             explanation_methods=["attention", "rollout"])
    logger._prepare(datamodule)
    logger.max_bytes = _probe_bytes(logger, module, datamodule, logger._probes[0]) + 10
    with pytest.warns(UserWarning, match=r"the explanation scores would take \d+ bytes, more than the 10 "):
        _validate(logger, module, datamodule, experiment, monkeypatch)
    assert "attention/sentence_0/lens" in experiment.summaries
    assert not any(tag.startswith("attention/explain/") for tag in experiment.summaries)
    logger.max_bytes = 10**6
    _validate(logger, module, datamodule, experiment, monkeypatch)
    scores = {tag for tag in experiment.summaries if tag.startswith("attention/explain/")}
    assert scores == {f"attention/explain/{name}/{score}" for name in ("attention", "rollout")
                      for score in ("aer", "agreement", "head_aer", "head_agreement", "layers")}


def test_the_default_run_logs_its_explanations_within_1_mb_per_validation(recorded, monkeypatch):
    """The default model (configs/default.yaml) on the default toy data: every summary the ATTENTION tab gets
    at one validation, explanations included, stays within max_bytes (1 MB)."""
    module, datamodule, logger = default_run(stats_sentences=20)
    experiment, _ = recorded
    logger._prepare(datamodule)
    _validate(logger, module, datamodule, experiment, monkeypatch)
    summaries = experiment.summaries
    assert {f"attention/sentence_{n}/lens" for n in range(4)} <= set(summaries)  # every probe, whole
    assert _counted(summaries) <= logger.max_bytes
    total = sum(len(value.SerializeToString()) for value in summaries.values())
    assert total < 200_000  # far under the 1 MB target
