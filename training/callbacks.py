"""Small callbacks for a safe run: a checkpoint on interruption, tokenizers saved beside the logs."""

from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from evaluation.run_checkpoints import INTERRUPTED_CHECKPOINT
from training.module import NonFiniteLossError


# Not OnExceptionCheckpoint: its mere presence makes every fit(ckpt_path=None) look for a "last" to resume.
class InterruptCheckpoint(L.Callback):
    """Save ``checkpoints/interrupted.ckpt`` when a run is stopped by Ctrl-C or SIGTERM.

    A run stopped by a non-finite loss saves nothing: its weights are already damaged, and the last good
    checkpoint (``last.ckpt``) is what to resume from.
    """

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        checkpoint = trainer.checkpoint_callback
        if isinstance(exception, NonFiniteLossError) or checkpoint is None or checkpoint.dirpath is None:
            return
        if trainer.global_step == 0:
            return  # nothing trained yet
        path = Path(checkpoint.dirpath) / INTERRUPTED_CHECKPOINT
        trainer.save_checkpoint(path)
        rank_zero_info(f"Saved {path}; continue with: python train.py --resume {path}")


class SaveTokenizers(L.Callback):
    """Write the run's tokenizers next to its config, so the run directory is self-contained."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.strategy.broadcast(trainer.log_dir)
        if trainer.is_global_zero and log_dir is not None and trainer.datamodule is not None:
            trainer.datamodule.save_tokenizers(log_dir)
