"""Distributed training proven on the CPU: train.py and validation in two gloo DDP processes.

The tests marked ``ddp`` start real processes (``--trainer.strategy ddp`` on the CPU uses gloo) and take
tens of seconds each (``python -m pytest -m "not ddp"`` skips them):

- validation in two processes gives the val/loss, BLEU and exact match of one process, on a split whose
  batches do not divide among the ranks (the sampler repeats one);
- a NaN loss on rank 1 stops both ranks, with one message and a non-zero exit;
- SIGTERM to the run saves interrupted.ckpt from both ranks, and --resume continues from it; the ranks
  share one learning rate under the time-budgeted schedule (one clock, rank 0's).

The others check, in this process, the pieces those runs rely on.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO, TINY_CONFIG
from tests.helpers import ddp
from training.checkpoint_io import FlagOnlySignalConnector

QUIET = ["--attention.every_n_epochs", "0", "--trainer.enable_model_summary", "false"]


def environment(**extra: str) -> dict:
    # One thread per process: two processes share the machine's cores, as bench/cpu_parallel.py runs them.
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def train_command(save_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(REPO / "train.py"), "--config", TINY_CONFIG,
        "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.logger.init_args.save_dir", str(save_dir), "--trainer.default_root_dir", str(save_dir),
        *QUIET, *extra,
    ]


def odd_batch_budget(datamodule) -> int:
    """An eval_max_tokens that cuts the validation split into an odd number (>= 3) of batches."""
    for budget in range(200, 40, -8):
        datamodule.eval_max_tokens = budget
        count = len(datamodule.val_dataloader())
        if count >= 3 and count % 2 == 1:
            return budget
    raise AssertionError("no budget gives an odd number of validation batches")


@pytest.mark.ddp
def test_two_processes_validate_as_one(tiny_run, tmp_path):
    from training.checkpoints import load_run

    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    datamodule = load_run(checkpoint).datamodule
    budget = odd_batch_budget(datamodule)
    results = {}
    for devices in (1, 2):
        out = tmp_path / f"metrics{devices}.json"
        done = subprocess.run(
            [sys.executable, str(REPO / "tests" / "helpers" / "ddp.py"), "validate", str(checkpoint),
             str(devices), str(budget), str(out)],
            cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=600, check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results[devices] = json.loads(out.read_text())
    one, two = results[1], results[2]
    assert {"val/loss", "val/ppl", "val/bleu", "val/exact_match"} <= one.keys()
    assert two["val/loss"] == pytest.approx(one["val/loss"], rel=1e-6)
    assert two["val/ppl"] == pytest.approx(one["val/ppl"], rel=1e-6)
    assert two["val/bleu"] == one["val/bleu"]
    assert two["val/exact_match"] == one["val/exact_match"]


@pytest.mark.ddp
def test_a_nan_on_rank_1_stops_both_ranks_with_one_message(tmp_path):
    mark = tmp_path / "poisoned"
    env = environment(**{
        ddp.POISON_RANK: "1", ddp.POISON_STEP: "2", ddp.POISON_MARK: str(mark),
    })
    command = train_command(
        tmp_path, "--trainer.max_epochs", "50", "--trainer.log_every_n_steps", "1000",
        "--trainer.callbacks+=tests.helpers.ddp.PoisonOnRank",
    )
    # The output goes to pipes that every rank holds: run() returns only when both ranks have exited.
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    ended = time.time()
    output = done.stdout + done.stderr
    assert mark.is_file(), output[-3000:]
    assert ended - float(mark.read_text()) < 60  # not a collective timeout (30 minutes by default)
    assert done.returncode != 0
    # The check before the first validation (step 3, the end of epoch 0) found it, not a log step.
    messages = [line for line in output.splitlines() if "training loss is" in line]
    expected = (
        "error: training loss is nan at step 2 on rank 1; stopping. The last good checkpoint is kept; "
        "try a lower --model.lr or more --model.warmup_steps"
    )
    assert messages == [expected]
    checkpoints = tmp_path / "tiny" / "version_0" / "checkpoints"
    assert not (checkpoints / "interrupted.ckpt").exists()
    for saved in checkpoints.glob("*.ckpt"):  # nothing saved after the NaN
        state = torch.load(saved, map_location="cpu", weights_only=True)["state_dict"]
        assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point()), saved


def read_step(path: Path) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):  # not written yet, or being written
        return -1


@pytest.mark.ddp
def test_sigterm_saves_an_interrupt_checkpoint_from_both_ranks_and_resume_continues(tmp_path):
    progress = tmp_path / "progress"
    progress.mkdir()
    env = environment(**{ddp.PROGRESS_DIR: str(progress)})
    # The time-budgeted schedule past its warm-up, the budget (not the epochs) ending the run: each rank has
    # its own clock, and all must use rank 0's.
    options = ["--trainer.max_epochs", "1000", "--model.decode_every_n_epochs", "0",
               "--model.schedule", "cosine_time", "--trainer.max_time", "00:00:01:00",
               "--model.warmup_steps", "2", "--trainer.callbacks+=tests.helpers.ddp.Progress"]
    run = subprocess.Popen(train_command(tmp_path, *options), cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 400
        while read_step(progress / "rank0.step") < 4 and run.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        assert run.poll() is None, "the run ended before it was signalled"
        run.send_signal(signal.SIGTERM)  # to rank 0, the process the user started; it tells the other
        output, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    interrupted = tmp_path / "tiny" / "version_0" / "checkpoints" / "interrupted.ckpt"
    assert interrupted.is_file(), output[-3000:]
    assert "Saved" in output and "interrupted.ckpt" in output
    # 128 + 15, the shell's convention for a run stopped by SIGTERM.
    assert run.returncode == 128 + signal.SIGTERM, output[-3000:]
    stopped_at = torch.load(interrupted, map_location="cpu", weights_only=True)["global_step"]
    assert stopped_at >= 4

    # The run's own config.yaml holds every option (the callback included).
    resume = [sys.executable, str(REPO / "train.py"), "--resume", str(tmp_path / "tiny" / "version_0")]
    done = subprocess.run(resume, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_step(progress / "rank0.start") == read_step(progress / "rank1.start") == stopped_at
    last = torch.load(tmp_path / "tiny" / "version_0" / "checkpoints" / "last.ckpt", map_location="cpu",
                      weights_only=True)
    assert last["global_step"] > stopped_at  # it trained on, until the budget ran out
    steps = [[line.split() for line in (progress / f"rank{rank}.lr").read_text().splitlines()]
             for rank in (0, 1)]
    assert [int(step) for step, _ in steps[0]] == list(range(1, last["global_step"] + 1))  # each step once
    assert steps[0] == steps[1]  # one learning rate on both ranks, step by step, before and after the resume
    assert len({lr for _, lr in steps[0][2:]}) > 2  # past warm-up it changes: a clock matters


# The interrupt checkpoint's rule for several processes (only SIGTERM saves) is checked in
# test_checkpoint_io.py:
# test_the_interrupt_checkpoint_is_saved_on_a_signal_only_and_where_every_rank_saves_it.


def test_the_sigterm_handler_sets_the_flag_and_forwards_the_signal_without_a_collective(monkeypatch):
    def no_collective(*args, **kwargs):
        raise AssertionError("a collective call inside the signal handler")

    monkeypatch.setattr(torch.distributed, "broadcast", no_collective)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    killed = []
    launcher = SimpleNamespace(kill=killed.append)
    trainer = SimpleNamespace(global_rank=0, local_rank=0, world_size=2,
                              strategy=SimpleNamespace(launcher=launcher))
    connector = FlagOnlySignalConnector(trainer)
    connector._sigterm_notifier_fn(signal.SIGTERM, None)
    connector._sigterm_notifier_fn(signal.SIGTERM, None)  # a second signal is not forwarded again
    assert connector.received_sigterm
    assert killed == [signal.SIGTERM]
