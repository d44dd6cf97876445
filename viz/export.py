"""Attention maps of translated sentences as files: one PNG per layer and head, and an HTML head view."""

from pathlib import Path

import matplotlib.pyplot as plt

from data.tokenizer import Tokenizer
from evaluation.forced import sentence_pass
from model import Transformer
from training.run_checkpoints import CheckpointError
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
    ``CheckpointError``, before anything is written.
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
                figure.savefig(path)
                plt.close(figure)
                written.append(path)
    html = directory / "head_view.html"
    write_head_view(
        html, source_tokens=tokens.source, target_in_tokens=tokens.target_in,
        target_out_tokens=tokens.target_out, title=source, overwrite=overwrite, **maps,
    )
    written.append(html)
    return written
