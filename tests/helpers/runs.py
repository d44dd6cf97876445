"""A tiny run on the command line and its files, for the tests of train.py and of resuming."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, TINY_CONFIG, read_events
from training.module import TranslationModule


def loss_curve(run_dir):
    return {s.step: s.value for s in read_events(run_dir).Scalars("train/loss")}


def val_curve(run_dir):
    return {s.step: s.value for s in read_events(run_dir).Scalars("val/loss")}


def run_cli(tmp_path, *args):
    command = [sys.executable, str(REPO / "train.py"), "--config", TINY_CONFIG, *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)


def copy_run(run, save_dir):
    """A copy of a finished tiny run under ``save_dir``, where train_tiny(save_dir, "--resume", ...) logs."""
    return Path(shutil.copytree(run, save_dir / "tiny" / run.name))


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def interrupt_at(monkeypatch, step: int, how: str) -> None:
    """Stop the next run at training step ``step``: Ctrl-C in the middle of it (a batch in flight), or a
    SIGTERM, after which Lightning stops once the step is done."""
    original = TranslationModule.training_step

    def interrupted(self, batch, batch_idx):
        if self.global_step == step:
            if how == "sigint":
                raise KeyboardInterrupt
            if not self.trainer.received_sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TranslationModule, "training_step", interrupted)
