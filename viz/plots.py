"""Figures of attention maps and per-head metrics, sized to stay light when logged many times.

Shape legend:
    L   layers
    H   heads
    Tq  query positions (rows of a map)
    Tk  key positions (columns of a map)

Figures are built on matplotlib's Agg canvas directly, without pyplot, so they need no display and leave
no global state behind but the font fallback for CJK tokens (``viz.fonts``). `SummaryWriter.add_figure(tag,
figure, step)` logs one as an image and closes it.
"""

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from viz.fonts import check_glyphs, stands_upright, use_script_fonts

DPI = 80
MAX_LABELS = 40  # beyond this many tokens an axis shows every k-th label only
MAX_GRID_LABELS = 24  # grid panels are small: beyond this many tokens their labels are left out
MAX_LABEL_CHARS = 12


def new_figure(width: float, height: float, *, dpi: int = DPI) -> Figure:
    """A figure of width × height inches on an Agg canvas, with constrained layout, whose text falls back to
    a CJK font for Chinese, Japanese and Korean tokens."""
    use_script_fonts()
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _as_numpy(weights, ndim: int, name: str) -> np.ndarray:
    """A tensor or array as a float numpy array of the given number of dimensions."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {weights.shape}")
    return weights


def _check_tokens(tokens: Sequence[str] | None, length: int, name: str) -> list[str] | None:
    """The tokens as labels (shortened); a warning if no installed font can draw their script."""
    if tokens is not None and len(tokens) != length:
        raise ValueError(f"{name} has {len(tokens)} tokens but the map has {length} positions on that axis")
    if tokens is None:
        return None
    labels = [_shorten(str(t)) for t in tokens]
    check_glyphs(labels)
    return labels


def _shorten(token: str) -> str:
    return token if len(token) <= MAX_LABEL_CHARS else token[: MAX_LABEL_CHARS - 1] + "…"


def _label_size(count: int, axis_inches: float, largest: float = 9.0) -> float:
    """Font size (points) fitting `count` tick labels along an axis that long, from 4.5 up to `largest`."""
    return float(np.clip(0.85 * axis_inches * 72 / max(count, 1), 4.5, largest))


def heatmap_size(count: int) -> float:
    """Default heatmap width and height (inches): 4 up to 16 tokens, growing to 5 at 29 and more."""
    return float(np.clip(2.4 + 0.09 * count, 4.0, 5.0))


def set_column_labels(ax, positions: Sequence[int], tokens: Sequence[str], fontsize: float) -> None:
    """Token labels under the columns, turned to read bottom to top; CJK tokens (``viz.fonts.stands_upright``)
    stand upright instead, one character under the other, as in vertical writing."""
    upright = [stands_upright(token) for token in tokens]
    labels = ["\n".join(token) if up else token for token, up in zip(tokens, upright)]
    ax.set_xticks(positions, labels, rotation=90, fontsize=fontsize)
    for label, up in zip(ax.get_xticklabels(), upright):
        if up:
            label.set_rotation(0)
            label.set_linespacing(1.0)


def _set_ticks(ax, axis: str, tokens: list[str], fontsize: float) -> None:
    """Put token labels on one axis, thinning them to at most MAX_LABELS."""
    step = -(-len(tokens) // MAX_LABELS)  # ceil division
    positions = list(range(0, len(tokens), step))
    labels = [tokens[i] for i in positions]
    if axis == "x":
        set_column_labels(ax, positions, labels, fontsize)
    else:
        ax.set_yticks(positions, labels, fontsize=fontsize)


def attention_heatmap(
    weights,
    query_tokens: Sequence[str] | None,
    key_tokens: Sequence[str] | None,
    title: str = "",
    *,
    size: float | None = None,
    cmap: str = "viridis",
) -> Figure:
    """One attention map: queries down the side, keys along the bottom, colour 0..1 with a colour bar.

    Args:
        weights: (Tq, Tk) tensor or array of attention weights.
        query_tokens: Tq labels for the rows, or None for positions.
        key_tokens: Tk labels for the columns, or None for positions.
        title: figure title.
        size: width and height in inches (at 80 dpi, 4 inches = 320 pixels); None = `heatmap_size`, which
            keeps up to ~30 token labels legible.
        cmap: matplotlib colour map name.
    """
    weights = _as_numpy(weights, 2, "weights")
    Tq, Tk = weights.shape
    query_tokens = _check_tokens(query_tokens, Tq, "query_tokens")
    key_tokens = _check_tokens(key_tokens, Tk, "key_tokens")

    size = heatmap_size(max(Tq, Tk)) if size is None else size
    fig = new_figure(size, size)
    ax = fig.add_subplot()
    image = ax.imshow(weights, vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto", interpolation="nearest")
    fontsize = _label_size(min(max(Tq, Tk), MAX_LABELS), axis_inches=0.7 * size)
    if key_tokens is not None:
        _set_ticks(ax, "x", key_tokens, fontsize)
    if query_tokens is not None:
        _set_ticks(ax, "y", query_tokens, fontsize)
    ax.tick_params(length=0, labelsize=fontsize)
    ax.set_xlabel("key", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    colorbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    colorbar.ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def attention_grid(
    layers: Sequence,
    query_tokens: Sequence[str] | None,
    key_tokens: Sequence[str] | None,
    title: str = "",
    *,
    cmap: str = "viridis",
) -> Figure:
    """The layers × heads overview of one attention kind: one small panel per head, one shared colour bar.

    Rows are labelled "layer i", columns "head j" (both from 1). Tokens label only the outer panels
    (bottom row, left column), and are left out when there are more than MAX_GRID_LABELS of them.

    Args:
        layers: per layer, an (H, Tq, Tk) tensor or array for one sentence.
        query_tokens: Tq labels, or None.
        key_tokens: Tk labels, or None.
        title: figure title.
        cmap: matplotlib colour map name.
    """
    if len(layers) == 0:
        raise ValueError("layers is empty; expected one (H, Tq, Tk) map per layer")
    maps = [_as_numpy(layer, 3, f"layers[{i}]") for i, layer in enumerate(layers)]
    shapes = {m.shape for m in maps}
    if len(shapes) != 1:
        raise ValueError(f"layers differ in shape: {sorted(shapes)}")
    L, (H, Tq, Tk) = len(maps), maps[0].shape
    n = max(Tq, Tk)
    show_tokens = n <= MAX_GRID_LABELS
    query_tokens = _check_tokens(query_tokens, Tq, "query_tokens") if show_tokens else None
    key_tokens = _check_tokens(key_tokens, Tk, "key_tokens") if show_tokens else None

    # Panels only grow when they carry token labels, so that the labels of the outer panels fit.
    panel = float(np.clip(0.13 * n, 1.1, 2.6)) if show_tokens else 1.1  # inches per panel
    label_margin = 0.7 if show_tokens else 0.3  # room for outer token labels
    fig = new_figure(H * panel + label_margin + 0.8, L * panel + label_margin + 0.4)
    axes = fig.subplots(L, H, squeeze=False, sharex=True, sharey=True)
    fontsize = _label_size(n, axis_inches=0.85 * panel, largest=7.0)
    for i in range(L):
        for j in range(H):
            ax = axes[i, j]
            image = ax.imshow(
                maps[i][j], vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto", interpolation="nearest"
            )
            ax.tick_params(length=0, labelsize=fontsize)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"head {j + 1}", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"layer {i + 1}", fontsize=8)
    # Shared axes: ticks set on one panel apply to its row or column; only the outer labels are drawn.
    if key_tokens is not None:
        for ax in axes[-1]:
            set_column_labels(ax, range(Tk), key_tokens, fontsize)
    if query_tokens is not None:
        for ax in axes[:, 0]:
            ax.set_yticks(range(Tq), query_tokens, fontsize=fontsize)
    for ax in axes[:-1].flat:
        ax.tick_params(labelbottom=False)
    for ax in axes[:, 1:].flat:
        ax.tick_params(labelleft=False)
    colorbar = fig.colorbar(image, ax=axes, fraction=0.03, pad=0.01, shrink=min(1.0, 3.0 / L + 0.3))
    colorbar.ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def layer_head_matrix(
    values,
    title: str = "",
    *,
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: str = ".2f",
    cmap: str = "viridis",
) -> Figure:
    """An annotated heatmap of a per-layer, per-head metric: rows are layers 1..L, columns heads 1..H.

    Args:
        values: (L, H) tensor or array; non-finite cells are shown as "n/a".
        title: figure title.
        vmin, vmax: colour range; None = the data's range.
        fmt: format spec of the cell annotations.
        cmap: matplotlib colour map name.
    """
    values = _as_numpy(values, 2, "values")
    L, H = values.shape
    fig = new_figure(max(3.0, 1.2 + 0.55 * H), max(2.0, 0.9 + 0.4 * L))
    ax = fig.add_subplot()
    image = ax.imshow(values, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(H), [str(j + 1) for j in range(H)], fontsize=8)
    ax.set_yticks(range(L), [str(i + 1) for i in range(L)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    fontsize = 8 if H <= 8 else 6
    for i in range(L):
        for j in range(H):
            value = values[i, j]
            if not np.isfinite(value):
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=fontsize, color="grey")
                continue
            # Dark text on light cells, light text on dark ones (relative luminance of the cell colour).
            r, g, b, _ = image.cmap(image.norm(value))
            color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=fontsize, color=color)
    colorbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    colorbar.ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return fig
