"""Which checkpoint of a run holds its newest weights: the one rule shared by ``train.py --resume``,
``evaluate.py`` given a run folder, and the ATTENTION tab's translations.

A run folder (``runs/<name>/version_<n>``) keeps its checkpoints in ``checkpoints/``: ``last.ckpt`` (written
with every epoch checkpoint), ``epoch<e>-step<s>.ckpt`` (the latest few epochs), ``best-*.ckpt`` (the best
validation loss) and, after a run was stopped by Ctrl-C or SIGTERM, ``interrupted.ckpt``.

The rule (:func:`newest_checkpoint`): **the checkpoint with the most training steps**, as the files record
them (``global_step``), not as their names or times say. An ``interrupted.ckpt`` written before
``last.ckpt`` is stale (the run was resumed and saved again since) and never counts; one written after it
wins a tie of steps (a run stopped before the first batch of an epoch: the interrupt holds where the next
epoch stands), then ``last.ckpt``, then the epoch and best checkpoints. So ``interrupted.ckpt`` is chosen only
when it is newer than ``last.ckpt`` and holds at least as many steps as any other checkpoint: a run stopped by
Ctrl-C or SIGTERM continues where it stopped (as the command it printed says), any other run from
``last.ckpt``.

Only ``torch`` and the standard library are imported here, so that the tab applies the rule without loading
Lightning.
"""

import os
import pickle
import zipfile
from pathlib import Path

import torch

LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"
CHECKPOINT_FOLDER = "checkpoints"


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable or not one of this project's; the message is one line."""


class CheckpointMissing(CheckpointError):
    """A checkpoint file that does not exist (any more: checkpoints rotate while a run trains)."""


class CheckpointRefused(CheckpointError):
    """A checkpoint that resolves (through a symbolic link) to a file outside the folder it must stay in."""


def resolved(path: Path) -> Path:
    """``path`` with its symbolic links followed; CheckpointError naming it if they loop (``ln -s checkpoints
    checkpoints``), so that one run's loop is that run's error, not the caller's crash."""
    try:
        return path.resolve()
    except RuntimeError:  # Path.resolve's answer to a loop on Python 3.11 and 3.12 (3.13 returns the path)
        raise CheckpointError(f"{path}: a loop of symbolic links; refused") from None


def first_line(error: BaseException, limit: int = 200) -> str:
    """The line of an exception's message that says what went wrong (at most ``limit`` characters): the
    global that ``torch.load(weights_only=True)`` refused where it names one, else the first line, else the
    exception's type."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return next((line for line in lines if "GLOBAL" in line), lines[0])[:limit]


def checkpoint_folder(path: str | os.PathLike[str]) -> Path:
    """The folder of checkpoints that ``path`` names: a run folder (its ``checkpoints/``) or the folder
    itself."""
    path = Path(path)
    nested = path / CHECKPOINT_FOLDER
    return nested if nested.is_dir() else path


# (path, st_mtime_ns, st_size) -> global_step: /runs asks for every open tab every 30 s.
_STEPS: dict[tuple[str, int, int], int] = {}


def checkpoint_step(path: Path) -> int:
    """The ``global_step`` a checkpoint was saved at, read safely (``weights_only``; tensors are not read).

    Raises CheckpointMissing if the file is gone, CheckpointError if it is no readable checkpoint.
    """
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key in _STEPS:
            return _STEPS[key]
        if not zipfile.is_zipfile(path):
            raise CheckpointError(
                f"{path}: not a checkpoint (not a PyTorch zip archive; truncated or another format)"
            )
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except FileNotFoundError:
        raise CheckpointMissing(f"{path}: no such checkpoint file (removed while being read)") from None
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{path}: not a checkpoint of train.py (no integer global_step)")
    if len(_STEPS) > 4096:  # a long-lived TensorBoard watching runs whose checkpoints rotate
        _STEPS.clear()
    _STEPS[key] = step
    return step


def _preference(path: Path) -> int:
    """Tie-break between checkpoints of the same step: the interrupt's (never a stale one here), then
    last.ckpt, then the epoch and best ones."""
    return {INTERRUPTED_CHECKPOINT: 2, LAST_CHECKPOINT: 1}.get(path.name, 0)


def newest_checkpoint(run: str | os.PathLike[str], *, inside: Path | None = None) -> Path:
    """The checkpoint of ``run`` (a run folder or its ``checkpoints/`` folder) that holds its newest weights,
    by the rule of this module's docstring.

    Files that disappear while they are read (checkpoints rotate during training) are left out. ``inside``, if
    given, is a resolved folder no checkpoint may lie outside of: a file that resolves elsewhere (a symbolic
    link) raises CheckpointRefused before it is opened.

    Raises:
        CheckpointMissing: the folder holds no checkpoint.
        CheckpointRefused: a checkpoint resolves outside ``inside``.
        CheckpointError: a checkpoint is unreadable (it is named; pass a file to use another).
    """
    folder = checkpoint_folder(run)
    if not folder.is_dir():
        raise CheckpointMissing(f"{folder}: no such run folder or checkpoint")
    ranked = []
    for path in sorted(folder.glob("*.ckpt")):
        if inside is not None and not resolved(path).is_relative_to(inside):
            raise CheckpointRefused(f"{path} resolves to a file outside {inside}; refused")
        try:
            if not path.is_file():
                continue
            ranked.append((checkpoint_step(path), _preference(path), path.stat().st_mtime_ns, path))
        except (CheckpointMissing, FileNotFoundError):
            continue  # rotated away while we looked
    last = next((entry for entry in ranked if entry[3].name == LAST_CHECKPOINT), None)
    if last is not None:  # an interrupt saved before the latest last.ckpt is from before a resume
        ranked = [e for e in ranked if e[3].name != INTERRUPTED_CHECKPOINT or e[2] > last[2]]
    if not ranked:
        raise CheckpointMissing(f"no checkpoint yet in {folder}")
    return max(ranked, key=lambda entry: entry[:3])[3]
