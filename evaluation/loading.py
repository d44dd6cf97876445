"""A checkpoint loaded for evaluation: its weights averaged over the run's last checkpoints if asked
(``--average-last``), its unknown settings returned as one-line warnings, and refused when its weights hold
NaN or when ``--test-split`` names a choice its data does not have. Problems are one-line
``CheckpointError``s and ``InputError``s, which evaluate.py prints.
"""

import warnings
from dataclasses import fields
from pathlib import Path

import torch

from data.datamodule import TranslationDataModule
from evaluation.inputs import InputError
from model import TransformerConfig
from training.checkpoints import (
    CheckpointError,
    CheckpointMissing,
    LoadedRun,
    UnknownSettingsWarning,
    checkpoint_step,
    load_run,
    newest_checkpoint,
    read_checkpoint,
)
from training.module import TranslationModule


def choose_checkpoint(checkpoint: str) -> str:
    """The checkpoint file to load: a run folder given instead becomes the file of its newest weights."""
    if not Path(checkpoint).is_dir():
        return checkpoint
    if Path(checkpoint).suffix == ".ckpt":  # not a run folder to look into: "no checkpoint yet" would mislead
        raise CheckpointError(f"{checkpoint}: not a checkpoint file (a folder, not a regular file)")
    return str(newest_checkpoint(checkpoint))


def load(
    checkpoint: str,
    *,
    average_last: int | None = None,
    data_path: str | None = None,
    test_split: str | None = None,
    device: torch.device,
) -> tuple[LoadedRun, list[str]]:
    """The run of ``checkpoint``, its weights averaged over its last ``average_last`` checkpoints, and the
    lines to tell the user: which checkpoints were averaged, and a warning for each of the checkpoint's
    unknown settings."""
    notes = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownSettingsWarning)
        state_dict = None
        if average_last:
            paths = last_checkpoints(checkpoint, average_last)
            state_dict = average_state_dicts(paths)
            notes.append(f"averaging {len(paths)} checkpoints: {', '.join(p.name for p in paths)}")
        run = load_run(
            checkpoint, state_dict=state_dict, data_path=data_path, test_split=test_split, device=str(device)
        )
    for warning in caught:
        if issubclass(warning.category, UnknownSettingsWarning):
            notes.append(f"warning: {warning.message}")
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    check_finite(run, checkpoint)
    check_test_split(run, test_split)
    return run, notes


def last_checkpoints(path: str | Path, k: int) -> list[Path]:
    """The ``k`` checkpoints of the run that holds ``path`` with the highest training steps, newest first.

    Checkpoints saved at the same step (``last.ckpt`` beside its epoch checkpoint) count once; ``k`` is at
    least 1 (evaluate.py's option refuses less).
    """
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
    for name in (field.name for field in fields(TransformerConfig)):
        ours, theirs = first["hyper_parameters"].get(name), second["hyper_parameters"].get(name)
        if ours != theirs:
            return f"{name} {ours!r} vs {theirs!r}"
    data_state = TranslationDataModule.__qualname__
    tokenizers = first[data_state], second[data_state]
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


def check_finite(run: LoadedRun, checkpoint: str) -> None:
    """A diverged run's weights hold NaN: its translations, scores and attention maps would be noise (and the
    maps cannot be drawn), so none are made."""
    for name, value in run.module.state_dict().items():
        if name.endswith("output_bias"):  # -inf: a token never predicted (an imported model's padding)
            value = value.masked_fill(value.isneginf(), 0.0)
        if value.is_floating_point() and not value.isfinite().all():
            raise CheckpointError(
                f"{checkpoint}: {name} holds NaN or infinite weights (the run diverged?); use an earlier "
                "checkpoint"
            )


def check_test_split(run: LoadedRun, test_split: str | None) -> None:
    """--test-split chooses among the test files of a corpus on disk; the toy tasks and SCAN have one."""
    dataset = run.datamodule.dataset
    if test_split is not None and dataset not in ("multi30k", "parallel", "tsv"):
        raise InputError(
            f"--test-split {test_split}: the run's {dataset} data has a single test set; --test-split "
            "is for multi30k, parallel and tsv corpora"
        )


def imported_run(
    settings: dict,
    state_dict: dict,
    src_tokenizer,
    tgt_tokenizer,
    *,
    source_lang: str | None,
    target_lang: str | None,
    device: torch.device,
) -> LoadedRun:
    """A run around a model trained elsewhere (evaluate.py's --hf): ``TranslationModule`` of the model's
    ``settings`` holding its weights, and a data module holding only its tokenizers (objects with
    ``data.tokenizer.Tokenizer``'s interface) and languages; the sentences come from --tsv, a gold set or
    translate's text."""
    module = TranslationModule(**settings)
    module.model.load_state_dict(state_dict)
    datamodule = TranslationDataModule(
        dataset="tsv", path=".", source_lang=source_lang or "und", target_lang=target_lang or "und"
    )
    datamodule.use_tokenizers(src_tokenizer, tgt_tokenizer)
    run = LoadedRun(module.to(device).eval(), datamodule, 0)
    check_finite(run, "the imported model")
    return run
