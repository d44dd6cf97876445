"""Attention maps of translated sentences as files: one PNG per layer and head, and an HTML head view."""

import errno
import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import matplotlib.pyplot as plt

from data.tokenizer import Tokenizer
from evaluation.forced import sentence_pass
from evaluation.translate import Hypothesis
from model import Transformer
from training.checkpoints import CheckpointError
from viz.headview import write_head_view
from viz.plots import attention_heatmap


def export_attention(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    source: str,
    hypothesis: list[int],
    directory: Path,
    *,
    finished: bool = True,
    overwrite: bool = False,
) -> list[Path]:
    """Write the maps of one translated sentence into ``directory`` (which must not hold them yet).

    The model reads the source and, teacher-forced, its own hypothesis, so the maps are exactly those it used
    while generating; ``finished=False`` marks a hypothesis cut by its length limit before EOS (drawn without
    an ``</s>`` row). Files: ``<kind>_layer<l>_head<h>.png`` for every kind, layer and head, and
    ``head_view.html``; both label rows and columns as ``analysis.axes`` says. Returns the paths written. A
    source or hypothesis the model cannot read in its ``max_len`` positions raises a one-line ``CorpusError``,
    and weights whose attention is not finite (finite weights of a diverged run that overflow) a one-line
    ``CheckpointError``, before anything is written. A write that fails raises an ``OSError`` naming its file
    (a full disk's names none); ``export_sentences`` leaves nothing of a failed export behind.
    """
    seen = sentence_pass(
        model, src_tokenizer.encode(source), hypothesis, finished=finished, where="attention export"
    )
    tokens, maps = seen.tokens(src_tokenizer, tgt_tokenizer), seen.sentence_maps()
    if not all(weights.isfinite().all() for layers in maps.values() for weights in layers):
        raise CheckpointError(
            f"attention export: the model's attention for {source[:50]!r} is not finite (its weights "
            "overflow: the run diverged); use an earlier checkpoint"
        )
    axes = tokens.axes
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, layers in maps.items():
        rows, cols = axes[kind]
        for layer, heads in enumerate(layers, start=1):
            for head, weights in enumerate(heads, start=1):
                figure = attention_heatmap(weights, rows, cols, f"{kind} layer {layer} head {head}")
                path = directory / f"{kind}_layer{layer}_head{head}.png"
                try:
                    figure.savefig(path)
                except OSError as error:
                    raise _naming(error, path) from None
                finally:
                    plt.close(figure)
                written.append(path)
    html = directory / "head_view.html"
    try:
        write_head_view(
            html, source_tokens=tokens.source, target_in_tokens=tokens.target_in,
            target_out_tokens=tokens.target_out, title=source, overwrite=overwrite, **maps,
        )
    except OSError as error:
        raise _naming(error, html) from None
    written.append(html)
    return written


def export_sentences(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sources: Sequence[str],
    hypotheses: Sequence[Hypothesis],
    out: Path,
    *,
    overwrite: bool = False,
) -> dict[Path, list[Path]]:
    """The maps of each translated sentence (``export_attention``) in ``out/sentence_<n>``, written whole
    or not at all: all are drawn into one hidden folder inside ``out`` and move to their names only once
    every file is written. Returns each sentence's folder with the paths written into it.

    A sentence folder that exists is refused (``FileExistsError``) unless ``overwrite``; then it takes the
    new files and keeps its others. One that is a file is refused (``NotADirectoryError``) before any work.
    A write that fails (a full disk) or an interrupt leaves nothing of this call: no new sentence folder,
    no ``out`` if it made it, every file that was there as it was; the ``OSError`` names the file at the
    name it was to have.
    """
    for number in range(1, len(sources) + 1):
        folder = out / f"sentence_{number}"
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file where the sentence's maps go", str(folder))
        if folder.exists() and not overwrite:
            raise FileExistsError(errno.EEXIST, "exists; choose another folder or overwrite", str(folder))
    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    staging = None
    moved: list[Path] = []  # sentence folders this call made by renaming them into place
    try:
        out.mkdir(parents=True, exist_ok=True)
        try:
            staging = Path(tempfile.mkdtemp(dir=out, prefix=".attention."))
        except OSError as error:  # named after out, not the hidden folder it could not make
            raise _naming(error, out) from None
        drawn = {}
        for number, (source, hypothesis) in enumerate(zip(sources, hypotheses, strict=True), start=1):
            drawn[out / f"sentence_{number}"] = export_attention(
                model, src_tokenizer, tgt_tokenizer, source, hypothesis.ids, staging / f"sentence_{number}",
                finished=hypothesis.finished,
            )
        written = {}
        for folder, files in drawn.items():
            if not folder.exists():
                os.replace(files[0].parent, folder)
                moved.append(folder)
            else:
                for file in files:
                    os.replace(file, folder / file.name)
            written[folder] = [folder / file.name for file in files]
    except BaseException as error:
        for folder in moved:
            shutil.rmtree(folder, ignore_errors=True)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        with suppress(OSError):
            for folder in made:  # only while empty: a file another process put there stays
                folder.rmdir()
        if isinstance(error, OSError) and staging is not None and error.filename:
            # The file as the user would find it, not in the hidden folder it was drawn in.
            where = Path(os.fsdecode(error.filename))
            if where.is_relative_to(staging):
                raise _naming(error, out / where.relative_to(staging)) from None
        raise
    shutil.rmtree(staging, ignore_errors=True)  # the emptied folders of sentences moved file by file
    return written


def _naming(error: OSError, path: Path) -> OSError:
    """``error`` as an OSError of ``path``: one raised while a file is written (ENOSPC) names none."""
    return OSError(error.errno, error.strerror or str(error), str(path))
