"""Small callbacks for a safe run: a checkpoint on interruption, tokenizers saved beside the logs."""

from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from training.module import NonFiniteLossError

INTERRUPTED_CHECKPOINT = "interrupted.ckpt"


# Not OnExceptionCheckpoint: its mere presence makes every fit(ckpt_path=None) look for a "last" to resume.
class InterruptCheckpoint(L.Callback):
    """Save ``checkpoints/interrupted.ckpt`` when a run is stopped by Ctrl-C or SIGTERM.

    A run stopped by a non-finite loss saves nothing: its weights are already damaged, and the last good
    checkpoint (``last.ckpt``) is what to resume from. A run of several processes saves only when stopped by
    SIGTERM, which every process handles at the same step; saving is collective, and Ctrl-C or an error may
    reach one process alone.
    """

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        checkpoint = trainer.checkpoint_callback
        if isinstance(exception, NonFiniteLossError) or checkpoint is None or checkpoint.dirpath is None:
            return
        if trainer.global_step == 0:
            return  # nothing trained yet
        if trainer.world_size > 1 and not isinstance(exception, SIGTERMException):
            # Saving is collective (rank 0 writes, every rank waits at a barrier). Only SIGTERM reaches every
            # process at the same step (Lightning shares it at each step); a Ctrl-C or an error may have
            # reached this rank alone, and a save here would wait for ranks that never come.
            rank_zero_warn(
                f"no {INTERRUPTED_CHECKPOINT} in a run of {trainer.world_size} processes stopped by "
                f"{type(exception).__name__}: only SIGTERM (kill PID) stops every process at the same step"
            )
            return
        path = Path(checkpoint.dirpath) / INTERRUPTED_CHECKPOINT
        trainer.save_checkpoint(path)
        rank_zero_info(f"Saved {path}; continue with: python train.py --resume {path}")


class SaveTokenizers(L.Callback):
    """Write the run's tokenizers next to its config, so the run directory is self-contained."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.strategy.broadcast(trainer.log_dir)
        if trainer.is_global_zero and log_dir is not None and trainer.datamodule is not None:
            trainer.datamodule.save_tokenizers(log_dir)
