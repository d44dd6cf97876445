"""The ATTENTION tab's live side: a run's newest checkpoint, loaded once and kept while the file is unchanged,
translating a typed sentence and explaining the translation.

On the CPU, with the checkpoint that ``training.checkpoints.newest_checkpoint`` chooses (as ``train.py
--resume`` does). Nothing is ever written to the run folder.
"""

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from analysis.explain.trace import Explanation
from evaluation.explanations import explain_pass, lens_of, lens_record
from evaluation.forced import sentence_pass
from evaluation.translate import translate_hypotheses
from training.checkpoints import (
    CheckpointError,
    CheckpointMissing,
    CheckpointRefused,
    newest_checkpoint,
    resolved,
)
from viz.tab.events import RequestError

MAX_BEAM = 8  # a typed sentence's largest beam: it is searched on the CPU while the page waits
RUN_BEAM = "run"  # the beam a typed sentence gets unless it asks for one: the run's validation beam
MAX_TEXT_CHARACTERS = 200
CHECKPOINT_TRIES = 3  # reads of a run's newest checkpoint while training rotates its checkpoints

_GONE = object()


@dataclass(frozen=True)
class Translated:
    """A typed sentence, read as the run reads its data, translated, with every head's attention over it and,
    where asked, one method's explanation and the logit lens under forced decoding of the translation."""

    checkpoint: Path
    step: int
    translation: str
    source: list[str]
    target_in: list[str]
    target_out: list[str]
    weights: dict[str, np.ndarray]  # kind -> (L, H, Tq, Tk)
    explanation: Explanation | None  # of one sentence: (1, L, T, S), per head (1, L, H, T, S)
    lens: dict | None  # ``evaluation.explanations.lens_record``
    beam: int  # the beam it was translated with
    run_beam: int  # the run's validation beam (``decode_beam_size``)
    read: str  # the sentence as the run reads its data (``TranslationDataModule.read_text``)
    unknown: list[tuple[int, int]]  # the [start, end) characters of ``read`` the run reads as <unk>


def _load_run(checkpoint: Path):
    """``training.checkpoints.load_run``. The tab's one import inside a function: it brings Lightning (about
    4 s to import), which only translating needs, so TensorBoard starts and lists runs without it."""
    from training import checkpoints

    return checkpoints.load_run(checkpoint)


class LiveRuns:
    """Each run's newest weights, as ``translate`` needs them; one translation per run at a time."""

    def __init__(self, logdir: Path | None) -> None:
        self.logdir = logdir
        self._loaded: dict[str, tuple[Path, tuple, object]] = {}  # run -> (checkpoint, identity, LoadedRun)
        self._busy: dict[str, threading.Lock] = {}
        self._busy_guard = threading.Lock()

    def lock(self, run: str) -> threading.Lock:
        with self._busy_guard:
            return self._busy.setdefault(run, threading.Lock())

    def checkpoint(self, run: str) -> tuple[Path | None, str | None, int]:
        """The run's newest weights (``newest_checkpoint``'s rule), else None, why, and the HTTP status."""
        if self.logdir is None:
            return None, "translation needs TensorBoard started with --logdir (not --logdir_spec)", 404
        try:
            folder = resolved(self.logdir / run / "checkpoints")
            if not folder.is_relative_to(self.logdir):
                return None, f"run {run!r} is outside the log directory", 403
            if not folder.is_dir():
                return None, f"no checkpoint yet in {folder}", 404
            return newest_checkpoint(folder, inside=self.logdir), None, 200
        except CheckpointMissing as error:
            return None, str(error), 404
        except CheckpointRefused as error:  # a symbolic link out of the log directory
            return None, str(error), 403
        except CheckpointError as error:  # one of them unreadable, or a loop of links: named
            return None, str(error), 422

    def loaded(self, run: str):
        """The run's newest checkpoint and its LoadedRun (cached while the file is unchanged).

        Training deletes old epoch checkpoints and replaces last.ckpt while the tab reads them: a file that
        vanishes or changes under a read is looked up again, and after CHECKPOINT_TRIES such reads the answer
        is a 409 saying to try again (the run's state, not the server, is in the way), never a 5xx.
        """
        for _ in range(CHECKPOINT_TRIES):
            checkpoint, note, status = self.checkpoint(run)
            if checkpoint is None:
                raise RequestError(status, note)
            try:
                before = _identity(checkpoint)
                cached = self._loaded.get(run)
                if cached is not None and cached[:2] == (checkpoint, before):
                    return checkpoint, cached[2]
                loaded = _load_run(checkpoint)
                if _identity(checkpoint) != before:
                    continue  # replaced while it was read
                _check_finite(checkpoint, loaded.module.model)
            except (CheckpointMissing, FileNotFoundError):
                continue
            except CheckpointError as error:
                if _identity(checkpoint, missing=None) != before:
                    continue  # a half-written or replaced file
                raise RequestError(422, str(error)) from None
            self._loaded[run] = (checkpoint, before, loaded)
            return checkpoint, loaded
        raise RequestError(409, f"the checkpoints of run {run!r} changed while they were read (training "
                                "saves new ones); try again")

    def translate(self, run: str, text: str, *, beam: int | None, method: str | None,
                  ig_steps: int) -> Translated:
        """``text`` translated with the run's newest weights, ``beam`` beams (None: the beam the run validates
        with, at most MAX_BEAM); with ``method`` (a name of ``analysis.explain.registry.METHODS``, checked by
        the caller), explained under forced decoding of the translation, Integrated Gradients with
        ``ig_steps`` points."""
        checkpoint, loaded = self.loaded(run)
        run_beam = loaded.module.hparams.get("decode_beam_size", 1)
        beam = min(run_beam, MAX_BEAM) if beam is None else beam
        model, datamodule = loaded.module.model, loaded.datamodule
        src_tok, tgt_tok = datamodule.src_tokenizer, datamodule.tgt_tokenizer
        text = datamodule.read_text(text)  # its script converted as the data's was
        src_ids = src_tok.encode(text)
        if len(src_ids) + 1 > model.config.max_len:
            raise RequestError(400, f"the sentence has {len(src_ids) + 1} tokens with </s>; this model reads "
                                    f"at most {model.config.max_len}")
        with torch.inference_mode():
            ids, finished = translate_hypotheses(model, src_tok, tgt_tok, [text], beam_size=beam,
                                                 max_len=loaded.module.hparams.get("decode_max_len"))[0]
        # One pass for the maps and the explanation, outside inference mode: the gradient methods need it.
        seen = sentence_pass(model, src_ids, ids, finished=finished)
        tokens = seen.tokens(src_tok, tgt_tok)
        weights = {kind: torch.stack(layers).numpy() for kind, layers in seen.sentence_maps().items()}
        if not all(np.isfinite(array).all() for array in weights.values()):  # finite weights that overflow
            raise RequestError(422, f"{checkpoint}: the checkpoint's weights give non-finite attention (the "
                                    "run diverged)")
        explanation = lens = None
        if method is not None:
            # Under forced decoding of the model's own translation; the gradient methods need autograd.
            with torch.enable_grad():
                explanation = explain_pass(seen, [method], ig_steps=ig_steps)[method]
            lens = lens_record(lens_of(model, seen), tgt_tok)
        return Translated(checkpoint, loaded.global_step, tgt_tok.decode(ids), tokens.source,
                          tokens.target_in, tokens.target_out, weights, explanation, lens, beam, run_beam,
                          read=text, unknown=datamodule.unknown_spans(text))


def _check_finite(checkpoint: Path, model) -> None:
    """A 422 for weights with a NaN or infinity: a diverged run's checkpoint translates nothing."""
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        raise RequestError(422, f"{checkpoint}: the checkpoint's weights are not finite (the run diverged)")


def _identity(path: Path, missing=_GONE) -> tuple:
    """What tells one version of a file from the next: (inode, size, modification time in ns). A file that is
    gone raises FileNotFoundError, or gives ``missing`` when that is given."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        if missing is _GONE:
            raise
        return missing
    return stat.st_ino, stat.st_size, stat.st_mtime_ns
