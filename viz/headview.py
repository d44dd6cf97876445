"""A standalone, interactive HTML head view of one sentence's attention, in the spirit of BertViz's head view.

Shape legend:
    H   heads
    S   source length
    T   target length

The page is drawn by the ATTENTION tab's own frontend modules (``viz/tab/static/lines.js`` for the lines view,
``heatmap.js`` for the maps, ``style.js`` for the style sheet), embedded in the file as ``data:`` URL modules,
so that the tab and this file show attention the same way and cannot drift apart. The attention is embedded as
JSON in a `<script type="application/json">` tag; nothing is fetched, so the file opens from disk in any
current browser. Pick the attention kind and layer from the dropdowns and the heads with the coloured
checkboxes; query tokens are on the left, key tokens on the right, and each line's opacity and width grow with
its attention weight. Hovering a token shows only its lines. Below, each chosen head's map as a heatmap.
"""

import base64
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from analysis.axes import KIND_LABELS, KINDS, attention_axes

DECIMALS = 4  # weights are rounded in the file to keep it small
STATIC = Path(__file__).parent / "tab" / "static"  # the tab's frontend, whose modules draw this page too
MODULES = {"LINES_JS": "lines.js", "HEATMAP_JS": "heatmap.js", "STYLE_JS": "style.js"}


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


def module_url(name: str) -> str:
    """One of the tab's frontend modules (``viz/tab/static/<name>``) as a ``data:`` URL a page can import.

    Base64, so that nothing in the code (a ``</script>``, a quote) can end the importing script early."""
    code = (STATIC / name).read_bytes()
    return "data:text/javascript;base64," + base64.b64encode(code).decode("ascii")


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
        **{key: module_url(name) for key, name in MODULES.items()},
    }
    # One pass, so that a title or token that happens to read "__DATA__" is never substituted again.
    return re.sub(r"__(TITLE|SENTENCES|DATA|LINES_JS|HEATMAP_JS|STYLE_JS)__", lambda m: parts[m.group(1)],
                  _TEMPLATE)


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
  /* The tab's style sheet (style.js) is added by the code below; these are this page's own parts. */
  body { margin: 1.5em; }
  h1 { font-size: 1.2em; }
  .sentence { margin: 0.2em 0; }
  .sentence .tok { background: #f2f2f2; border-radius: 3px; padding: 0 3px; margin-right: 2px; }
  .controls { margin: 1em 0 0.5em; display: flex; flex-wrap: wrap; gap: 1em; align-items: center; }
  .heads label { display: inline-block; padding: 2px 6px; margin-right: 3px; border-radius: 3px;
                 color: white; cursor: pointer; font-size: 0.85em; }
  .heads input { vertical-align: middle; }
  .maps { display: flex; flex-wrap: wrap; gap: 14px; margin-top: 0.8em; align-items: flex-start; }
  .maps figure { margin: 0; }
  .maps figcaption { font-size: 12px; margin-bottom: 3px; }
  .maps .sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
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
  <span id="scale"></span>
</div>
<div id="view"></div>
<div class="maps" id="maps"></div>
<script type="application/json" id="attention-data">__DATA__</script>
<script type="module">
// The ATTENTION tab's own modules (viz/tab/static), embedded by viz/headview.py.
import {HEAD_COLOURS, linesView} from "__LINES_JS__";
import {colourBar, drawMatrix} from "__HEATMAP_JS__";
import {CSS} from "__STYLE_JS__";

const DATA = JSON.parse(document.getElementById("attention-data").textContent);
const kindSelect = document.getElementById("kind");
const layerSelect = document.getElementById("layer");
const headBox = document.getElementById("heads");
const view = document.getElementById("view");
const maps = document.getElementById("maps");
const sheet = document.createElement("style");
sheet.textContent = CSS;
document.head.prepend(sheet);  // first, so that this page's own rules above win
document.getElementById("scale").append(colourBar());

function colour(h) { return HEAD_COLOURS[h % HEAD_COLOURS.length]; }
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
    label.style.background = colour(h);
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = h;
    box.checked = keepChoice ? checked.has(h) : true;
    box.addEventListener("change", draw);
    label.append(box, " head " + (h + 1));
    headBox.append(label);
  }
}

// One heatmap per chosen head; hovering a cell names its query, key and weight.
function headMap(kind, h, matrix) {
  const rows = kind.queries.length, cols = kind.keys.length;
  const cell = Math.max(8, Math.min(28, Math.floor(320 / Math.max(rows, cols))));
  const canvas = document.createElement("canvas");
  const causal = kindSelect.value === "decoder";  // a causal mask hides the cells above the diagonal
  drawMatrix(canvas, matrix, cols * cell, rows * cell, {numbers: true, causal});
  canvas.addEventListener("mousemove", (e) => {
    const i = Math.min(rows - 1, Math.floor(e.offsetY / cell));
    const j = Math.min(cols - 1, Math.floor(e.offsetX / cell));
    canvas.title = `${kind.queries[i]} \u2192 ${kind.keys[j]}: ${matrix[i][j].toFixed(3)}`;
  });
  const caption = document.createElement("figcaption");
  const swatch = document.createElement("span");
  swatch.className = "sw";
  swatch.style.background = colour(h);
  caption.append(swatch, "head " + (h + 1));
  const figure = document.createElement("figure");
  figure.append(caption, canvas);
  return figure;
}

function draw() {
  const kind = current();
  const weights = kind.layers[Number(layerSelect.value)];
  const chosen = selectedHeads();
  const heads = chosen.map(h => ({label: "head " + (h + 1), colour: colour(h), matrix: weights[h]}));
  const lines = linesView({rows: kind.queries, cols: kind.keys, heads, width: 560, step: 22});
  // Hovering a token draws only its lines (setFocus), as in the tab.
  lines.node.addEventListener("mouseover", (e) => {
    const token = e.target.closest(".lv-token");
    if (!token) return;
    const lit = new Set([Number(token.dataset.index)]);
    const none = new Set();
    lines.setFocus(token.dataset.side === "query" ? {rows: lit, cols: none} : {rows: none, cols: lit});
  });
  lines.node.addEventListener("mouseleave", () => lines.setFocus(null));
  view.replaceChildren(lines.node);
  maps.replaceChildren(...chosen.map(h => headMap(kind, h, weights[h])));
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
