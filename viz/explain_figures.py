"""Pictures of explanations: one sentence under every method side by side, and the methods' scores.

Shape legend: see ``analysis.explain``. Built on ``viz.plots`` (Agg canvas, no pyplot).
"""

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from analysis.explain.trace import Explanation
from viz.plots import _check_tokens, _label_size, new_figure, set_column_labels


def display_rows(scores: torch.Tensor) -> torch.Tensor:
    """(..., T, S) scores → each row's |scores| divided by the row's largest, so that every method's map reads
    on one 0..1 scale (weights, norms and attributions differ in scale and sign)."""
    magnitude = scores.detach().float().abs()
    return magnitude / magnitude.amax(dim=-1, keepdim=True).clamp_min(1e-12)


def methods_figure(
    explanations: dict[str, Explanation],
    labels: dict[str, str],
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    *,
    gold: set[tuple[int, int]] | None = None,
    title: str = "",
    cmap: str = "viridis",
) -> Figure:
    """One sentence under every method: a row of panels per method, one panel per layer (head average).

    Each panel shows ``display_rows`` of the method's map, target tokens down the side, source tokens along
    the bottom; gold links, if given as (source, target) positions, are marked with red circles.

    Args:
        explanations: method name -> an Explanation of this one sentence (B = 1, cut to its length).
        labels: method name -> the label shown.
        source_tokens, target_tokens: S and T labels.
    """
    if not explanations:
        raise ValueError("no explanations to draw")
    rows = list(explanations)
    columns = max(e.per_layer.size(1) for e in explanations.values())
    first = next(iter(explanations.values()))
    T, S = first.per_layer.shape[-2:]
    source_tokens = _check_tokens(source_tokens, S, "source_tokens")
    target_tokens = _check_tokens(target_tokens, T, "target_tokens")
    panel = float(np.clip(0.16 * max(T, S), 1.4, 2.8))
    fig = new_figure(columns * panel + 1.6, len(rows) * panel + 0.8)
    axes = fig.subplots(len(rows), columns, squeeze=False)
    fontsize = _label_size(max(T, S), axis_inches=0.85 * panel, largest=7.0)
    image = None
    for i, name in enumerate(rows):
        explanation = explanations[name]
        maps = display_rows(explanation.per_layer[0]).numpy()  # (L, T, S)
        for j in range(columns):
            ax = axes[i, j]
            if j >= maps.shape[0]:
                ax.set_axis_off()
                continue
            image = ax.imshow(maps[j], vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto", interpolation="nearest")
            if gold:
                links = np.array(sorted(gold))  # (n, 2): (source, target)
                ax.scatter(
                    links[:, 0], links[:, 1], s=12, facecolors="none", edgecolors="red", linewidths=0.8
                )
            ax.set_title(f"{labels.get(name, name)}, {explanation.layers[j]}", fontsize=6)
            set_column_labels(ax, range(S), source_tokens, fontsize)
            ax.set_yticks(range(T), target_tokens if j == 0 else [""] * T, fontsize=fontsize)
            ax.tick_params(length=0)
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.01).ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def scores_figure(
    values: np.ndarray, methods: Sequence[str], layers: Sequence[str], title: str = "", fmt: str = ".2f"
) -> Figure:
    """A methods × layers matrix of one score (e.g. AER); NaN cells (a method without that layer) show
    "–"."""
    values = np.asarray(values, dtype=np.float32)
    if values.shape != (len(methods), len(layers)):
        raise ValueError(f"values {values.shape} must be (methods, layers) = {(len(methods), len(layers))}")
    fig = new_figure(max(3.5, 2.4 + 0.8 * len(layers)), max(2.0, 0.9 + 0.35 * len(methods)))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), vmin=0.0, vmax=1.0, cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(layers)), list(layers), fontsize=8)
    ax.set_yticks(range(len(methods)), list(methods), fontsize=8)
    ax.tick_params(length=0)
    for i in range(len(methods)):
        for j in range(len(layers)):
            value = values[i, j]
            text = "–" if not np.isfinite(value) else format(value, fmt)
            r, g, b, _ = image.cmap(image.norm(value)) if np.isfinite(value) else (1, 1, 1, 1)
            color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02).ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def logit_lens_figure(
    produced_prob: np.ndarray,
    top_tokens: Sequence[Sequence[str]],
    target_tokens: Sequence[str],
    layers: Sequence[str],
    title: str = "",
) -> Figure:
    """The logit lens of one sentence: layers down the side, target positions along the bottom; the colour is
    the probability each layer's reading gives the token finally produced, the text its most probable token.

    Args:
        produced_prob: (L, T) probabilities.
        top_tokens: per layer, T tokens (each layer's top-1 reading).
        target_tokens: the T produced tokens (column labels).
        layers: L row labels.
    """
    produced_prob = np.asarray(produced_prob, dtype=np.float32)
    L, T = produced_prob.shape
    target_tokens = _check_tokens(target_tokens, T, "target_tokens")
    fig = new_figure(max(3.5, 1.4 + 0.55 * T), max(2.0, 1.2 + 0.4 * L))
    ax = fig.add_subplot()
    image = ax.imshow(produced_prob, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for i in range(L):
        for j in range(T):
            r, g, b, _ = image.cmap(image.norm(produced_prob[i, j]))
            color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(j, i, _check_tokens([top_tokens[i][j]], 1, "token")[0], ha="center", va="center",
                    fontsize=6, color=color)
    set_column_labels(ax, range(T), target_tokens, 7)
    ax.set_yticks(range(L), list(layers), fontsize=7)
    ax.tick_params(length=0)
    ax.set_xlabel("produced token (colour: its probability; text: the layer's top token)", fontsize=7)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02).ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return fig
