"""The attention logger (``viz.logger``) on hand-made inputs: which sentences it probes, when it logs, the
images, tensors and head statistics it writes, and its byte budget."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboard.util import tensor_util

from analysis.axes import attention_axes
from analysis.heads import summarize
from data.batching import collate
from data.pairs import Pair
from evaluation.forced import sentence_pass
from tests.conftest import PAD
from tests.helpers.attention_logging import PAIRS, default_run, hand_made, recorded
from viz import logger as attention_logging
from viz.logger import AttentionLogger

__all__ = ["hand_made", "recorded"]  # the attention logger's fixtures (tests/helpers), used here


def test_attention_probes_are_the_first_short_validation_sentences(hand_made):
    datamodule, _ = hand_made
    logger = AttentionLogger(num_sentences=1, max_tokens=4, stats_sentences=2)
    logger._prepare(datamodule)
    assert [i for i, _, _ in logger._probes] == [2]  # the others need 6 and 5 positions
    assert [i for i, _, _ in logger._stats_items] == [0, 1]
    logger = AttentionLogger(num_sentences=2, max_tokens=3)
    logger._prepare(datamodule)
    assert [i for i, _, _ in logger._probes] == [0, 1]  # none is short enough: the first ones


def test_attention_is_logged_at_the_first_validation_then_every_nth_epoch_and_never_in_the_sanity_check():
    def trainer(epoch, sanity=False):
        return SimpleNamespace(current_epoch=epoch, sanity_checking=sanity, should_stop=False, max_steps=-1,
                               global_step=6 * epoch, max_epochs=-1)

    every_second = AttentionLogger(every_n_epochs=2)
    assert not every_second._due(trainer(0, sanity=True))
    assert every_second._due(trainer(0))  # the first validation, whatever the period
    every_second._logged_step = 6  # once it has logged
    assert [every_second._due(trainer(e)) for e in range(4)] == [False, True, False, True]
    assert not AttentionLogger(every_n_epochs=1)._due(trainer(0, sanity=True))
    assert not AttentionLogger(every_n_epochs=0)._due(trainer(0))


def test_attention_images_per_layer_and_head_have_generated_tokens_on_the_rows(hand_made, recorded):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logger = AttentionLogger(num_sentences=1, max_tokens=4, per_head=True)
    logger._prepare(datamodule)  # the probe: "c d e" -> "z w"
    _, src_ids, tgt_ids = logger._probes[0]
    seen = sentence_pass(module.model, src_ids, tgt_ids)
    tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
    logger._log_images(experiment, tokens, seen.sentence_maps(), 1, 0)
    batch = collate([logger._probes[0]])
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    source, target_in, target_out = ["c", "d", "e", "</s>"], ["<s>", "z", "w"], ["z", "w", "</s>"]
    axes = attention_axes(source, target_in, target_out)
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        assert drawn[f"attention_overview/{kind}/sentence_1"][1:] == axes[kind]
        for layer in (1, 2):
            for head in (1, 2):
                weights, rows, cols = drawn[f"attention_{kind}/sentence_1/layer_{layer}/head_{head}"]
                assert (rows, cols) == axes[kind]
                torch.testing.assert_close(weights, layers[layer - 1][0, head - 1])
    assert len(drawn) == 3 * (1 + 2 * 2)


def test_head_statistics_average_over_stats_sentences_with_padding_masked(hand_made, recorded, monkeypatch):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.__setitem__(name, value))
    logger = AttentionLogger(num_sentences=1, stats_sentences=3)
    logger._prepare(datamodule)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)

    batch = collate(logger._stats_items)
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    maps = dict(zip(("encoder", "decoder", "cross"), maps))
    gold = [set(p.alignment) for p in PAIRS]
    expected = summarize(maps, src_valid=batch.src != PAD, tgt_valid=batch.tgt_out != PAD, gold=gold)
    for kind, named in expected.items():
        for name, values in named.items():
            torch.testing.assert_close(drawn[f"heads/{kind}_{name}"], values)
    agreement, aer = expected["cross"]["agreement"], expected["cross"]["aer"]
    assert logged["heads/best_alignment"] == agreement.max().item() > agreement.mean().item()
    assert logged["heads/best_aer"] == aer.min().item() < aer.max().item()
    # Without the source mask, target positions facing source padding would count on the cross diagonal.
    unmasked = summarize({"cross": maps["cross"]}, tgt_valid=batch.tgt_out != PAD)
    assert not torch.allclose(unmasked["cross"]["diagonal"], expected["cross"]["diagonal"])


def test_head_statistics_score_no_alignment_when_a_word_is_two_tokens(hand_made, recorded, monkeypatch):
    # The links index words; with "x y" one word of two tokens (as a Chinese word of two characters is), a
    # link's word position is no token position, so no AER is logged rather than a wrong one.
    datamodule, module = hand_made
    experiment, drawn = recorded
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.__setitem__(name, value))
    pairs = [*PAIRS[:1], Pair("a b", "x y z w", ((0, 0), (1, 1), (0, 2)), target_words=("x y", "z", "w"))]
    served = SimpleNamespace(
        pairs=lambda split: pairs,
        src_tokenizer=datamodule.src_tokenizer,
        tgt_tokenizer=datamodule.tgt_tokenizer,
        gold_set=lambda: None,
    )
    logger = AttentionLogger(num_sentences=1, stats_sentences=2, explanation_sentences=0)
    logger._prepare(served)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    assert "heads/cross_entropy" in drawn and "heads/cross_aer" not in drawn
    assert "heads/best_aer" not in logged and "heads/best_alignment" not in logged


def _decoded(summary_value):
    return tensor_util.make_ndarray(summary_value.tensor)


def test_attention_tensors_hold_every_head_in_float16_with_tokens_and_gold_cells(hand_made, recorded):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=2, num_images=0, max_tokens=6)
    logger._prepare(datamodule)
    for number, (index, src_ids, tgt_ids) in enumerate(logger._probes):
        seen = sentence_pass(module.model, src_ids, tgt_ids)
        tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
        logger._log_tensors(experiment, tokens, seen.sentence_maps(), PAIRS[index], number, 7, 10**6)
    summaries = experiment.summaries
    assert sorted(summaries) == sorted(
        f"attention/sentence_{n}/{part}" for n in (0, 1) for part in ("text", "encoder", "decoder", "cross")
    )
    assert {v.metadata.plugin_data.plugin_name for v in summaries.values()} == {"attention"}
    text = json.loads(_decoded(summaries["attention/sentence_1/text"]).item())  # PAIRS[1]: "a b" -> "x y z w"
    assert text == {
        "source": "a b", "target": "x y z w", "source_tokens": ["a", "b", "</s>"],
        "target_in": ["<s>", "x", "y", "z", "w"], "target_out": ["x", "y", "z", "w", "</s>"],
        "gold": [[0, 0], [1, 1], [2, 1], [3, 0]],  # [row, column]: target word t generated at row t
    }
    batch = collate([logger._probes[1]])
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        logged = _decoded(summaries[f"attention/sentence_1/{kind}"])
        assert logged.dtype == np.float16 and logged.shape == (2, 2, *layers[0].shape[2:])  # (L, H, Tq, Tk)
        expected = torch.stack([layer[0] for layer in layers])
        torch.testing.assert_close(torch.from_numpy(logged.astype(np.float32)), expected, atol=1e-3, rtol=0)


def test_attention_tensors_stay_within_the_byte_budget(hand_made, recorded):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=3, max_tokens=10)
    logger._prepare(datamodule)
    index, src_ids, tgt_ids = logger._probes[0]  # "a b c d e" -> "x y z": S = 6, T = 4
    seen = sentence_pass(module.model, src_ids, tgt_ids)
    tokens, maps = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer), seen.sentence_maps()
    size = 2 * 2 * (6 * 6 + 4 * 4 + 4 * 6) * 2  # L * H * (encoder + decoder + cross cells) * 2 bytes
    assert logger._log_tensors(experiment, tokens, maps, PAIRS[index], 0, 0, size) == size
    with pytest.warns(UserWarning, match=r"probe sentence 1 would take 608 bytes, more than the 607 left"):
        assert logger._log_tensors(experiment, tokens, maps, PAIRS[index], 1, 0, size - 1) is None
    assert not any(tag.startswith("attention/sentence_1/") for tag in experiment.summaries)


def test_probes_after_one_over_the_budget_are_left_out_so_the_ids_have_no_gap(hand_made, recorded):
    """Probe 1 ("a b" -> "x y z w") is over what probe 0 left of the budget, probe 2 ("c d e" -> "z w") would
    fit: it is left out too, so the tab's sentences stay 0 .. k-1, and the warning says what is shown."""
    datamodule, module = hand_made
    experiment, _ = recorded
    # The weights alone (test_explain_logging counts the explanations with them).
    logger = AttentionLogger(num_sentences=3, num_images=0, max_tokens=10, stats_sentences=0,
                             explanation_sentences=0, explain_probes=False)
    size = 2 * 2 * (6 * 6 + 4 * 4 + 4 * 6) * 2  # probe 0, "a b c d e" -> "x y z": L * H * cells * 2 bytes
    logger.max_bytes = size + 2 * 2 * (4 * 4 + 3 * 3 + 3 * 4) * 2  # room for probe 0 and then probe 2
    logger._prepare(datamodule)
    trainer = SimpleNamespace(logger=SimpleNamespace(experiment=experiment), current_epoch=0,
                              sanity_checking=False, datamodule=datamodule, global_step=5)
    with pytest.warns(UserWarning, match=r"probe sentence 1 would take .* the ATTENTION tab shows probe "
                                         r"sentences 0 to 0 only"):
        logger.on_validation_epoch_end(trainer, module)
    logged = {tag.split("/")[1] for tag in experiment.summaries if tag.startswith("attention/sentence_")}
    assert logged == {"sentence_0"}


def test_head_statistics_in_batches_under_a_memory_bound_equal_those_of_one_batch(hand_made, recorded):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logger = AttentionLogger(num_sentences=1, stats_sentences=3)
    logger._prepare(datamodule)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    whole = dict(drawn)
    config = module.model.config
    smallest = attention_logging.attention_bytes(config, 4, 3)  # "c d e" -> "z w" alone
    batches = attention_logging.statistics_batches(logger._stats_items, config, smallest)
    assert [[i for i, _, _ in batch] for batch in batches] == [[1], [2], [0]]  # one sentence each, by length
    assert attention_logging.statistics_batches(logger._stats_items, config, 10**9) == [
        sorted(logger._stats_items, key=lambda item: (len(item[1]), len(item[2])))
    ]
    logger.stats_max_bytes = smallest
    drawn.clear()
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    assert set(drawn) == set(whole) and any(tag.endswith("cross_aer") for tag in drawn)
    for tag, values in whole.items():
        torch.testing.assert_close(drawn[tag], values, atol=1e-6, rtol=0)


def test_the_default_run_logs_far_less_than_1_mb_of_attention_per_validation(recorded):
    """The default model (configs/default.yaml) on the default toy data: every tensor the ATTENTION tab gets
    at one validation, serialised as in the event file, stays under the 1 MB target and within max_bytes."""
    module, datamodule, logger = default_run()
    experiment, _ = recorded
    logger._prepare(datamodule)
    with torch.no_grad():
        for number, (index, src_ids, tgt_ids) in enumerate(logger._probes[: logger.num_sentences]):
            seen = sentence_pass(module.model, src_ids, tgt_ids)
            tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
            logger._log_tensors(experiment, tokens, seen.sentence_maps(), logger._pairs[index], number, 0,
                                logger.max_bytes)
        logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    summaries = experiment.summaries
    assert sum(tag.startswith("attention/sentence_") for tag in summaries) == 4 * 4  # 4 probes logged whole
    weights = sum(len(summaries[t].tensor.tensor_content) for t in summaries if t.split("/")[-1] in
                  ("encoder", "decoder", "cross"))
    # 3 layers x 4 heads x (S*S + T*T + T*S) x 2 bytes, every probe at most 16 tokens a side
    assert weights <= 4 * 3 * 4 * 3 * 16 * 16 * 2
    total = sum(len(value.SerializeToString()) for value in summaries.values())
    assert weights < total < 100_000
