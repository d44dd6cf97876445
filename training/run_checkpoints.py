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
``last.ckpt``. A checkpoint cut short (a full disk or a crash while it was written) is passed over with a
warning, so that the others still count.

Only ``torch`` and the standard library are imported here, so that the tab applies the rule without loading
Lightning.
"""

import errno
import logging
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

import torch

log = logging.getLogger(__name__)

LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"
CHECKPOINT_FOLDER = "checkpoints"


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable or not one of this project's; the message is one line."""


class CheckpointMissing(CheckpointError):
    """A checkpoint file that does not exist (any more: checkpoints rotate while a run trains)."""


class CheckpointDamaged(CheckpointError):
    """A checkpoint file cut short or corrupt, as a full disk or a crash while writing leaves one; the newest-
    weights rule passes over it (with a warning) rather than refuse the whole run."""


class CheckpointRefused(CheckpointError):
    """A checkpoint that resolves (through a symbolic link) to a file outside the folder it must stay in."""


def resolved(path: Path) -> Path:
    """``path`` with its symbolic links followed; CheckpointError naming the link that loops (``ln -s
    checkpoints checkpoints``), so that one run's loop is that run's error, not the caller's crash, and not
    taken for a missing folder. Every reader of a run's checkpoints words a loop here."""
    try:
        path.stat()  # ELOOP on every Python; Path.resolve returns such a path unresolved on 3.13
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _loop(path) from None
    try:
        return path.resolve()
    except RuntimeError:  # Path.resolve's answer to a loop on Python 3.11 and 3.12: one made since
        raise _loop(path) from None


def _loop(path: Path) -> CheckpointError:
    return CheckpointError(f"{_first_loop(path)}: a loop of symbolic links; refused")


def _first_loop(path: Path) -> Path:
    """The shortest leading part of ``path`` that the system cannot follow for a loop of links (ELOOP)."""
    for part in (*reversed(path.parents), path):
        try:
            part.stat()
        except OSError as error:
            if error.errno == errno.ELOOP:
                return part
    return path


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
    resolved(nested)  # a loop of links is named, where is_dir would answer False: "no checkpoint yet"
    return nested if nested.is_dir() else path


# A checkpoint's pickle holds its settings, the loops' state and the tokenizers as JSON: a few MiB even for
# large vocabularies. Its tensors are stored as they are (torch.save never compresses), so an archive that
# declares far more bytes than it holds is a zip bomb, not weights.
MAX_PICKLE_BYTES = 64 * 2**20

_NOT_REGULAR = {
    stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket",
}


def open_checkpoint(path: Path) -> BinaryIO:
    """``path`` opened for reading, at its start, once it is known to be a regular file holding a zip archive
    that expands to no more than a checkpoint can: checked before anything is unpickled or inflated.

    Raises FileNotFoundError if it is gone, CheckpointError (one line, naming ``path``) if it is refused.
    """
    # Checked before opening: opening a FIFO waits for a writer, and a device such as /dev/zero never ends.
    mode = os.stat(resolved(path)).st_mode  # a loop of links named as everywhere
    if not stat.S_ISREG(mode):
        kind = next((name for is_kind, name in _NOT_REGULAR.items() if is_kind(mode)), "a special file")
        raise CheckpointError(f"{path}: not a checkpoint file ({kind}, not a regular file)")
    # Non-blocking, so that a file swapped for a FIFO since the check cannot block (it reads as empty).
    file = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb")
    try:
        _check_archive(path, file)
    except BaseException:
        file.close()
        raise
    file.seek(0)
    return file


def _check_archive(path: Path, file: BinaryIO) -> None:
    """Refuse a file that is no zip archive (a legacy or truncated checkpoint), or whose entries declare
    more than :data:`MAX_PICKLE_BYTES` of pickle or far more bytes than the file holds."""
    if not zipfile.is_zipfile(file):
        raise CheckpointDamaged(
            f"{path}: not a checkpoint (not a PyTorch zip archive; truncated or another format)"
        )
    file.seek(0)
    with zipfile.ZipFile(file) as archive:
        entries = archive.infolist()
    pickled = sum(entry.file_size for entry in entries if entry.filename.rpartition("/")[2] == "data.pkl")
    if pickled > MAX_PICKLE_BYTES:
        raise CheckpointError(
            f"{path}: refused: its pickle (data.pkl) would expand to {_mib(pickled)}; "
            f"a checkpoint's holds at most {_mib(MAX_PICKLE_BYTES)}"
        )
    total, size = sum(entry.file_size for entry in entries), os.fstat(file.fileno()).st_size
    if total > size + MAX_PICKLE_BYTES:
        raise CheckpointError(
            f"{path}: refused: it would expand to {_mib(total)} from a file of {_mib(size)} (a zip bomb?)"
        )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


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
        with open_checkpoint(path):
            pass
        # By its path: mmap (tensors left unread) takes no open file. It was checked a moment ago.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except FileNotFoundError:
        raise CheckpointMissing(f"{path}: no such checkpoint file (removed while being read)") from None
    except pickle.UnpicklingError as error:  # a global weights_only refuses: not damage, a file to stop at
        raise CheckpointError(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointDamaged(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
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
        CheckpointError: a checkpoint is unsafe (it is named; pass a file to use another), or every one is
            damaged (a damaged one beside readable ones is skipped with a warning).
    """
    folder = checkpoint_folder(run)
    if not folder.is_dir():
        raise CheckpointMissing(f"{folder}: no such run folder or checkpoint")
    ranked, damaged = [], []
    for path in sorted(folder.glob("*.ckpt")):
        if inside is not None and not resolved(path).is_relative_to(inside):
            raise CheckpointRefused(f"{path} resolves to a file outside {inside}; refused")
        try:
            if not path.is_file():
                continue
            ranked.append((checkpoint_step(path), _preference(path), path.stat().st_mtime_ns, path))
        except (CheckpointMissing, FileNotFoundError):
            continue  # rotated away while we looked
        except CheckpointDamaged as error:  # a full disk cut one short: the others still hold weights
            log.warning("warning: skipping %s", error)
            damaged.append(path.name)
    last = next((entry for entry in ranked if entry[3].name == LAST_CHECKPOINT), None)
    if last is not None:  # an interrupt saved before the latest last.ckpt is from before a resume
        ranked = [e for e in ranked if e[3].name != INTERRUPTED_CHECKPOINT or e[2] > last[2]]
    if not ranked and damaged:
        raise CheckpointDamaged(f"no readable checkpoint in {folder} ({', '.join(damaged)} damaged)")
    if not ranked:
        raise CheckpointMissing(f"no checkpoint yet in {folder}")
    return max(ranked, key=lambda entry: entry[:3])[3]
