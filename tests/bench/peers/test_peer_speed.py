"""The peers' side of ``bench/speed.py`` (``bench/peers/speed_joeynmt.py``, ``bench/peers/speed_eole.py``):
skipped with a reason without a peer's environment, and the rows of the report; eole timed in its own
environment when it exists (``python bench/peers/eole_baseline.py --venv-only`` makes it)."""

from pathlib import Path

import pytest
import torch

from bench.speed_common import QUICK

EOLE_VENV = Path(__file__).resolve().parents[3] / "bench" / ".eole-venv"  # eole_baseline.py makes it
JOEYNMT_VENV = Path(__file__).resolve().parents[3] / "bench" / ".joeynmt-venv"  # joeynmt_baseline.py makes it


def test_speed_skips_joeynmt_without_its_venv_and_says_why(tmp_path):
    from bench.peers.speed_joeynmt import bench_joeynmt, joeynmt_lines

    skipped = bench_joeynmt(QUICK, torch.device("cpu"), tmp_path / "none")
    assert skipped == {"skipped": f"no JoeyNMT environment in {tmp_path / 'none'} "
                                  "(python bench/peers/joeynmt_baseline.py makes it)"}
    assert joeynmt_lines({"config": {}, "joeynmt": skipped})[-1] == f"  skipped: {skipped['skipped']}"


def test_speed_skips_eole_without_its_venv_or_on_a_gpu_and_says_why(tmp_path):
    from bench.peers.speed_eole import bench_eole, eole_lines

    skipped = bench_eole(QUICK, torch.device("cpu"), tmp_path / "none")
    assert skipped == {"skipped": f"no eole environment in {tmp_path / 'none'} "
                                  "(python bench/peers/eole_baseline.py makes it)"}  # fmt: skip
    assert eole_lines({"eole": skipped})[-1] == f"  skipped: {skipped['skipped']}"
    on_gpu = bench_eole(QUICK, torch.device("cuda"), tmp_path)
    assert on_gpu == {"skipped": "eole's part runs on the CPU only"}


@pytest.mark.skipif(not (EOLE_VENV / "bin" / "python").exists(), reason=f"no eole environment in {EOLE_VENV}")
@pytest.mark.parametrize("tied", [False, True])
def test_speed_times_eole_at_the_same_parameter_count_on_both_kinds_of_batches(tied):
    from dataclasses import replace

    from bench.peers.speed_eole import bench_eole, eole_lines
    from bench.speed_common import make_batches
    from bench.speed_training import RecipeData

    # train.py's batches stand in here as random ones at another vocabulary size, as the recipe's has
    other = replace(QUICK, vocab_size=QUICK.vocab_size + 40)
    recipe = RecipeData(make_batches(other, other.train_warmup + other.train_iters, torch.device("cpu")),
                        other.vocab_size, [])  # fmt: skip
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        result = bench_eole(replace(QUICK, tied=tied), torch.device("cpu"), EOLE_VENV, recipe)
    finally:
        torch.set_num_threads(threads)
    assert "skipped" not in result, result
    for part in (result, result["recipe"]):
        assert part["ours"]["params"] == part["eole"]["params"]  # biases where ours has them, no output bias
        assert part["training_ratio"] == pytest.approx(
            part["ours"]["target_tokens_per_s"] / part["eole"]["target_tokens_per_s"]
        )
    # the recipe's vocabulary reached both models: 40 more rows in each of the two embeddings and the output,
    # or in the one matrix all three share (speed.py --hour-sizes)
    grown = result["recipe"]["ours"]["params"] - result["ours"]["params"]
    assert grown == 40 * QUICK.d_model * (1 if tied else 3)
    assert eole_lines({"eole": result})[-1].startswith(f"{'train.py batches':26}")


@pytest.mark.skipif(not (JOEYNMT_VENV / "bin" / "python").exists(),
                    reason=f"no JoeyNMT environment in {JOEYNMT_VENV}")
def test_speed_times_joeynmt_tied_or_not_at_the_same_parameter_count():
    """speed.py --hour-sizes ties JoeyNMT's model as ours: each 2 × V × D parameters fewer, equal to ours."""
    from dataclasses import replace

    from bench.peers.speed_joeynmt import bench_joeynmt

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        untied, tied = (bench_joeynmt(replace(QUICK, tied=t), torch.device("cpu"), JOEYNMT_VENV)
                        for t in (False, True))  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert "skipped" not in untied and "skipped" not in tied, (untied, tied)
    for result in (untied, tied):
        assert result["ours"]["params"] == result["joeynmt"]["params"]
    assert untied["joeynmt"]["params"] - tied["joeynmt"]["params"] == 2 * QUICK.vocab_size * QUICK.d_model
    assert tied["greedy_ratio"] > 0  # decoding ran (untied on both sides)


def test_speed_eole_rows_put_both_kinds_of_batches_side_by_side():
    from bench.peers.speed_eole import eole_lines

    eole = {
        "ours": {"params": 10, "target_tokens_per_s": 1500.0},
        "eole": {"params": 10, "target_tokens_per_s": 1000.0}, "training_ratio": 1.5,
        "recipe": {"ours": {"params": 12, "target_tokens_per_s": 1100.0},
                   "eole": {"params": 12, "target_tokens_per_s": 1000.0}, "training_ratio": 1.1},
    }  # fmt: skip
    lines = eole_lines({"eole": eole})
    assert lines[3] == f"{'random batches':26}{1500:>11}{1000:>10}{'1.50x':>8}"
    assert lines[4] == f"{'train.py batches':26}{1100:>11}{1000:>10}{'1.10x':>8}"
    del eole["recipe"]
    assert eole_lines({"eole": eole})[4:] == [f"{'train.py batches':26}skipped: no --data given"]


def test_speed_joeynmt_rows_put_ours_with_and_without_the_cache_beside_joeynmt():
    from bench.peers.speed_joeynmt import joeynmt_lines

    joey = {
        "ours": {"params": 10, "target_tokens_per_s": 1200.0, "greedy_sentences_per_s": 300.0,
                 "uncached_greedy_sentences_per_s": 60.0},
        "joeynmt": {"params": 10, "target_tokens_per_s": 1000.0, "greedy_sentences_per_s": 50.0},
        "training_ratio": 1.2, "greedy_ratio": 6.0, "uncached_greedy_ratio": 1.2,
        "recipe": {"ours": {"target_tokens_per_s": 1100.0}, "joeynmt": {"target_tokens_per_s": 1000.0},
                   "training_ratio": 1.1},
    }  # fmt: skip
    lines = joeynmt_lines({"config": {"decode_steps": 16, "batch_size": 64}, "joeynmt": joey})
    assert lines[3] == f"{'random batches':26}{1200:>11}{1000:>10}{'1.20x':>8}"
    assert lines[4] == f"{'train.py batches':26}{1100:>11}{1000:>10}{'1.10x':>8}"
    assert lines[5].startswith("greedy decoding, 16 tokens, batch 64")
    assert lines[6:] == [
        f"{'ours, KV cache':26}{'300.0':>11}{'6.00x':>11}",
        f"{'ours, prefix re-run':26}{'60.0':>11}{'1.20x':>11}",
        f"{'JoeyNMT, prefix re-run':26}{'50.0':>11}{'1.00x':>11}",
    ]
    del joey["recipe"]
    assert joeynmt_lines({"config": {"decode_steps": 16, "batch_size": 64}, "joeynmt": joey})[4] == (
        f"{'train.py batches':26}skipped: no --data given"
    )
