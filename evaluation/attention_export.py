"""Attention maps of translated sentences as files: one PNG per layer and head, and an HTML head view."""

from pathlib import Path

import matplotlib.pyplot as plt
import torch

from analysis.headview import write_head_view
from analysis.plots import attention_heatmap
from data.batching import check_fits, collate
from data.tokenizer import Tokenizer
from model import Transformer

KINDS = ("encoder", "decoder", "cross")


@torch.no_grad()
def export_attention(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    source: str,
    hypothesis: list[int],
    directory: Path,
    *,
    overwrite: bool = False,
) -> list[Path]:
    """Write the maps of one translated sentence into ``directory`` (which must not hold them yet).

    The model reads the source and, teacher-forced, its own hypothesis, so the maps are exactly those it used
    while generating. Files: ``<kind>_layer<l>_head<h>.png`` for every kind, layer and head, and
    ``head_view.html``. Returns the paths written. A source or hypothesis the model cannot read in its
    ``max_len`` positions raises a one-line ``CorpusError`` before anything is written.
    """
    device = model.device
    # A hypothesis as long as the model's max_len ran into its cap, without EOS: the decoder never read its
    # last token, and reading it would take one position more than there are.
    capped = len(hypothesis) == model.config.max_len
    item = (0, src_tokenizer.encode(source), hypothesis[:-1] if capped else hypothesis)
    check_fits([item], model.config.max_len, lambda index, side: ("attention export", None))
    batch = collate([item])
    _, maps = model(batch.src.to(device), batch.tgt_in.to(device), return_attention=True)
    src_tokens = src_tokenizer.tokens(batch.src[0].tolist())
    tgt_in_tokens = tgt_tokenizer.tokens(batch.tgt_in[0].tolist())
    tgt_out_tokens = tgt_tokenizer.tokens(hypothesis if capped else batch.tgt_out[0].tolist())
    axes = {"encoder": (src_tokens, src_tokens), "decoder": (tgt_out_tokens, tgt_in_tokens),
            "cross": (tgt_out_tokens, src_tokens)}
    per_kind = {kind: [w[0].float().cpu() for w in layers] for kind, layers in zip(KINDS, maps)}

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, layers in per_kind.items():
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
        html, source_tokens=src_tokens, target_tokens=tgt_in_tokens, encoder=per_kind["encoder"],
        decoder=per_kind["decoder"], cross=per_kind["cross"], title=source, overwrite=overwrite,
    )
    written.append(html)
    return written
