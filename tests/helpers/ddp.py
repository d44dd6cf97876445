"""What the multi-process tests (tests/training/test_ddp.py) run inside train.py's processes: callbacks named
on the command line (``--trainer.callbacks+=tests.helpers.ddp.NAME``), and a validation of a checkpoint.

    python tests/helpers/ddp.py validate CHECKPOINT DEVICES EVAL_MAX_TOKENS OUT.json

The callbacks are set through environment variables, so that every process of a run reads the same.
"""

import json
import os
import sys
import time
from pathlib import Path

import lightning as L
import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

POISON_RANK, POISON_STEP, POISON_MARK = "DDP_TEST_POISON_RANK", "DDP_TEST_POISON_STEP", "DDP_TEST_POISON_MARK"
PROGRESS_DIR = "DDP_TEST_PROGRESS_DIR"


class PoisonOnRank(L.Callback):
    """Makes the loss of rank ``$DDP_TEST_POISON_RANK`` NaN from step ``$DDP_TEST_POISON_STEP`` on (a NaN
    weight), and writes the time it did so to ``$DDP_TEST_POISON_MARK``."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        rank, step = int(os.environ[POISON_RANK]), int(os.environ[POISON_STEP])
        if trainer.global_rank == rank and trainer.global_step == step:
            with torch.no_grad():
                pl_module.model.src_embed.weight.fill_(float("nan"))
            Path(os.environ[POISON_MARK]).write_text(str(time.time()))


class Progress(L.Callback):
    """Writes ``rank<R>.step`` (the optimiser steps done) into ``$DDP_TEST_PROGRESS_DIR`` after every step,
    appends the step and learning rate to ``rank<R>.lr``, and writes ``rank<R>.start`` (the step a run starts
    from) when training starts."""

    def _write(self, trainer, suffix: str) -> None:
        folder = Path(os.environ[PROGRESS_DIR])
        (folder / f"rank{trainer.global_rank}.{suffix}").write_text(str(trainer.global_step))

    def on_train_start(self, trainer, pl_module) -> None:
        self._write(trainer, "start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(trainer, "step")
        lr = trainer.optimizers[0].param_groups[0]["lr"]  # the rate of the next step
        with open(Path(os.environ[PROGRESS_DIR]) / f"rank{trainer.global_rank}.lr", "a") as f:
            f.write(f"{trainer.global_step} {lr!r}\n")


def validate(checkpoint: str, devices: int, eval_max_tokens: int, out: str) -> None:
    """Validate ``checkpoint`` with ``devices`` CPU processes (gloo DDP); rank 0 writes the metrics."""
    from training.checkpoints import load_run

    run = load_run(checkpoint)
    run.datamodule.eval_max_tokens = eval_max_tokens
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False,
    )
    metrics = trainer.validate(run.module, datamodule=run.datamodule, verbose=False)[0]
    if trainer.is_global_zero:
        Path(out).write_text(json.dumps({name: float(value) for name, value in metrics.items()}))


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "validate":
        raise SystemExit("usage: python tests/helpers/ddp.py validate CHECKPOINT DEVICES EVAL_MAX_TOKENS OUT")
    validate(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
