"""Writing checkpoints: each one whole or not at all, into a save folder checked before training starts."""

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins import TorchCheckpointIO

from training.run_checkpoints import CHECKPOINT_FOLDER, CheckpointError, first_line


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made atomic on a local disk: a checkpoint is written to a hidden file
    in its own folder and takes its name (``os.replace``) only once it is whole and on the disk.

    So a full disk or a crash while saving leaves the previous ``last.ckpt`` or ``best-*.ckpt`` as it was,
    never a truncated one. (Lightning's own save writes into the system's temporary folder and copies the file
    over when that is another file system, which a full disk cuts short.) A failed save is a one-line
    CheckpointError naming the file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(checkpoint, path)
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


def _write_atomically(checkpoint: dict[str, Any], path: Path) -> None:
    # Hidden and not ending in .ckpt: no reader of the folder takes it for a checkpoint while it grows.
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(partial, "wb") as file:
            torch.save(checkpoint, file)
            file.flush()
            os.fsync(file.fileno())  # on the disk before it takes the name
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


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
