"""Loading a trained run back from its checkpoint: model, tokenizers and data settings, with clear errors."""

import inspect
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from data.datamodule import TranslationDataModule
from training.module import TranslationModule


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable or not one of this project's; the message is one line."""


@dataclass
class LoadedRun:
    module: TranslationModule
    datamodule: TranslationDataModule
    global_step: int


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint's contents, loaded safely (``weights_only=True``) onto the CPU."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path}: not a checkpoint (not a PyTorch zip archive; truncated or another format)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as error:
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: corrupt or unsafe checkpoint ({reason})") from None
    required = (
        "state_dict", "hyper_parameters", "datamodule_hyper_parameters", TranslationDataModule.__qualname__
    )
    missing = [key for key in required if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: not a checkpoint of train.py (missing {', '.join(missing)})")
    return checkpoint


def _init_arguments(cls: type, saved: dict) -> dict:
    """The saved hyperparameters that ``cls.__init__`` takes (drops bookkeeping keys such as
    ``_instantiator``)."""
    accepted = inspect.signature(cls.__init__).parameters
    return {name: value for name, value in saved.items() if name in accepted}


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
    checkpoint = read_checkpoint(path)
    module = TranslationModule(**_init_arguments(TranslationModule, checkpoint["hyper_parameters"]))
    try:
        module.load_state_dict(state_dict if state_dict is not None else checkpoint["state_dict"])
    except RuntimeError as error:
        raise CheckpointError(
            f"{path}: weights do not fit the saved model settings ({str(error).splitlines()[0]})"
        )
    data_args = _init_arguments(TranslationDataModule, checkpoint["datamodule_hyper_parameters"])
    if data_path is not None:
        data_args["path"] = data_path
    if test_split is not None:
        data_args["test_split"] = test_split
    datamodule = TranslationDataModule(**data_args)
    datamodule.load_state_dict(checkpoint[TranslationDataModule.__qualname__])
    return LoadedRun(module.to(device).eval(), datamodule, int(checkpoint.get("global_step", 0)))


def last_checkpoints(path: str | Path, k: int) -> list[Path]:
    """The ``k`` checkpoints of the run that holds ``path`` with the highest training steps, newest first.

    Checkpoints saved at the same step (``last.ckpt`` beside its epoch checkpoint) count once.
    """
    if k < 1:
        raise CheckpointError(f"--average-last must be at least 1, got {k}")
    by_step: dict[int, Path] = {}
    for candidate in sorted(Path(path).parent.glob("*.ckpt")):
        step = int(read_checkpoint(candidate).get("global_step", -1))
        by_step.setdefault(step, candidate)
    steps = sorted(by_step, reverse=True)
    if len(steps) < k:
        raise CheckpointError(
            f"--average-last {k}: {Path(path).parent} holds checkpoints of only {len(steps)} different steps"
        )
    return [by_step[step] for step in steps[:k]]


def average_state_dicts(paths: list[Path]) -> dict:
    """Element-wise mean of the checkpoints' weights (Vaswani et al. 2017 §6.1; fairseq, OpenNMT)."""
    states = [read_checkpoint(p)["state_dict"] for p in paths]
    averaged = {}
    for name, value in states[0].items():
        if value.is_floating_point():
            averaged[name] = sum(state[name].double() for state in states).div(len(states)).to(value.dtype)
        else:
            averaged[name] = value
    return averaged
