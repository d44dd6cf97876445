"""The benchmark runs, measures equal work on both sides, and its baseline is a correct seq2seq model."""

import json
import math

import pytest
import torch

from bench.speed import QUICK, TutorialSeq2Seq, main, make_batches

# The tutorial's own mix of float and boolean masks; pytest applies its own warning filters inside each test.
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")


def numbers(tree):
    """Every int or float leaf of nested dicts, with its path."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from ((f"{key}.{k}", v) for k, v in numbers(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value


def test_quick_run_reports_positive_figures_and_equal_decodings(tmp_path, capsys):
    path = tmp_path / "speed.json"
    threads = torch.get_num_threads()
    try:
        results = main(["--quick", "--device", "cpu", "--threads", "1", "--json", str(path)])
    finally:
        torch.set_num_threads(threads)  # the setting is process-wide

    figures = dict(numbers({k: results[k] for k in ("training", "decoding")}))
    figures["matmul_flop_per_s"] = results["matmul_flop_per_s"]
    assert {"training.ratio", "decoding.cache_ratio", "decoding.beam_over_greedy"} <= figures.keys()
    assert {"training.ours.matmul_peak_fraction", "training.tutorial.target_tokens_per_s"} <= figures.keys()
    for name, value in figures.items():
        assert math.isfinite(value) and value > 0, f"{name} = {value}"
    # The cached and the re-run decoder produced the same tokens, so the speed comparison compares equal work.
    assert results["decoding"]["outputs_equal"] is True
    assert results["machine"]["threads"] == 1
    assert json.loads(path.read_text())["decoding"]["outputs_equal"] is True
    assert "ours / tutorial" in capsys.readouterr().out


def test_tutorial_baseline_is_causal_and_ignores_padding():
    torch.manual_seed(0)
    model = TutorialSeq2Seq(QUICK).eval()
    batch = make_batches(QUICK, 1, torch.device("cpu"))[0]
    src, tgt_in = batch.src[:1], batch.tgt_in[:1, :4]
    src = src[:, : int((src != 0).sum())]  # one sentence, no padding
    logits = model(src, tgt_in)

    changed_future = tgt_in.clone()
    changed_future[:, 3] = torch.where(tgt_in[:, 3] == 3, 4, 3)  # another ordinary token
    torch.testing.assert_close(model(src, changed_future)[:, :3], logits[:, :3])

    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt_in), logits, atol=1e-5, rtol=1e-5)
