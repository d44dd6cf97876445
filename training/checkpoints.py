"""Loading a trained run back from its checkpoint: model, tokenizers and data settings, with clear errors."""

import inspect
import pickle
import types
import typing
import warnings
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from data.datamodule import TranslationDataModule
from data.special import SPECIALS
from model import TransformerConfig
from training.module import TranslationModule
from training.run_checkpoints import (
    CheckpointError,
    CheckpointMissing,
    checkpoint_step,
    first_line,
    open_checkpoint,
)
from training.upgrade import upgrade_state_dict

__all__ = ["CheckpointError", "CheckpointMissing", "LoadedRun", "load_run", "read_checkpoint"]


class UnknownSettingsWarning(UserWarning):
    """A checkpoint holds hyper-parameters this version of the code does not take (renamed or removed)."""


@dataclass
class LoadedRun:
    module: TranslationModule
    datamodule: TranslationDataModule
    global_step: int


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint's contents, loaded safely (``weights_only=True``) onto the CPU, with its weights under
    today's names (``training.upgrade``)."""
    path = Path(path)
    try:
        # Opened once: a checkpoint rotated away (deleted or replaced) after this still reads whole.
        with open_checkpoint(path) as file:
            checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointMissing(f"{path}: no such checkpoint file") from None
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(f"{path}: corrupt or unsafe checkpoint ({first_line(error)})") from None
    required = (
        "state_dict", "hyper_parameters", "datamodule_hyper_parameters", TranslationDataModule.__qualname__
    )
    missing = [key for key in required if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: not a checkpoint of train.py (missing {', '.join(missing)})")
    for key in ("hyper_parameters", "datamodule_hyper_parameters", TranslationDataModule.__qualname__):
        if not isinstance(checkpoint[key], dict):
            raise CheckpointError(
                f"{path}: malformed checkpoint ({key} is a {type(checkpoint[key]).__name__}, not a mapping)"
            )
    if isinstance(checkpoint["state_dict"], dict):  # else _check_weights_fit names what it is
        checkpoint["state_dict"] = upgrade_state_dict(checkpoint["state_dict"])
    return checkpoint


def _matches(value, annotation) -> bool:
    """Whether a saved hyper-parameter has the type its ``__init__`` argument is annotated with (the primitive
    types, ``Literal`` and unions of them; anything else is not judged)."""
    if annotation is inspect.Parameter.empty or annotation is typing.Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(value == choice and type(value) is type(choice) for choice in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True


def _init_arguments(cls: type, saved: dict, path: Path, what: str) -> dict:
    """The saved hyperparameters that ``cls.__init__`` takes, each checked against its annotation.

    Keys starting with ``_`` are Lightning's bookkeeping (``_instantiator``) and dropped. Any other key that
    ``__init__`` does not take is a setting renamed or removed since the checkpoint was saved: it is named in
    an ``UnknownSettingsWarning``, so that such a model never loads without a word.
    """
    parameters = inspect.signature(cls.__init__).parameters
    unknown = sorted(name for name in saved if not str(name).startswith("_") and name not in parameters)
    if unknown:
        warnings.warn(
            UnknownSettingsWarning(
                f"{path}: ignoring {what} this version does not know (renamed or removed?): "
                + ", ".join(f"{name}={saved[name]!r}" for name in unknown)
            ),
            stacklevel=3,
        )
    arguments = {name: value for name, value in saved.items() if name in parameters}
    for name, value in arguments.items():
        annotation = parameters[name].annotation
        if not _matches(value, annotation):
            expected = annotation.__name__ if isinstance(annotation, type) else str(annotation)
            expected = expected.replace("typing.", "")
            raise CheckpointError(f"{path}: malformed {what}: {name} is {value!r:.60}, expected {expected}")
    return arguments


def _check_weights_fit(path: Path, model_args: dict, weights) -> None:
    """Build the model the settings describe on the meta device (no memory) and compare its weights' names and
    shapes with the checkpoint's, so that settings that do not fit the weights (or would need terabytes) are
    a one-line error before anything is allocated."""
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"{path}: malformed checkpoint (state_dict is not a mapping of tensors)")
    try:
        with torch.device("meta"):
            expected = TranslationModule(**model_args).state_dict()
    except (RuntimeError, ValueError, TypeError) as error:  # e.g. num_heads that does not divide d_model
        raise CheckpointError(f"{path}: invalid model settings ({first_line(error)})") from None
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unexpected:
        names = ", ".join((missing or unexpected)[:3])
        raise CheckpointError(f"{path}: weights do not fit the saved model settings ("
                              f"{'missing' if missing else 'unexpected'} {names})")
    for name, value in expected.items():
        if value.shape != weights[name].shape:
            raise CheckpointError(
                f"{path}: weights do not fit the saved model settings ({name} has shape "
                f"{tuple(weights[name].shape)}, the settings make it {tuple(value.shape)})"
            )


def _check_tokenizers_fit(path: Path, module: TranslationModule, datamodule: TranslationDataModule) -> None:
    """Every id a tokenizer makes must have a row in the model's embedding, and the model must mean by pad,
    bos and eos the ids the tokenizers give them; else a one-line error, not an IndexError (or wrong words)
    at the first sentence."""
    config = module.model.config
    sides = (("source", datamodule.src_tokenizer, "src_vocab_size"),
             ("target", datamodule.tgt_tokenizer, "tgt_vocab_size"))
    for side, tokenizer, setting in sides:
        size, rows = tokenizer.vocab_size, getattr(config, setting)
        if size > rows:
            raise CheckpointError(
                f"{path}: tokenizers do not fit the model: the {side} tokenizer has {size} ids, "
                f"the model's embedding {rows} ({setting})"
            )
    for name in ("pad_id", "bos_id", "eos_id"):
        if getattr(config, name) != getattr(SPECIALS, name):
            raise CheckpointError(
                f"{path}: tokenizers do not fit the model: its {name} is {getattr(config, name)}, "
                f"the tokenizers' {getattr(SPECIALS, name)}"
            )


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
    model_args = _init_arguments(TranslationModule, checkpoint["hyper_parameters"], path, "model settings")
    weights = state_dict if state_dict is not None else checkpoint["state_dict"]
    _check_weights_fit(path, model_args, weights)
    try:
        module = TranslationModule(**model_args)
        module.load_state_dict(weights)
    except (RuntimeError, ValueError, TypeError) as error:
        raise CheckpointError(f"{path}: invalid model settings ({first_line(error)})") from None
    data_args = _init_arguments(
        TranslationDataModule, checkpoint["datamodule_hyper_parameters"], path, "data settings"
    )
    if data_args.get("gold_alignments") is None:  # older versions accepted (and ignored) these without it
        data_args.pop("gold_zero_based", None), data_args.pop("gold_direction", None)
    if data_path is not None:
        data_args["path"] = data_path
    if test_split is not None:
        data_args["test_split"] = test_split
    try:
        datamodule = TranslationDataModule(**data_args)
        datamodule.load_state_dict(checkpoint[TranslationDataModule.__qualname__])
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{path}: invalid data settings or tokenizers ({first_line(error)})") from None
    _check_tokenizers_fit(path, module, datamodule)
    step = checkpoint.get("global_step", 0)
    return LoadedRun(module.to(device).eval(), datamodule, step if isinstance(step, int) else 0)


def last_checkpoints(path: str | Path, k: int) -> list[Path]:
    """The ``k`` checkpoints of the run that holds ``path`` with the highest training steps, newest first.

    Checkpoints saved at the same step (``last.ckpt`` beside its epoch checkpoint) count once.
    """
    if k < 1:
        raise CheckpointError(f"--average-last must be at least 1, got {k}")
    by_step: dict[int, Path] = {}
    for candidate in sorted(Path(path).parent.glob("*.ckpt")):
        try:
            by_step.setdefault(checkpoint_step(candidate), candidate)
        except CheckpointMissing:
            continue  # rotated away by a run still training
    steps = sorted(by_step, reverse=True)
    if len(steps) < k:
        raise CheckpointError(
            f"--average-last {k}: {Path(path).parent} holds checkpoints of only {len(steps)} different steps"
        )
    return [by_step[step] for step in steps[:k]]


def _difference(first: dict, second: dict) -> str | None:
    """What makes the weights of two checkpoints impossible to average, in words; None if nothing."""
    architecture = [f.name for f in fields(TransformerConfig)]
    for name in architecture:
        ours, theirs = first["hyper_parameters"].get(name), second["hyper_parameters"].get(name)
        if ours != theirs:
            return f"{name} {ours!r} vs {theirs!r}"
    tokenizers = first[TranslationDataModule.__qualname__], second[TranslationDataModule.__qualname__]
    for side in ("src_tokenizer", "tgt_tokenizer"):
        if tokenizers[0].get(side) != tokenizers[1].get(side):
            return f"their {'source' if side == 'src_tokenizer' else 'target'} vocabularies differ"
    ours, theirs = first["state_dict"], second["state_dict"]
    if set(ours) != set(theirs):
        return f"weights {', '.join(sorted(set(ours) ^ set(theirs))[:3])} are in only one of them"
    for name, value in ours.items():
        if tuple(value.shape) != tuple(theirs[name].shape):
            return f"{name} has shape {tuple(value.shape)} vs {tuple(theirs[name].shape)}"
    return None


def average_state_dicts(paths: list[Path]) -> dict:
    """Element-wise mean of the checkpoints' weights (Vaswani et al. 2017 §6.1; fairseq, OpenNMT).

    Checkpoints of different architectures or vocabularies raise a CheckpointError naming both files and what
    differs.
    """
    checkpoints = [read_checkpoint(p) for p in paths]
    for path, checkpoint in zip(paths[1:], checkpoints[1:]):
        if (difference := _difference(checkpoints[0], checkpoint)) is not None:
            raise CheckpointError(f"cannot average {paths[0]} and {path}: {difference}")
    states = [checkpoint["state_dict"] for checkpoint in checkpoints]
    averaged = {}
    for name, value in states[0].items():
        if value.is_floating_point():
            averaged[name] = sum(state[name].double() for state in states).div(len(states)).to(value.dtype)
        else:
            averaged[name] = value
    return averaged
