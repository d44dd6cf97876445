"""A standalone, interactive HTML head view of one sentence's attention, in the spirit of BertViz's head view.

Shape legend:
    H   heads
    S   source length
    T   target length

The file has no dependencies: CSS and JavaScript are inline and the attention is embedded as JSON in a
`<script type="application/json">` tag, so it opens from disk in any browser. Pick the attention kind and
layer from the dropdowns and the heads with the coloured checkboxes; query tokens are on the left, key
tokens on the right, and each line's opacity is its attention weight. Hovering a token shows only its lines.
"""

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from analysis.axes import KIND_LABELS, KINDS, attention_axes

DECIMALS = 4  # weights are rounded in the file to keep it small


def _layers_to_lists(
    kind: str, layers: Sequence[Tensor], queries: list[str], keys: list[str]
) -> list[list[list[list[float]]]]:
    """Validate one kind's per-layer (H, Tq, Tk) maps and turn them into rounded nested lists."""
    if len(layers) == 0:
        raise ValueError(f"{kind} has no layers; pass None to leave the kind out")
    expected = (len(queries), len(keys))
    heads = None
    nested = []
    for i, layer in enumerate(layers):
        if layer.dim() != 3 or tuple(layer.shape[1:]) != expected:
            raise ValueError(
                f"{kind}[{i}] must have shape (H, {expected[0]}, {expected[1]}) to match the tokens, "
                f"got {tuple(layer.shape)}"
            )
        if heads is not None and layer.shape[0] != heads:
            raise ValueError(f"{kind}[{i}] has {layer.shape[0]} heads but {kind}[0] has {heads}")
        heads = layer.shape[0]
        values = layer.detach().double().cpu()
        if not values.isfinite().all():
            raise ValueError(f"{kind}[{i}] contains NaN or infinite weights")
        nested.append(values.mul(10**DECIMALS).round().div(10**DECIMALS).tolist())  # (H, Tq, Tk)
    return nested


def head_view_data(
    *,
    source_tokens: Sequence[str],
    target_in_tokens: Sequence[str],
    target_out_tokens: Sequence[str],
    encoder: Sequence[Tensor] | None,
    decoder: Sequence[Tensor] | None,
    cross: Sequence[Tensor] | None,
) -> dict:
    """The JSON-ready data of a head view; rows and columns are labelled as in every view
    (``analysis.axes.attention_axes``).

    Returns:
        {"source": [S] tokens, "target": [T] generated tokens, "kinds": {kind: entry}} with one entry per kind
        given: {"label": str, "queries": [Tq] tokens, "keys": [Tk] tokens, "layers": [L][H][Tq][Tk] weights}.
    """
    axes = attention_axes(
        [str(t) for t in source_tokens],
        [str(t) for t in target_in_tokens],
        [str(t) for t in target_out_tokens],
    )
    kinds = {}
    for kind, layers in zip(KINDS, (encoder, decoder, cross)):
        if layers is None:
            continue
        queries, keys = axes[kind]
        kinds[kind] = {
            "label": KIND_LABELS[kind],
            "queries": queries,
            "keys": keys,
            "layers": _layers_to_lists(kind, layers, queries, keys),
        }
    if not kinds:
        raise ValueError("encoder, decoder and cross are all None; there is nothing to show")
    return {"source": axes["encoder"][0], "target": axes["cross"][0], "kinds": kinds}


def _script_json(data: dict) -> str:
    """JSON that is safe inside a <script> element: '<', '>' and '&' become \\u escapes (still valid JSON)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_head_view(data: dict, title: str = "") -> str:
    """The HTML document of a head view (see `head_view_data` for `data`)."""
    sentences = "\n".join(
        f'<p class="sentence"><b>{side}:</b> '
        + " ".join(f'<span class="tok">{html.escape(token)}</span>' for token in data[side])
        + "</p>"
        for side in ("source", "target")
    )
    parts = {
        "TITLE": html.escape(title or "attention head view"),
        "SENTENCES": sentences,
        "DATA": _script_json(data),
    }
    # One pass, so that a title or token that happens to read "__DATA__" is never substituted again.
    return re.sub(r"__(TITLE|SENTENCES|DATA)__", lambda m: parts[m.group(1)], _TEMPLATE)


def write_head_view(
    path: str | Path,
    *,
    source_tokens: Sequence[str],
    target_in_tokens: Sequence[str],
    target_out_tokens: Sequence[str],
    encoder: Sequence[Tensor] | None,
    decoder: Sequence[Tensor] | None,
    cross: Sequence[Tensor] | None,
    title: str = "",
    overwrite: bool = False,
) -> Path:
    """Write one sentence pair's attention as a standalone interactive HTML file.

    Args:
        path: the .html file to write; its folder is created if missing.
        source_tokens: the S source tokens.
        target_in_tokens: the T tokens the decoder reads (``<s>`` first): the columns of decoder maps.
        target_out_tokens: the T tokens it generates (``</s>`` last): the rows of decoder and cross maps.
        encoder: per layer, (H, S, S) encoder self-attention, or None to leave it out.
        decoder: per layer, (H, T, T) decoder self-attention, or None.
        cross: per layer, (H, T, S) cross-attention, or None.
        title: shown as the page title and heading.
        overwrite: replace an existing file instead of refusing.

    Returns:
        The path written.

    Raises:
        FileExistsError: the file exists and overwrite is False.
    """
    path = Path(path)
    data = head_view_data(
        source_tokens=source_tokens,
        target_in_tokens=target_in_tokens,
        target_out_tokens=target_out_tokens,
        encoder=encoder,
        decoder=decoder,
        cross=cross,
    )
    document = render_head_view(data, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("w" if overwrite else "x", encoding="utf-8") as file:
            file.write(document)
    except FileExistsError:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it") from None
    return path


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.2em; }
  .sentence { margin: 0.2em 0; }
  .sentence .tok { background: #f2f2f2; border-radius: 3px; padding: 0 3px; margin-right: 2px; }
  .controls { margin: 1em 0 0.5em; display: flex; flex-wrap: wrap; gap: 1em; align-items: center; }
  .heads label { display: inline-block; padding: 2px 6px; margin-right: 3px; border-radius: 3px;
                 color: white; cursor: pointer; font-size: 0.85em; }
  .heads input { vertical-align: middle; }
  svg text { font-size: 13px; cursor: default; }
  svg text.dim { fill: #bbb; }
  svg text.focus { font-weight: bold; }
  svg text.side { font-size: 12px; fill: #777; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
__SENTENCES__
<div class="controls">
  <label>attention <select id="kind"></select></label>
  <label>layer <select id="layer"></select></label>
  <span class="heads" id="heads"></span>
  <button id="all" type="button">all heads</button>
  <button id="none" type="button">no heads</button>
</div>
<svg id="view" xmlns="http://www.w3.org/2000/svg"></svg>
<script type="application/json" id="attention-data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("attention-data").textContent);
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
const ROW = 22, TOP = 30, TEXT_W = 150, GAP = 220, MIN_WEIGHT = 0.01;
const SVG_NS = "http://www.w3.org/2000/svg";
const kindSelect = document.getElementById("kind");
const layerSelect = document.getElementById("layer");
const headBox = document.getElementById("heads");
const svg = document.getElementById("view");

function color(h) { return COLORS[h % COLORS.length]; }
function current() { return DATA.kinds[kindSelect.value]; }
function selectedHeads() {
  return Array.from(headBox.querySelectorAll("input")).filter(x => x.checked).map(x => Number(x.value));
}

function fillLayers() {
  const layers = current().layers;
  const keep = Math.min(Number(layerSelect.value) || 0, layers.length - 1);
  layerSelect.replaceChildren(...layers.map((_, i) => new Option("layer " + (i + 1), i)));
  layerSelect.value = keep;
}

function fillHeads() {
  const heads = current().layers[0].length;
  const checked = new Set(selectedHeads());
  const keepChoice = headBox.childElementCount === heads;
  headBox.replaceChildren();
  for (let h = 0; h < heads; h++) {
    const label = document.createElement("label");
    label.style.background = color(h);
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = h;
    box.checked = keepChoice ? checked.has(h) : true;
    box.addEventListener("change", draw);
    label.append(box, " head " + (h + 1));
    headBox.append(label);
  }
}

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return element;
}

function draw() {
  const kind = current();
  const weights = kind.layers[Number(layerSelect.value)];
  const heads = selectedHeads();
  const rows = Math.max(kind.queries.length, kind.keys.length);
  const leftX = TEXT_W, rightX = TEXT_W + GAP;
  svg.setAttribute("width", 2 * TEXT_W + GAP);
  svg.setAttribute("height", TOP + rows * ROW + 10);
  svg.replaceChildren();
  const y = i => TOP + i * ROW + ROW / 2;
  svg.append(svgElement("text", {x: leftX - 6, y: 14, "text-anchor": "end", class: "side"}));
  svg.lastChild.textContent = "query";
  svg.append(svgElement("text", {x: rightX + 6, y: 14, class: "side"}));
  svg.lastChild.textContent = "key";
  const lines = svgElement("g", {});
  svg.append(lines);
  for (const h of heads) {
    weights[h].forEach((row, q) => row.forEach((w, k) => {
      if (w < MIN_WEIGHT) return;
      const line = svgElement("line", {x1: leftX, y1: y(q), x2: rightX, y2: y(k), stroke: color(h),
                                       "stroke-width": 2, "stroke-opacity": w});
      line.dataset.q = q;
      line.dataset.k = k;
      lines.append(line);
    }));
  }
  const texts = [];
  const addToken = (token, i, side) => {
    const attributes = {y: y(i), "dominant-baseline": "middle"};
    Object.assign(attributes, side === "q" ? {x: leftX - 6, "text-anchor": "end"} : {x: rightX + 6});
    const text = svgElement("text", attributes);
    text.textContent = token;  // textContent, never innerHTML: tokens are shown as written
    text.dataset.side = side;
    text.dataset.i = i;
    text.addEventListener("mouseenter", () => focus(side, i, texts, lines));
    text.addEventListener("mouseleave", () => focus(null, -1, texts, lines));
    texts.push(text);
    svg.append(text);
  };
  kind.queries.forEach((token, i) => addToken(token, i, "q"));
  kind.keys.forEach((token, i) => addToken(token, i, "k"));
}

// Show only the lines of the hovered token and dim the tokens it does not reach.
function focus(side, i, texts, lines) {
  const other = side === "q" ? "k" : "q";
  const reached = new Set();
  for (const line of lines.children) {
    const mine = side === null || Number(line.dataset[side]) === i;
    line.style.display = mine ? "" : "none";
    if (mine && side !== null) reached.add(other + line.dataset[other]);
  }
  for (const text of texts) {
    const self = text.dataset.side === side && Number(text.dataset.i) === i;
    text.classList.toggle("focus", self);
    text.classList.toggle("dim", side !== null && !self && !reached.has(text.dataset.side + text.dataset.i));
  }
}

for (const [name, kind] of Object.entries(DATA.kinds)) kindSelect.append(new Option(kind.label, name));
kindSelect.addEventListener("change", () => { fillLayers(); fillHeads(); draw(); });
layerSelect.addEventListener("change", draw);
document.getElementById("all").addEventListener("click", () => {
  headBox.querySelectorAll("input").forEach(x => { x.checked = true; }); draw(); });
document.getElementById("none").addEventListener("click", () => {
  headBox.querySelectorAll("input").forEach(x => { x.checked = false; }); draw(); });
fillLayers();
fillHeads();
draw();
</script>
</body>
</html>
"""
