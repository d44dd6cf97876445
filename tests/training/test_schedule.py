"""The time-budgeted schedule (``--model.schedule cosine_time``): the learning rate as a function of the
elapsed share of ``--trainer.max_time``, the estimate of the total updates behind it, and runs cut by the
budget."""

import math
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Timer

from tests.conftest import read_events, train_tiny
from training.module import TranslationModule
from training.schedule import cosine_decay, time_budget_steps

WARMUP, BUDGET = 10, 100.0  # steps, seconds


def test_cosine_decay_runs_from_one_after_warm_up_to_zero_at_the_total():
    assert cosine_decay(10, 10, 110) == 1.0
    assert cosine_decay(60, 10, 110) == pytest.approx(0.5)
    assert cosine_decay(110, 10, 110) == pytest.approx(0.0, abs=1e-12)
    assert cosine_decay(200, 10, 110) == pytest.approx(0.0, abs=1e-12)  # past the end: stays at zero
    assert cosine_decay(50, 10, math.inf) == 1.0  # no estimate yet: no decay


def test_total_steps_are_estimated_from_the_pace_so_far():
    assert time_budget_steps(100, 0.5) == 200  # half the budget took 100 updates: 200 in all
    assert time_budget_steps(30, 0.1) == pytest.approx(300)
    assert time_budget_steps(100, 1.0) == 100
    assert time_budget_steps(100, 1.3) == 100  # over budget (the last step ran late): no more updates
    assert time_budget_steps(5, 0.0) == math.inf


def time_module(elapsed: float, *, stepping_batches: float = math.inf) -> TranslationModule:
    """A cosine_time module whose (fake) Trainer has spent ``elapsed`` of BUDGET seconds training."""
    module = TranslationModule(
        src_vocab_size=11, tgt_vocab_size=11, d_model=8, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, d_ff=16, lr=1e-3, warmup_steps=WARMUP, schedule="cosine_time",
    )
    timer = Timer(duration=timedelta(seconds=BUDGET))
    timer._offset = elapsed  # as restored from a checkpoint; the training clock is not running
    module._trainer = SimpleNamespace(callbacks=[timer], estimated_stepping_batches=stepping_batches)
    return module


def factor(module: TranslationModule, step: int) -> float:
    return module.lr_schedule.factor(step - 1)  # the scheduler counts steps from 0


def test_warm_up_is_in_steps_whatever_the_time():
    for elapsed in (0.0, 50.0, 99.0):
        assert factor(time_module(elapsed), 5) == pytest.approx(0.5)
        assert factor(time_module(elapsed), WARMUP) == pytest.approx(1.0)


def test_learning_rate_factor_follows_the_elapsed_share_of_the_budget():
    # 100 updates in half the budget: 200 updates in all, of which 190 decay.
    middle = factor(time_module(50.0), 100)
    assert middle == pytest.approx(0.5 * (1 + math.cos(math.pi * 90 / 190)))
    assert 0.4 < middle < 0.6
    # Twice as fast a machine: the same share of the time, twice the updates, the same point of the decay.
    assert factor(time_module(50.0), 200) == pytest.approx(0.5 * (1 + math.cos(math.pi * 190 / 390)))
    assert factor(time_module(25.0), 50) > factor(time_module(50.0), 100) > factor(time_module(75.0), 150)
    assert factor(time_module(99.5), 199) < 1e-4  # the end of the budget: decayed
    assert factor(time_module(100.0), 200) == pytest.approx(0.0, abs=1e-12)


def test_max_epochs_ending_first_bounds_the_schedule():
    module = time_module(50.0, stepping_batches=150)  # the epochs end after 150 updates, before the budget
    assert module.lr_schedule.estimated_total_steps(100) == 150
    assert factor(module, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi * 90 / 140)))
    assert factor(module, 150) == pytest.approx(0.0, abs=1e-12)


def test_the_estimate_reaches_the_optimizer():
    module = time_module(50.0)
    assert module.lr_schedule.estimated_total_steps(100) == pytest.approx(200)
    optimizers = module.configure_optimizers()
    optimizer, scheduler = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    for _ in range(100):
        optimizer.step()
        scheduler.step()
    # After 100 steps the scheduler set step 101's rate: 101 updates in half the budget, 202 in all.
    expected = 1e-3 * cosine_decay(101, WARMUP, 202)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([expected, expected])


def test_without_a_time_budget_the_schedule_says_what_to_set():
    module = time_module(0.0)
    module._trainer.callbacks = []  # no max_time: Lightning adds no Timer
    with pytest.raises(ValueError, match=r"max_time \(--trainer.max_time"):
        factor(module, WARMUP + 1)


QUIET = ["--attention.every_n_epochs", "0", "--model.decode_every_n_epochs", "0",
         "--trainer.log_every_n_steps", "1"]


def test_a_run_cut_by_its_time_budget_ends_with_the_learning_rate_decayed(tmp_path):
    run = train_tiny(
        tmp_path, *QUIET, "--model.schedule", "cosine_time", "--model.warmup_steps", "2",
        "--trainer.max_time", "00:00:00:06", "--trainer.max_epochs", "1000",
        "--trainer.limit_val_batches", "0",
    )
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] < 999  # the budget, not the epochs, ended it
    assert last["global_step"] > 2
    peak = last["hyper_parameters"]["lr"]
    assert max(last["lr_schedulers"][0]["_last_lr"]) < 0.05 * peak
    fractions = [s.value for s in read_events(run).Scalars("train/time_fraction")]
    assert len(fractions) >= 2 and fractions == sorted(fractions) and fractions[-1] < 1.5


def test_resume_continues_the_clock_stored_in_the_checkpoint(tmp_path):
    options = [*QUIET, "--model.schedule", "cosine_time", "--trainer.max_time", "00:00:10:00"]
    first = train_tiny(tmp_path, *options, "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "0")
    saved = torch.load(first / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    stored = saved["callbacks"]["Timer"]["time_elapsed"]["train"]
    assert stored > 0
    train_tiny(tmp_path, *options, "--resume", str(first), "--trainer.max_epochs", "2",
               "--trainer.limit_val_batches", "0")
    fractions = {s.step: s.value for s in read_events(first).Scalars("train/time_fraction")}
    resumed = [fractions[step] for step in sorted(fractions) if step >= saved["global_step"]]
    assert resumed and resumed[0] >= stored / 600  # the clock went on from the stored elapsed time
    final = torch.load(first / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert final["callbacks"]["Timer"]["time_elapsed"]["train"] > stored


class RankZeroClock:
    """Broadcast as two ranks see it: rank 0's value reaches both; the calls are counted."""

    def __init__(self):
        self.sent: list[float] = []  # what rank 0 sent, one entry per broadcast
        self.calls = 0

    def broadcast(self, obj, src=0):
        assert src == 0
        self.calls += 1
        if len(self.sent) < (self.calls + 1) // 2:  # the first rank to call a broadcast stands for rank 0
            self.sent.append(obj)
        return self.sent[(self.calls - 1) // 2]


def test_every_rank_follows_rank_0s_clock():
    """Two ranks whose Timers disagree (50 s and 70 s of 100) get the same learning rate, that of rank 0's
    clock, and they ask for it only every log_every_n_steps steps."""
    clock = RankZeroClock()
    ranks = [time_module(50.0), time_module(70.0)]
    for module in ranks:
        module._trainer.world_size, module._trainer.strategy = 2, clock
        module._trainer.log_every_n_steps = 20
    factors = []
    for step in range(95, 141):
        factors.append([factor(module, step) for module in ranks])  # each rank at the same step in turn
    assert all(rank0 == rank1 for rank0, rank1 in factors)
    # Step 95 asked for the clock (the first time), then steps 100, 120, 140: each rank once per broadcast.
    assert clock.calls == 2 * 4
    assert factors[0][0] == pytest.approx(cosine_decay(95, WARMUP, 95 / 0.5))  # rank 0's pace: 50 of 100 s
    assert factors[0][0] != pytest.approx(cosine_decay(95, WARMUP, 95 / 0.7))  # rank 1's would differ
    one = time_module(70.0)  # a single process keeps reading its own clock at every step
    assert factor(one, 95) == pytest.approx(cosine_decay(95, WARMUP, 95 / 0.7))
