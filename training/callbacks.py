"""Small callbacks for a run: tokenizers saved beside the logs, each epoch's own length, progress that a
redirected log shows too. The interrupt checkpoint is ``training.checkpoint_io.InterruptCheckpoint``."""

import datetime
import sys
import time
from typing import TextIO

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar


class SaveTokenizers(L.Callback):
    """Write the run's tokenizers next to its config, so the run directory is self-contained."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.strategy.broadcast(trainer.log_dir)
        if trainer.is_global_zero and log_dir is not None and trainer.datamodule is not None:
            trainer.datamodule.save_tokenizers(log_dir)


class EpochLength(L.Callback):
    """Each epoch's own number of batches: for the progress bar, for when validation runs and for when the
    epoch ends.

    The token-bucket sampler cuts each epoch's batches from a fresh shuffle, so their number moves by a batch
    or two between epochs (Tatoeba's: 287 to 289). Lightning counts the training batches once, when it sets
    up the loader, and keeps that count three times: as the epoch's length (``max_batches``), as the batch
    after which it validates (``val_check_batch``), and as the loader's limit, which ends every epoch after at
    most that many batches (its fetcher marks the last batch at ``min(len(loader), limit)``). An epoch shorter
    than the first never reached its validation check; a longer one was cut at the first's length, losing its
    last batches, and so never reached it either (a run of 287 batches in its first epoch, 288 in its second,
    stepped 287 in both and did not validate in the second). All three are set here from the loader's length
    in this epoch: Lightning has set the sampler's epoch when ``on_train_epoch_start`` runs, and its fetcher
    starts the epoch after it.

    A resumed run is counted while the loader still stands at its first epoch, before it gets the saved
    epoch, and its fetcher starts before any hook; in an epoch it restarts mid-way Lightning calls no
    ``on_train_epoch_start``. So a resumed run is counted again at ``on_train_start``, when the loader is in
    the saved epoch, and the fetcher is told that epoch's length.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.fit_loop.restarting:
            self._count(trainer)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._count(trainer)

    @staticmethod
    def _count(trainer: L.Trainer) -> None:
        limit, interval = trainer.limit_train_batches, trainer.val_check_interval
        loader, fit_loop = trainer.train_dataloader, trainer.fit_loop
        whole = isinstance(limit, float) and limit == 1.0 and isinstance(interval, float) and interval == 1.0
        if trainer.fast_dev_run or not whole or loader is None or not hasattr(loader, "__len__"):
            return  # a limit (an int 1 is one batch), or validation within epochs, sets its own counts
        batches = len(loader)
        fit_loop.max_batches = batches  # what trainer.num_training_batches reads
        trainer.val_check_batch = batches
        # Lightning keeps no public handle on these two: the loader's limit, which the fetcher reads when it
        # starts an epoch, and the fetcher, which a resumed run started before the loader had its epoch.
        if fit_loop._combined_loader is not None:
            fit_loop._combined_loader.limits = [batches]
        if fit_loop._data_fetcher is not None and fit_loop._data_fetcher.length is not None:
            fit_loop._data_fetcher.length = batches


class LineProgress(ProgressBar):
    """Progress as plain lines on standard output, for a log that is not a terminal.

    Lightning's bars redraw one line in place: the rich one (Lightning's choice whenever rich is installed)
    writes nothing to a file, tqdm's a single line of carriage returns. Here, while training, a line at most
    every ``every_seconds`` seconds (epoch, batch of the epoch, step, batches per second, the progress-bar
    metrics such as the loss); a line at each epoch's end and after each validation (its ``val/`` metrics);
    and one when training ends. Epochs are counted from 0, as in checkpoint names.
    """

    def __init__(self, every_seconds: float = 30.0) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self._enabled = True
        self._started = self._last_time = 0.0
        self._last_step = self._epoch_start_step = 0
        self._epoch_started = 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = self._last_time = time.monotonic()
        self._last_step = trainer.global_step

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_started = time.monotonic()
        self._epoch_start_step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        now = time.monotonic()
        if not self._enabled or now - self._last_time < self.every_seconds:
            return
        rate = (trainer.global_step - self._last_step) / max(now - self._last_time, 1e-9)
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        self.print(f"epoch {trainer.current_epoch}, batch {batch_idx + 1}/{self.total_train_batches}, "
                   f"step {trainer.global_step}: {rate:.1f} batches/s" + _listed(metrics))
        self._last_time, self._last_step = now, trainer.global_step

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._enabled:
            return
        batches = trainer.global_step - self._epoch_start_step
        rate = batches / max(time.monotonic() - self._epoch_started, 1e-9)
        self.print(f"epoch {trainer.current_epoch} done: {batches} batches, step {trainer.global_step}, "
                   f"{rate:.1f} batches/s")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._enabled or trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        where = f"validation at step {trainer.global_step} (epoch {trainer.current_epoch})"
        self.print(where + _listed(metrics))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._enabled:
            elapsed = datetime.timedelta(seconds=round(time.monotonic() - self._started))
            self.print(f"training ended at step {trainer.global_step}, after {elapsed}")

    def print(self, *args, **kwargs) -> None:
        print(*args, **kwargs, flush=True)


def _listed(metrics: dict) -> str:
    """``, name value, name value`` (numbers to 4 significant digits), or nothing."""
    return "".join(f", {name} {value:.4g}" if isinstance(value, (int, float)) else f", {name} {value}"
                   for name, value in metrics.items())


def plain_progress_unless_terminal(trainer: L.Trainer, stream: TextIO | None = None) -> None:
    """Put ``LineProgress`` in place of Lightning's own progress bar when ``stream`` (standard output by
    default) is not a terminal: a log redirected to a file, a pipe, a job scheduler's output. A Jupyter
    notebook's output (not a terminal, but it draws both bars), no bar (``--trainer.enable_progress_bar
    false``) and a bar of one's own class are left alone."""
    stream = sys.stdout if stream is None else stream
    bar = trainer.progress_bar_callback
    if type(bar) not in (RichProgressBar, TQDMProgressBar) or getattr(stream, "isatty", lambda: False)():
        return
    if type(stream).__module__.startswith("ipykernel."):
        return
    trainer.callbacks[trainer.callbacks.index(bar)] = LineProgress()
