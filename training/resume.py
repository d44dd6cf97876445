"""What a resumed run needs beyond Lightning's own checkpoint: the random generators' states and the logged
steps' labels, and a check that the checkpoint loads safely and fits the model before anything is written
into the run's directory.

The rest of an exact resume lives where it belongs: the data loader's place in its epoch in
``data.batching.ResumableDataLoader`` (Lightning saves it), dropout seeded by the step in
``TranslationModule.on_train_batch_start``, the batch in flight at an interruption in
``training.callbacks.InterruptCheckpoint``.
"""

import os
import pickle
import random
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from model import TransformerConfig
from training.run_checkpoints import CheckpointError, open_checkpoint
from training.upgrade import upgrade_state_dict


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


def check_resume_checkpoint(path: Path, module: torch.nn.Module) -> int:
    """Load the weights of checkpoint ``path`` into ``module``, or stop with a one-line ``SystemExit`` if
    ``training.run_checkpoints.open_checkpoint`` refuses it, it does not load under
    ``torch.load(weights_only=True)`` or it does not fit ``module`` (say, the ``last.ckpt``
    of another run): so that ``--resume`` fails before it writes anything into the run's directory.

    Returns:
        the checkpoint's ``global_step``: how many optimiser steps its run had taken.
    """
    try:
        # The opener evaluate.py and the tab read through: a file that is no zip archive (the run's
        # config.yaml), or one that would inflate far beyond a checkpoint (a zip bomb), is refused unread.
        with open_checkpoint(path) as file:
            checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except CheckpointError as error:  # its message starts with the path
        raise SystemExit(f"error: --resume {error}") from None
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError) as error:
        raise SystemExit(
            f"error: --resume {path}: cannot load it as a checkpoint with torch.load(weights_only=True): "
            f"{_reason(error)}"
        ) from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise SystemExit(f"error: --resume {path}: not a training checkpoint (it holds no state_dict)")
    try:
        # As Lightning will load it (under today's names, see ``TranslationModule.on_load_checkpoint``), only
        # sooner.
        module.load_state_dict(upgrade_state_dict(state))
    except RuntimeError as error:
        saved = checkpoint.get("hyper_parameters") or {}
        # What differs, where the two runs' hyperparameters tell; else the first mismatch torch names.
        differences = architecture_differences(saved, getattr(module, "hparams", {}))
        why = "; ".join(differences) or f"it belongs to another run: {_reason(error)}"
        raise SystemExit(
            f"error: --resume {path}: its weights do not fit the model of the run's config: {why}"
        ) from None
    return int(checkpoint.get("global_step", 0))


# Architecture options that change no weight's shape or name: never why a checkpoint does not fit.
NOT_IN_THE_WEIGHTS = ("dropout", "attention_dropout")


def architecture_differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What makes a checkpoint's weights not fit the model now, from the two runs' hyperparameters: a
    vocabulary of other sizes (the data's, linked into the model), then each architecture option given another
    value (``TransformerConfig``'s fields); empty if they agree on all of these."""
    vocab = ("src_vocab_size", "tgt_vocab_size")
    differences = []
    (src, tgt), (old_src, old_tgt) = ([hparams.get(name) for name in vocab] for hparams in (now, saved))
    if (src, tgt) != (old_src, old_tgt):
        differences.append(
            f"the vocabulary has {src} source and {tgt} target tokens now, {old_src} and {old_tgt} in the "
            "checkpoint: the corpus or the tokenizer settings changed since it was saved"
        )
    for field in fields(TransformerConfig):
        named = field.name not in vocab and field.name not in NOT_IN_THE_WEIGHTS and field.name in saved
        if named and saved[field.name] != now.get(field.name):
            differences.append(
                f"--model.{field.name} is {now.get(field.name)} now, {saved[field.name]} in the checkpoint"
            )
    return differences


def _reason(error: BaseException, limit: int = 300) -> str:
    """The line of a library's many-line error message that says what went wrong, at most ``limit`` chars."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # torch.load: "Weights only load failed. ..." then the refused global; load_state_dict: "Error(s) in
    # loading state_dict for ..." then one line per mismatch.
    reason = next((line for line in lines if "GLOBAL" in line), lines[1] if len(lines) > 1 else lines[0])
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."
