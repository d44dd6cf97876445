"""A run's checkpoints: which one holds its newest weights, read safely, brought to today's names, and the
trained run rebuilt from one, with one-line errors.

A run folder (``runs/<name>/version_<n>``) keeps its checkpoints in ``checkpoints/``: ``last.ckpt`` (written
with every epoch checkpoint), ``epoch<e>-step<s>.ckpt`` (the latest few epochs), ``best-*.ckpt`` (the best
validation loss) and, after a run was stopped by Ctrl-C or SIGTERM, ``interrupted.ckpt``.

The rule for a run's newest weights (:func:`newest_checkpoint`), shared by ``train.py --resume``,
``evaluate.py`` given a run folder, and the ATTENTION tab's translations: **the checkpoint with the most
training steps**, as the files record them (``global_step``), not as their names or times say. An
``interrupted.ckpt`` written before ``last.ckpt`` is stale (the run was resumed and saved again since) and
never counts; one written after it wins a tie of steps (a run stopped before the first batch of an epoch: the
interrupt holds where the next epoch stands), then ``last.ckpt``, then the epoch and best checkpoints. So a
run stopped by Ctrl-C or SIGTERM continues where it stopped (as the command it printed says), any other run
from ``last.ckpt``. A checkpoint cut short (a full disk or a crash while it was written) is passed over with a
warning, so that the others still count.

Every path that loads weights (:func:`read_checkpoint`, ``--resume``'s check, Lightning's own restore in
``TranslationModule.on_load_checkpoint``) brings those of earlier versions to today's names with
:func:`upgrade_state_dict`: the model knows only today's. Lightning is imported only to read a checkpoint's
settings, so that the tab finds a run's newest weights without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import inspect
import logging
import os
import pickle
import re
import stat
import typing
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from data.special import SPECIALS

if typing.TYPE_CHECKING:
    from data.datamodule import TranslationDataModule
    from training.module import TranslationModule

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


class UnknownSettingsWarning(UserWarning):
    """A checkpoint holds hyper-parameters this version of the code does not take (renamed or removed)."""


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
    """The error for a loop of links: the shortest leading part of ``path`` that the system cannot follow."""
    for part in (*reversed(path.parents), path):
        try:
            part.stat()
        except OSError as error:
            if error.errno == errno.ELOOP:
                path = part
                break
    return CheckpointError(f"{path}: a loop of symbolic links; refused")


def first_line(error: BaseException, limit: int = 200) -> str:
    """The line of a library's error message that says what went wrong (at most ``limit`` characters): the
    global that ``torch.load(weights_only=True)`` refused where it names one; else the first line, or the
    second where the first is a heading (``load_state_dict``'s "Error(s) in loading state_dict for ...:");
    else the exception's type."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    said = lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0]
    return next((line for line in lines if "GLOBAL" in line), said)[:limit]


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


def load_checkpoint(path: Path, *, mmap: bool = False) -> typing.Any:
    """What the file at ``path`` holds, loaded safely (``weights_only=True``) onto the CPU through
    :func:`open_checkpoint`; with ``mmap`` its tensors are left unread.

    Raises CheckpointMissing if the file is gone, CheckpointDamaged if it is cut short or corrupt, and
    CheckpointError if it is refused or holds a global that ``weights_only`` refuses (not damage: a file to
    stop at).
    """
    try:
        with open_checkpoint(path) as file:  # a checkpoint rotated away after this still reads whole
            # mmap takes the file by its path, checked a moment ago.
            return torch.load(path if mmap else file, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise CheckpointMissing(f"{path}: no such checkpoint file") from None
    except pickle.UnpicklingError as error:
        raise CheckpointError(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointDamaged(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None


def checkpoint_step(path: Path) -> int:
    """The ``global_step`` a checkpoint was saved at (its tensors are not read); errors as
    :func:`load_checkpoint`'s, and CheckpointError if it records no step."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise CheckpointMissing(f"{path}: no such checkpoint file") from None
    except OSError as error:
        raise CheckpointDamaged(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
    return _step(path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=4096)  # by the file's time and size: /runs asks for every open tab every 30 s
def _step(path: Path, mtime_ns: int, size: int) -> int:
    checkpoint = load_checkpoint(path, mmap=True)
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{path}: not a checkpoint of train.py (no integer global_step)")
    return step


def newest_checkpoint(run: str | os.PathLike[str], *, inside: Path | None = None) -> Path:
    """The checkpoint of ``run`` (a run folder or its ``checkpoints/`` folder) that holds its newest weights,
    by the rule of this module's docstring.

    Files that disappear while they are read (checkpoints rotate during training) are left out. ``inside``, if
    given, is a resolved folder no checkpoint may lie outside of: a file that resolves elsewhere (a symbolic
    link) raises CheckpointRefused before it is opened.

    Raises:
        CheckpointMissing: the folder holds no checkpoint.
        CheckpointRefused: a checkpoint resolves outside ``inside``.
        CheckpointError: a checkpoint is unsafe or no file (a folder; it is named: pass a file to use
            another), or every one is damaged (a damaged one beside readable ones is skipped with a warning).
    """
    folder = Path(run) / CHECKPOINT_FOLDER
    resolved(folder)  # a loop of links is named, where is_dir would answer False: "no checkpoint yet"
    folder = folder if folder.is_dir() else Path(run)
    if not folder.is_dir():
        raise CheckpointMissing(f"{folder}: no such run folder or checkpoint")
    ranked, damaged = [], []
    for path in sorted(folder.glob("*.ckpt")):
        if inside is not None and not resolved(path).is_relative_to(inside):
            raise CheckpointRefused(f"{path} resolves to a file outside {inside}; refused")
        # Tie-break between checkpoints of the same step: the interrupt's, then last.ckpt, then the others.
        preference = {INTERRUPTED_CHECKPOINT: 2, LAST_CHECKPOINT: 1}.get(path.name, 0)
        try:  # a *.ckpt that is a folder is refused by its name, not passed over as if the run had none
            ranked.append((checkpoint_step(path), preference, path.stat().st_mtime_ns, path))
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


# Checkpoints written before the sublayers were spelled out in the layers' forward name a layer's norms
# ``<block>.norm``: (stack, old block) → today's norm attribute of the layer.
OLD_NORM_NAMES = {
    ("encoder_layers", "attn_block"): "self_attn_norm",
    ("encoder_layers", "ff_block"): "feed_forward_norm",
    ("decoder_layers", "self_block"): "self_attn_norm",
    ("decoder_layers", "cross_block"): "cross_attn_norm",
    ("decoder_layers", "ff_block"): "feed_forward_norm",
}
_OLD_NORM = re.compile(r"(?<![^.])(encoder_layers|decoder_layers)\.(\d+)\.(\w+_block)\.norm\.")


def upgrade_state_dict(state_dict: dict) -> dict:
    """The weights of ``state_dict`` under today's names (a new dict, in the same order); today's names and
    anything not a parameter name of an earlier version pass unchanged, whatever prefix they carry
    (``model.`` in a training checkpoint)."""

    def today(match: re.Match) -> str:
        stack, layer, block = match.groups()
        norm = OLD_NORM_NAMES.get((stack, block))
        return match[0] if norm is None else f"{stack}.{layer}.{norm}."

    return {_OLD_NORM.sub(today, key, count=1) if isinstance(key, str) else key: value
            for key, value in state_dict.items()}


# The data module's options that earlier versions took flat and that are grouped now (CHANGELOG.md): old name,
# (group, field). A checkpoint or a run's config.yaml saved with the old names is read under the new ones.
RENAMED_DATA_OPTIONS = {
    **{f"toy_{field}": ("toy", field) for field in (
        "train_size", "val_size", "test_size", "split", "max_train_words", "phenomena", "script")},
    **{f"gold_{field}": ("gold", field) for field in ("sentences", "alignments", "zero_based", "direction")},
}


def upgrade_data_settings(saved: dict) -> dict:
    """The data module's saved settings under today's names (a new dict): the flat ``toy_*`` and ``gold_*``
    of earlier versions grouped as ``toy`` and ``gold`` (:data:`RENAMED_DATA_OPTIONS`); today's unchanged."""
    upgraded = dict(saved)
    for name, (group, field) in RENAMED_DATA_OPTIONS.items():
        if name in saved and group not in saved:
            upgraded.setdefault(group, {})[field] = upgraded.pop(name)
    gold = upgraded.get("gold")
    if isinstance(gold, dict) and "gold" not in saved and gold.get("alignments") is None:
        # older versions accepted (and ignored) these without the links; today's refuse them
        gold.pop("zero_based", None), gold.pop("direction", None)
    return upgraded


def _system() -> tuple[type[TranslationModule], type[TranslationDataModule]]:
    """The classes a checkpoint rebuilds, imported only when one is read: they bring Lightning."""
    from data.datamodule import TranslationDataModule
    from training.module import TranslationModule

    return TranslationModule, TranslationDataModule


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint's contents, loaded safely (``weights_only=True``) onto the CPU, with its weights under
    today's names (:func:`upgrade_state_dict`)."""
    path = Path(path)
    checkpoint = load_checkpoint(path)
    mappings = ("hyper_parameters", "datamodule_hyper_parameters", _system()[1].__qualname__)
    missing = [key for key in ("state_dict", *mappings)
               if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: not a checkpoint of train.py (missing {', '.join(missing)})")
    for key in mappings:
        if not isinstance(checkpoint[key], dict):
            raise CheckpointError(
                f"{path}: malformed checkpoint ({key} is a {type(checkpoint[key]).__name__}, not a mapping)"
            )
    if isinstance(checkpoint["state_dict"], dict):  # else load_run names what it is
        checkpoint["state_dict"] = upgrade_state_dict(checkpoint["state_dict"])
    return checkpoint


def _settings(cls: type, saved: dict, path: Path, what: str) -> dict:
    """The saved settings that ``cls.__init__`` takes. Keys starting with ``_`` are Lightning's bookkeeping
    (``_instantiator``); any other key ``__init__`` does not take is a setting renamed or removed since the
    checkpoint was saved: it is named in an ``UnknownSettingsWarning``, so that such a model never loads
    without a word."""
    parameters = inspect.signature(cls.__init__).parameters
    unknown = sorted(str(name) for name in saved if not str(name).startswith("_") and name not in parameters)
    if unknown:
        warnings.warn(
            UnknownSettingsWarning(
                f"{path}: ignoring {what} this version does not know (renamed or removed?): "
                + ", ".join(f"{name}={saved[name]!r}" for name in unknown)
            ),
            stacklevel=3,
        )
    return {name: value for name, value in saved.items() if name in parameters}


def _build(cls: type, arguments: dict, path: Path, what: str):
    """``cls`` built as Lightning's ``load_from_checkpoint`` builds a class trained with LightningCLI
    (``instantiate_module``: jsonargparse checks each setting against its type and makes a group such as the
    data's ``toy`` its dataclass); a one-line CheckpointError naming ``path`` if a setting is refused."""
    from lightning.pytorch.cli import instantiate_module

    hints = typing.get_type_hints(cls.__init__)
    for name, value in arguments.items():  # a group given as a string would be read as a config file's path
        kinds = (hints.get(name), *typing.get_args(hints.get(name)))
        groups = [kind for kind in kinds if dataclasses.is_dataclass(kind)]
        if groups and not (value is None or isinstance(value, dict | groups[0])):
            raise CheckpointError(f"{path}: malformed {what}: {name} is {value!r}, expected a mapping")
    try:
        return instantiate_module(cls, arguments)
    except argparse.ArgumentError as error:  # 'Parser key "module.d_model":\n  Expected a <class 'int'>. ...'
        said = " ".join(str(error).replace('"module.', '"').split())[:300]
        raise CheckpointError(f"{path}: malformed {what}: {said}") from None
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{path}: invalid {what} ({first_line(error)})") from None


def _check_tokenizers_fit(path: Path, module: TranslationModule, datamodule: TranslationDataModule) -> None:
    """Every id a tokenizer makes must have a row in the model's embedding, and the model must mean by pad,
    bos and eos the ids the tokenizers give them; else a one-line error, not an IndexError (or wrong words)
    at the first sentence."""
    config = module.model.config
    for side, tokenizer, setting in (("source", datamodule.src_tokenizer, "src_vocab_size"),
                                     ("target", datamodule.tgt_tokenizer, "tgt_vocab_size")):
        if tokenizer.vocab_size > getattr(config, setting):
            raise CheckpointError(
                f"{path}: tokenizers do not fit the model: the {side} tokenizer has {tokenizer.vocab_size} "
                f"ids, the model's embedding {getattr(config, setting)} ({setting})"
            )
    for name in ("pad_id", "bos_id", "eos_id"):
        if getattr(config, name) != getattr(SPECIALS, name):
            raise CheckpointError(
                f"{path}: tokenizers do not fit the model: its {name} is {getattr(config, name)}, "
                f"the tokenizers' {getattr(SPECIALS, name)}"
            )


@dataclass
class LoadedRun:
    module: TranslationModule
    datamodule: TranslationDataModule
    global_step: int


# Not load_from_checkpoint: a torch.load per class, no averaged weights; here one checked read builds both.
def load_run(
    path: str | Path,
    *,
    state_dict: dict | None = None,
    data_path: str | None = None,
    test_split: str | None = None,
    device: str = "cpu",
) -> LoadedRun:
    """Rebuild the trained model and its data module from a checkpoint.

    Tokenizers come from the checkpoint (never retrained). ``state_dict`` replaces the checkpoint's weights
    (e.g. an average of several checkpoints); ``data_path`` replaces the corpus folder recorded at training
    time.
    """
    path = Path(path)
    checkpoint = read_checkpoint(path)
    module_class, data_class = _system()
    model_args = _settings(module_class, checkpoint["hyper_parameters"], path, "model settings")
    weights = state_dict if state_dict is not None else checkpoint["state_dict"]
    with torch.device("meta"):  # the weights' names and shapes held against the settings, nothing allocated
        skeleton = _build(module_class, model_args, path, "model settings")
    try:
        skeleton.load_state_dict(weights, assign=True)
    except (RuntimeError, TypeError) as error:
        raise CheckpointError(
            f"{path}: weights do not fit the saved model settings ({first_line(error)})"
        ) from None
    module = _build(module_class, model_args, path, "model settings")  # as typed for the skeleton
    module.load_state_dict(weights)
    data_args = _settings(data_class, upgrade_data_settings(checkpoint["datamodule_hyper_parameters"]), path,
                          "data settings")
    data_args |= {name: value for name, value in (("path", data_path), ("test_split", test_split))
                  if value is not None}
    datamodule = _build(data_class, data_args, path, "data settings")
    try:
        datamodule.load_state_dict(checkpoint[data_class.__qualname__])
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{path}: invalid tokenizers ({first_line(error)})") from None
    _check_tokenizers_fit(path, module, datamodule)
    step = checkpoint.get("global_step", 0)
    return LoadedRun(module.to(device).eval(), datamodule, step if isinstance(step, int) else 0)
