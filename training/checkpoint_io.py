"""A training run's own checkpoints: each written whole or not at all, one written when Ctrl-C or SIGTERM
stops the run, and the run resumed from one as if it had not stopped. Which checkpoint to resume from, and
reading one safely, is ``training.checkpoints``; the data loader's place in its epoch is
``data.batching.ResumableDataLoader``'s (Lightning saves it), dropout's seed the step
(``TranslationModule.on_train_batch_start``).
"""

import logging
import os
import random
import signal
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins import TorchCheckpointIO
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector
from lightning.pytorch.utilities.exceptions import SIGTERMException

from model import TransformerConfig
from training.checkpoints import (
    CHECKPOINT_FOLDER,
    INTERRUPTED_CHECKPOINT,
    CheckpointError,
    first_line,
    load_checkpoint,
    upgrade_state_dict,
)

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made atomic on a local disk: a checkpoint is written to a hidden file
    in its own folder and takes its name (``os.replace``) only once it is whole and on the disk, so a full
    disk or a crash while saving leaves the previous ``last.ckpt`` or ``best-*.ckpt`` as it was. (Lightning's
    own save copies from the system's temporary folder, which a full disk cuts short.) A failed save is a
    one-line CheckpointError naming the file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        # Hidden and not ending in .ckpt: no reader of the folder takes it for a checkpoint while it grows.
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(partial, "wb") as file:
                    torch.save(checkpoint, file)
                    file.flush()
                    os.fsync(file.fileno())  # on the disk before it takes the name
                os.replace(partial, path)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
        except (OSError, RuntimeError) as error:
            why = _why_the_write_failed(error)
            if why is None:
                raise
            raise CheckpointError(
                f"{path}: cannot save the checkpoint ({why}); the checkpoints saved before are kept"
            ) from None


def _why_the_write_failed(error: OSError | RuntimeError) -> str | None:
    """Why writing a checkpoint failed, in a few words; None if ``error`` is no failure to write (a bug).

    torch.save reports an OSError of the file it writes into (ENOSPC: a full disk) as a RuntimeError,
    "[enforce fail at inline_container.cc:672] . unexpected pos ...", raised while the OSError is being
    handled; and a writer of its own that fails as "PytorchStreamWriter failed writing file ...".
    """
    if isinstance(error, RuntimeError) and isinstance(error.__context__, OSError):
        error = error.__context__
    if isinstance(error, OSError):
        return error.strerror or str(error)
    if "inline_container" in str(error) or "PytorchStreamWriter" in str(error):
        return f"the write stopped short: {first_line(error)}"
    return None


def check_save_folders(trainer: L.Trainer) -> None:
    """Stop with a one-line ``SystemExit`` naming the folder if a checkpoint callback of ``trainer`` could
    not write its checkpoints (the nearest existing folder on their path is read-only or a file), before
    anything trains: otherwise the first save, an epoch later, is a traceback."""
    for callback in trainer.checkpoint_callbacks:
        folder = Path(callback.dirpath or _default_folder(trainer))
        existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
        if not existing.is_dir():
            problem = "is not a folder"
        elif not os.access(existing, os.W_OK | os.X_OK):
            problem = "is not writable"
        else:
            continue
        raise SystemExit(f"error: cannot save checkpoints in {folder}: {existing} {problem}")


def _default_folder(trainer: L.Trainer) -> Path:
    """Where a ModelCheckpoint without a dirpath saves: ``checkpoints/`` of the logger's run folder."""
    # The logger's own log_dir, not trainer.log_dir, which is a collective call across ranks.
    root = getattr(trainer.logger, "log_dir", None) or trainer.default_root_dir
    return Path(root) / CHECKPOINT_FOLDER


def check_resume_checkpoint(path: Path, module: torch.nn.Module) -> int:
    """Load the weights of checkpoint ``path`` into ``module``, or stop with a one-line ``SystemExit`` if
    ``training.checkpoints.load_checkpoint`` refuses it or it does not fit ``module`` (say, the ``last.ckpt``
    of another run): so that ``--resume`` fails before it writes anything into the run's directory.

    Returns:
        the checkpoint's ``global_step``: how many optimiser steps its run had taken.
    """
    try:
        # Through the checks evaluate.py and the tab read with: a file that is no zip archive (the run's
        # config.yaml), or one that would inflate far beyond a checkpoint (a zip bomb), is refused unread.
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:  # its message starts with the path
        raise SystemExit(f"error: --resume {error}") from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise SystemExit(f"error: --resume {path}: not a training checkpoint (it holds no state_dict)")
    try:  # as Lightning will load it (``TranslationModule.on_load_checkpoint``), only sooner
        module.load_state_dict(upgrade_state_dict(state))
    except RuntimeError as error:
        # What differs, where the two runs' hyperparameters tell; else the first mismatch torch names.
        differences = architecture_differences(checkpoint.get("hyper_parameters") or {},
                                               getattr(module, "hparams", {}))
        why = "; ".join(differences) or f"it belongs to another run: {first_line(error, limit=300)}"
        raise SystemExit(
            f"error: --resume {path}: its weights do not fit the model of the run's config: {why}"
        ) from None
    return int(checkpoint.get("global_step", 0))


def architecture_differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What makes a checkpoint's weights not fit the model now, from the two runs' hyperparameters: a
    vocabulary of other sizes (the data's, linked into the model), then each architecture option given another
    value (``TransformerConfig``'s fields but the dropouts, which change no weight); empty if they agree."""
    vocab = ("src_vocab_size", "tgt_vocab_size")
    differences = []
    (src, tgt), (old_src, old_tgt) = ([hparams.get(name) for name in vocab] for hparams in (now, saved))
    if (src, tgt) != (old_src, old_tgt):
        differences.append(
            f"the vocabulary has {src} source and {tgt} target tokens now, {old_src} and {old_tgt} in the "
            "checkpoint: the corpus or the tokenizer settings changed since it was saved"
        )
    for field in fields(TransformerConfig):
        named = field.name not in (*vocab, "dropout", "attention_dropout") and field.name in saved
        if named and saved[field.name] != now.get(field.name):
            differences.append(
                f"--model.{field.name} is {now.get(field.name)} now, {saved[field.name]} in the checkpoint"
            )
    return differences


def rng_states() -> dict[str, Any]:
    """The states of torch's (CPU and CUDA), numpy's and Python's global generators, as tensors, tuples and
    ints only, so that a checkpoint holding them still loads under ``torch.load(weights_only=True)``."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore :func:`rng_states`; the CUDA states only onto as many devices as were saved."""
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = states.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


class ExactResume(L.Callback):
    """What an exact resume needs that Lightning's checkpoint leaves out, restored just before the first
    training batch of a resumed run:

    * the global random generators' states (kept in every checkpoint), so that anything drawing random numbers
      while training draws what an uninterrupted run would. Dropout does not depend on them: the module seeds
      it from the run's seed and the step, which it reads at ``on_train_start`` (so not restored there);
    * the step that logged values are labelled with: the optimiser step, which Lightning's restart can count
      one too many (resuming zero batches into an epoch, it takes the place for one right after validation);
    * the progress bar's start of the epoch: Lightning calls no ``on_train_epoch_start`` in an epoch it
      restarts in the middle, so the bar would count that epoch's batches without a total ("Training: 3/?");
    * the checkpoint callbacks' record of their files (best, top k, last) in the run's folder as it is named
      now (:func:`rebase_checkpoint_paths`).
    """

    def __init__(self) -> None:
        self._resuming = False
        self._rng: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return rng_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._rng = state_dict

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._resuming = True
        # Every callback's on_load_checkpoint runs before any callback's load_state_dict reads its state.
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key)
            if state is not None and callback.dirpath is not None:
                rebase_checkpoint_paths(state, callback.dirpath)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._resuming:
            return
        self._resuming = False
        if self._rng is not None:
            set_rng_states(self._rng)
            self._rng = None
        if trainer.fit_loop.restarted_mid_epoch and trainer.progress_bar_callback is not None:
            trainer.progress_bar_callback.on_train_epoch_start(trainer, pl_module)
        # One optimiser step per stepping batch: the two counts are equal in an uninterrupted run.
        trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step


def rebase_checkpoint_paths(state: dict[str, Any], dirpath: str) -> None:
    """Move the files that a ``ModelCheckpoint``'s saved ``state`` keeps track of (its best, its top k,
    its last) into ``dirpath``, its folder now. A resumed run writes into the folder it was resumed from,
    which may have been moved or be named another way (absolute, or from another working directory);
    Lightning drops this record when the folder's name differs, and then saves ``last-v1.ckpt`` beside
    ``last.ckpt``, keeps a second best and names the best at the old place."""
    old = state.get("dirpath")
    if old is None or old == dirpath:
        return

    def moved(path: str | None) -> str | None:
        return os.path.join(dirpath, os.path.basename(path)) if path else path

    state["best_k_models"] = {moved(path): score for path, score in state.get("best_k_models", {}).items()}
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        if key in state:
            state[key] = moved(state[key])
    state["dirpath"] = dirpath


# Not OnExceptionCheckpoint: its mere presence makes every fit(ckpt_path=None) look for a "last" to resume.
class InterruptCheckpoint(L.Callback):
    """Save ``checkpoints/interrupted.ckpt`` when Ctrl-C (SIGINT) or SIGTERM stops a run, and only then:
    after any other exception (a non-finite loss, out of memory, a bug) the weights may be damaged, and
    ``last.ckpt`` is what to resume from. ``signal`` records which signal stopped the run, for its exit status
    (128 + its number, as a shell reports it). A batch in flight when the signal came is not counted
    (:func:`forget_batch_in_flight`), so that a resumed run draws it again.
    """

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.signal = signal.SIGINT
        elif isinstance(exception, SIGTERMException):
            self.signal = signal.SIGTERM
        else:
            return
        checkpoint = trainer.checkpoint_callback
        if checkpoint is None or checkpoint.dirpath is None:
            return
        if trainer.global_step == 0:
            message = "Interrupted before the first training step: no checkpoint saved."
        elif trainer.world_size > 1 and self.signal != signal.SIGTERM:
            # Saving is collective (rank 0 writes, every rank waits at a barrier). Only SIGTERM reaches every
            # process at the same step (Lightning shares it at each step); a Ctrl-C may have reached this rank
            # alone, and a save here would wait for ranks that never come.
            message = (
                f"no {INTERRUPTED_CHECKPOINT} in a run of {trainer.world_size} processes stopped by Ctrl-C: "
                "only SIGTERM (kill PID) stops every process at the same step"
            )
        else:
            forget_batch_in_flight(trainer)
            path = Path(checkpoint.dirpath) / INTERRUPTED_CHECKPOINT
            trainer.save_checkpoint(path)
            message = f"Saved {path}; continue with: python train.py --resume {path}"
        if trainer.is_global_zero:
            print(message, file=sys.stderr, flush=True)


def forget_batch_in_flight(trainer: L.Trainer) -> None:
    """Put the training loop's counters and the training data's position back to the end of the last batch
    that was trained on, if a batch had been taken and its training step had not finished.

    Lightning would resume such a state one step off: it counts the batch as begun and numbers the next logged
    step one higher, while the data loader would skip the batch.
    """
    progress = trainer.fit_loop.epoch_loop.batch_progress
    if progress.current.ready == progress.current.processed:
        return  # between batches, or after the step (in on_train_batch_end): Lightning resumes these exactly
    for counts in (progress.current, progress.total):
        counts.ready = counts.started = counts.processed
    progress.is_last_batch = False  # the batch not trained on may have been the epoch's last
    loader = trainer.train_dataloader
    if callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None)):
        loader.load_state_dict({**loader.state_dict(), "yielded": progress.current.processed})


class FlagOnlySignalConnector(_SignalConnector):
    """Lightning's signal connector with a SIGTERM handler that makes no collective call.

    Lightning's own handler broadcasts a tensor from inside the signal handler, wherever the main thread
    happens to be: that broadcast can pair with another collective (the other rank's gradient all-reduce)
    and every process waits forever. This one forwards the signal to the worker processes and sets
    ``trainer.received_sigterm``, which Lightning's loop broadcasts from rank 0 at the start of every step:
    every process stops at the same step, and reaches the interrupt checkpoint's collective save.
    """

    def _sigterm_notifier_fn(self, signum: int, _: FrameType | None) -> None:
        log.info(f"[rank: {self.trainer.global_rank}] Received SIGTERM: {signum}")
        if not self.received_sigterm:
            launcher = self.trainer.strategy.launcher
            if launcher is not None:
                launcher.kill(signum)  # the worker processes this one started, if any
        self.received_sigterm = True


def install_sigterm_handling(trainer: L.Trainer) -> None:
    """Give ``trainer`` the SIGTERM handling above; it takes effect when ``fit`` registers its handlers."""
    trainer._signal_connector = FlagOnlySignalConnector(trainer)
