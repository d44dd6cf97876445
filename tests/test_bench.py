"""The benchmark runs, measures equal work on both sides, and its baseline is a correct seq2seq model."""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from bench.speed import BOS, EOS, QUICK, TutorialSeq2Seq, main, make_batches

CORPORA = Path(os.environ.get("CORPORA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "corpora"))

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
        argv = ["--quick", "--device", "cpu", "--threads", "1", "--json", str(path)]
        results = main([*argv, "--decode-batch-sizes", "2", str(QUICK.batch_size)])
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
    assert results["decoding"]["cached_gflop"] < results["decoding"]["uncached_gflop"]
    by_size = results["decoding_by_batch_size"]
    assert [r["batch_size"] for r in by_size] == [2, QUICK.batch_size]
    assert by_size[1] == results["decoding"]  # the default batch size is measured once
    for r in by_size:
        assert r["outputs_equal"] is True and r["flop_ratio"] > 1
        for name, value in numbers(r):
            assert math.isfinite(value) and value > 0, f"batch {r['batch_size']}: {name} = {value}"
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


def test_baseline_greedy_decoding_is_the_teacher_forced_argmax_and_batch_independent():
    from bench.multi30k_baseline import greedy_rerun

    torch.manual_seed(0)
    model = TutorialSeq2Seq(QUICK).eval()
    src = make_batches(QUICK, 1, torch.device("cpu"))[0].src[:4]  # (4, S), padded
    rows = greedy_rerun(model, src)
    for i, row in enumerate(rows):
        one = src[i : i + 1, : int((src[i] != 0).sum())]
        assert greedy_rerun(model, one) == [row]
        limit = one.size(1) + 5  # the tutorial's: source tokens + 5
        assert len(row) <= limit
        prefix = torch.tensor([[BOS, *row]])
        with torch.no_grad():
            argmax = model(one, prefix).argmax(-1)[0].tolist()  # (T,)
        assert row == argmax[: len(row)]  # every chosen token was the most probable one
        if len(row) < limit:
            assert argmax[len(row)] == EOS  # it stopped because EOS came next


@pytest.mark.skipif(not (CORPORA / "multi30k").is_dir(), reason=f"Multi30k not found in {CORPORA}")
def test_baseline_quick_run_scores_every_test_split(tmp_path):
    from bench.multi30k_baseline import main as baseline_main

    argv = ["--quick", "--minutes", "0.02", "--data-path", str(CORPORA / "multi30k"), "--out", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        baseline_main(argv)
    finally:
        torch.set_num_threads(threads)
    written = (tmp_path / "results.json").read_text()
    results = json.loads(written)
    assert set(results["scores"]) == {"test2016", "test2017", "mscoco2017"}
    assert results["steps"] >= 1 and results["history"][-1]["steps"] == results["steps"]
    assert results["batch_size"] == 128 and results["lr"] == 1e-4  # the tutorial's recipe, as it ran
    assert results["model_sizes"]["d_model"] == 32  # --quick's model
    for split, scores in results["scores"].items():
        assert scores["sentences"] == 50
        assert 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100
        hypotheses = (tmp_path / f"{split}.hyp.en").read_text().splitlines()
        assert len(hypotheses) == 50

    # A second run into the same folder stops at once, naming the file, and leaves it as it was.
    with pytest.raises(SystemExit, match="results.json exists; pass --overwrite"):
        baseline_main(argv)
    assert (tmp_path / "results.json").read_text() == written


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("ctranslate2") is None,
    reason="ctranslate2 is not installed (optional dependency: pip install ctranslate2)",
)
def test_ctranslate2_quick_run_table_matches_its_json(tmp_path, capsys):
    from bench.ctranslate2_speed import main as ct2_main

    path = tmp_path / "ct2.json"
    threads = torch.get_num_threads()
    try:
        returned = ct2_main(["--quick", "--threads", "1", "--json", str(path)])
    finally:
        torch.set_num_threads(threads)  # the setting is process-wide
    written = json.loads(path.read_text())
    assert written["rows"] == returned["rows"]
    assert written["settings"]["threads"] == 1 and written["settings"]["sentences"] == 48
    rows = {r["name"]: r for r in written["rows"]}
    assert list(rows) == ["PyTorch greedy", "PyTorch beam 5", "CTranslate2 fp32 greedy", "CTranslate2 fp32 beam 5",
                          "CTranslate2 int8 greedy", "CTranslate2 int8 beam 5"]
    for name in ("CTranslate2 fp32 greedy", "CTranslate2 fp32 beam 5"):
        assert rows[name]["same_tokens_as_pytorch"] == 1.0  # fp32 decodes exactly like PyTorch
        assert rows[name]["bleu"] == rows["PyTorch " + name.split(" ", 2)[2]]["bleu"]
    for r in rows.values():
        speed = r["sentences_per_second"]
        assert math.isfinite(speed) and speed > 0
        assert speed == pytest.approx(48 / r["seconds"])
        pytorch = rows["PyTorch greedy" if r["beam_size"] == 1 else "PyTorch beam 5"]["sentences_per_second"]
        assert r["ratio_to_pytorch"] == pytest.approx(speed / pytorch)

    # Every figure of the printed table is the JSON's, rounded as printed.
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    printed = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    assert list(printed) == list(rows)
    for name, (speed, ratio, bleu, same) in printed.items():
        r = rows[name]
        assert float(speed) == pytest.approx(r["sentences_per_second"], abs=0.051)
        assert float(ratio.rstrip("x")) == pytest.approx(r["ratio_to_pytorch"], abs=0.0051)
        assert float(bleu) == pytest.approx(r["bleu"], abs=0.0051)
        assert float(same.rstrip("%")) == pytest.approx(100 * r["same_tokens_as_pytorch"], abs=0.051)
