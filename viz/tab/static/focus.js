// Hover focus in the detail view: which tokens and bands a hovered (or pinned) token lights.
//
// Hovering a token sets a focus, a set R of lit rows and a set C of lit columns (clicking the token pins it until
// clicked again).
//   * matrix token `.token[data-axis][data-index=i]` in #detail: in self-attention maps a token is both a query
//     and a key, so its row and its column light up: encoder, row or column i: R = C = {i}; decoder (rows are
//     the tokens generated, columns the tokens read, so the token generated at i is read at i + 1): row i gives
//     R = {i}, C = {i + 1}, column j gives C = {j}, R = {j - 1} (no column for the last row, "</s>", and no
//     row for column 0, "<s>"). In cross maps R = {i} for a row token and C = {i} for a column token.
//   * lines-view token `.lv-token[data-side="query"|"key"][data-index=i]`: R = {i} (query) or C = {i} (key).
// Then exactly these carry `highlight`: in every `.matrix` of #detail, `.token[data-axis="row"]` and
// `.band[data-axis="row"]` with data-index in R, `.token[data-axis="col"]` and `.band[data-axis="col"]` with
// data-index in C; in #lines-view, the query `.lv-token`s of R and key `.lv-token`s of C (and only the lines
// leaving R or reaching C are drawn). Leaving the token clears all of it. Hovering a matrix cell only shows
// its value in a tooltip (.tooltip) and marks its two labels with `hl-soft`, not `highlight`.

import {state} from "./state.js";

// What the detail view shows now: its root node, the lines view, the self-attention shift and the map's shape.
const view = {root: null, lines: null, shift: null, shape: [0, 0], onLit: null};

function focusFromNode(node) {
  if (!node) return null;
  if (node.classList.contains("token")) {
    return {axis: node.dataset.axis, index: Number(node.dataset.index), source: "matrix"};
  }
  return {axis: node.dataset.side === "query" ? "row" : "col", index: Number(node.dataset.index), source: "lines"};
}

// In a self-attention map, the column of row i's token: i (encoder: rows and columns are the same tokens) or
// i + 1 (decoder: the token generated at i is read at i + 1); null when the labels do not line up either way.
export function selfShift(rows, cols) {
  const same = (a, b) => a.length === b.length && a.every((t, k) => t === b[k]);
  if (same(rows, cols)) return 0;
  if (rows.length === cols.length && same(rows.slice(0, -1), cols.slice(1))) return 1;
  return null;
}

function litSets(focus) {
  if (!focus) return null;
  const rows = new Set();
  const cols = new Set();
  const shift = view.shift;
  if (focus.source === "matrix" && shift !== null) {
    const row = focus.axis === "row" ? focus.index : focus.index - shift;
    const col = focus.axis === "col" ? focus.index : focus.index + shift;
    if (row >= 0 && row < view.shape[0]) rows.add(row);
    if (col >= 0 && col < view.shape[1]) cols.add(col);
  } else if (focus.axis === "row") {
    rows.add(focus.index);
  } else {
    cols.add(focus.index);
  }
  return {rows, cols};
}

/**
 * Follow the tokens of `body` (inside the detail view `root`): `lines` is the lines view's handle, `shift`
 * what `selfShift` says of the map (null for cross maps), `shape` its [rows, cols]; `onLit(lit)` (optional)
 * hears every change of the lit sets ({rows, cols} of Sets, or null).
 */
export function wireFocus(root, body, {lines, shift, shape, onLit = null}) {
  Object.assign(view, {root, lines, shift, shape, onLit});
  const target = (e) => e.target.closest && e.target.closest(".token, .lv-token");
  body.addEventListener("mouseover", (e) => {
    const node = target(e);
    if (!node) return;
    state.focus = focusFromNode(node);
    applyFocus();
  });
  body.addEventListener("mouseout", (e) => {
    const from = target(e);
    if (!from) return;
    const to = e.relatedTarget && e.relatedTarget.closest ? e.relatedTarget.closest(".token, .lv-token") : null;
    if (to === from) return;
    state.focus = null;
    applyFocus();
  });
  body.addEventListener("click", (e) => {
    const node = target(e);
    if (!node) return;
    const f = focusFromNode(node);
    const same = state.pinned && state.pinned.axis === f.axis && state.pinned.index === f.index
      && state.pinned.source === f.source;
    state.pinned = same ? null : f;
    applyFocus();
  });
  applyFocus();
}

function applyFocus() {
  const lit = litSets(state.focus || state.pinned);
  for (const node of view.root.querySelectorAll(".matrix .token, .matrix .band")) {
    const i = Number(node.dataset.index);
    const on = Boolean(lit) && (node.dataset.axis === "row" ? lit.rows.has(i) : lit.cols.has(i));
    node.classList.toggle("highlight", on);
  }
  if (view.lines) view.lines.setFocus(lit);
  if (view.onLit) view.onLit(lit);
}
