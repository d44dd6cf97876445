"""The learning-rate schedule: linear warm-up, then a decay over the run's steps or over its time budget.

``LearningRateSchedule.factor`` is the multiplier of the peak rate that ``TranslationModule`` gives
``torch.optim.lr_scheduler.LambdaLR``. How long the run is comes from its Trainer, read when needed:
``max_epochs``/``max_steps`` for "cosine", the ``Timer`` of ``--trainer.max_time`` for "cosine_time".
"""

import math
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import Timer

Schedule = Literal["inverse_sqrt", "cosine", "cosine_time", "constant"]


def cosine_decay(step: int, warmup: int, total: float) -> float:
    """Cosine decay from 1 at the end of warm-up (``step == warmup``) to 0 at ``step == total`` (1-based)."""
    if total <= warmup:
        return 0.0 if step > warmup else 1.0
    progress = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def time_budget_steps(step: int, time_fraction: float) -> float:
    """Total updates a run will make if it keeps the pace of its first ``step`` updates, which took
    ``time_fraction`` of its time budget; infinite before any time has passed."""
    if time_fraction <= 0.0:
        return math.inf
    return max(step / min(time_fraction, 1.0), float(step))


class LearningRateSchedule:
    """Warm-up for ``warmup_steps`` updates, then ``schedule``'s decay over the length of ``module``'s run.

    Args:
        schedule: after warm-up, "cosine" (to zero at the last step of ``max_epochs``/``max_steps``),
            "inverse_sqrt" (the paper's §5.3 decay), "cosine_time" (to zero when the time budget runs out,
            or at the last step of ``max_epochs``/``max_steps`` if that comes first) or "constant".
        warmup_steps: linear warm-up steps.
        module: the LightningModule being trained; its Trainer, attached later, is read only when the
            schedule needs the run's length (not during warm-up).
    """

    def __init__(self, schedule: Schedule, warmup_steps: int, module: L.LightningModule) -> None:
        self.schedule = schedule
        self.warmup_steps = warmup_steps
        self._module = module  # not a closure over it: the module stays picklable
        self._shared_pace: tuple[int, float] | None = None  # (step, rank 0's time fraction), see cosine_time

    def factor(self, step: int) -> float:
        """Multiplier of the peak learning rate at optimiser step ``step`` (0-based)."""
        warmup = self.warmup_steps
        step += 1
        if step <= warmup:
            return step / warmup
        if self.schedule == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / step)
        if self.schedule == "cosine":
            return cosine_decay(step, warmup, max(self.run_steps(), warmup + 1))
        if self.schedule == "cosine_time":
            return cosine_decay(step, warmup, self._shared_total_steps(step))
        return 1.0

    @property
    def _trainer(self) -> L.Trainer:
        return self._module.trainer

    def run_steps(self) -> int:
        """The updates ``max_epochs``/``max_steps`` allow: where "cosine" reaches zero."""
        total = self._trainer.estimated_stepping_batches
        if math.isinf(total):
            raise ValueError(
                "schedule='cosine' decays to zero at the last step: bound the run with --trainer.max_epochs "
                "or --trainer.max_steps, or pick --model.schedule inverse_sqrt or cosine_time"
            )
        return int(total)

    # -- the time-budgeted schedule --------------------------------------------------------------------------

    def timer(self) -> Timer:
        """The Trainer's ``Timer`` (``--trainer.max_time``), or a ``ValueError`` saying to set one."""
        timers = [c for c in self._trainer.callbacks if isinstance(c, Timer)]
        if not timers:
            raise ValueError(
                "schedule='cosine_time' decays over the time budget: give the Trainer max_time "
                "(--trainer.max_time, e.g. 00:01:00:00)"
            )
        return timers[0]

    def time_fraction(self) -> float:
        """Share of the time budget spent training so far: the Timer's elapsed training time (validation
        included, as max_time counts it; restored from the checkpoint on resume) over elapsed + remaining."""
        timer = self.timer()
        elapsed = timer.time_elapsed("train")
        remaining = timer.time_remaining("train")
        if remaining is None:
            return 0.0
        return elapsed / max(elapsed + remaining, 1e-9)

    def estimated_total_steps(self, step: int) -> float:
        """Updates the run will make in all, estimated after ``step`` updates: as many as fit into the time
        budget at the pace measured so far (``step`` over the fraction of the budget spent), or the
        ``max_epochs``/``max_steps`` bound if that comes first."""
        by_time = time_budget_steps(step, self.time_fraction())
        return min(by_time, float(self._trainer.estimated_stepping_batches))

    def _shared_total_steps(self, step: int) -> float:
        """``estimated_total_steps(step)``, the same on every rank of a distributed run.

        Each rank's Timer is its own clock; learning rates computed from them would differ, and the replicas
        drift apart. So rank 0's share of the budget is broadcast, every ``log_every_n_steps`` steps (a
        collective makes the host wait; the pace changes slowly), and between broadcasts the total follows
        from the pace then: ``step_then / fraction_then``.
        """
        trainer = self._trainer
        if getattr(trainer, "world_size", 1) <= 1:
            return self.estimated_total_steps(step)
        if self._shared_pace is None or step % trainer.log_every_n_steps == 0:
            fraction = trainer.strategy.broadcast(self.time_fraction(), src=0)
            self._shared_pace = (step, float(fraction))
        then, fraction = self._shared_pace
        by_time = time_budget_steps(then, fraction) if then > 0 else math.inf
        return min(max(by_time, float(step)), float(trainer.estimated_stepping_batches))
