// The grid: every head of every layer of the shown kind as a small map; a click opens a head in the detail
// view, Shift/Ctrl-click overlays it in the lines view; the best-aligned cross-attention head is starred.

import {fmt, h, headName, sameHead} from "./dom.js";
import {drawMatrix} from "./heatmap.js";
import {HEAD_COLOURS} from "./lines.js";
import {KIND_TITLE} from "./controls.js";
import {openHead, state, toggleOverlay} from "./state.js";
import {SHORT, bestHead, defaultSort} from "./stats.js";

export const KIND_HELP = {
  encoder: "Each source token attends to every source token",
  decoder: "Each target position attends to the tokens read so far (grey: the masked future); a row is "
    + "labelled with the token generated there",
  cross: "Target → source: a row shows where the model looks to produce that word",
};

const ui = {};

export function gridSection() {
  ui.title = h("h2");
  ui.best = h("div", {class: "best-line", style: "display:none"});
  ui.grid = h("div", {id: "grid"});
  return [ui.title,
    h("div", {class: "hint"}, "Click a head to open it · Shift/Ctrl-click to overlay it in the lines view"),
    ui.best, ui.grid];
}

/** The colour of the lines view's `index`-th head (0 = the open head). */
export function headColour(index) {
  return HEAD_COLOURS[index % HEAD_COLOURS.length];
}

export function goldFor(data) {
  return state.kind === "cross" && state.gold && data.gold ? data.gold : null;
}

export function drawGrid(data, stats) {
  const kd = data.kinds[state.kind];
  const L = kd.weights.length;
  const H = kd.weights[0].length;
  const rows = kd.rows.length;
  const cols = kd.cols.length;
  const where = state.mode === "custom" ? "your sentence" : `step ${data.step}`;
  ui.title.replaceChildren(`${KIND_TITLE[state.kind]}`,
    h("span", {class: "sub"}, `${L} layers × ${H} heads · ${where}`));
  ui.title.title = KIND_HELP[state.kind];
  const best = bestHead(stats);
  if (best) {
    ui.best.style.display = "";
    ui.best.replaceChildren(...[
      "★ Best-aligned: ",
      h("button", {id: "best-head", onclick: () => openHead(best)}, headName(best)),
      ` · agreement ${fmt(best.value)}${stats.kinds[state.kind].aer ? ` · AER ${fmt(best.aer)}` : ""}`,
      stats.step !== data.step ? h("span", {class: "note"}, ` · step ${stats.step}`) : null,
    ].filter(Boolean));
  } else {
    ui.best.style.display = "none";
  }
  const avail = 456 - 28 - H * 10;
  const box = Math.max(34, Math.min(100, Math.floor(avail / H)));
  const scale = box / Math.max(rows, cols);
  const w = Math.max(8, Math.round(cols * scale));
  const hgt = Math.max(8, Math.round(rows * scale));
  const sortKey = (state.sort[state.kind] || defaultSort(stats)).key;
  const kindStats = stats && stats.kinds[state.kind];
  const caption = kindStats && kindStats[sortKey] ? sortKey : null;
  const gold = goldFor(data);
  ui.grid.style.gridTemplateColumns = `24px repeat(${H}, auto)`;
  const nodes = [h("span")];
  for (let head = 0; head < H; head++) nodes.push(h("span", {class: "axis"}, `H${head + 1}`));
  for (let layer = 0; layer < L; layer++) {
    nodes.push(h("span", {class: "axis"}, `L${layer + 1}`));
    for (let head = 0; head < H; head++) {
      const canvas = h("canvas");
      drawMatrix(canvas, kd.weights[layer][head], w, hgt,
        {gold: scale >= 8 ? gold : null, causal: state.kind === "decoder"});
      const me = {layer, head};
      const overlayIndex = state.overlay.findIndex((o) => sameHead(o, me));
      const cell = h("div", {
        class: "head-cell", "data-layer": String(layer), "data-head": String(head),
        title: `${headName(me)}: click to open, Shift/Ctrl-click to overlay in the lines view`,
        onclick: (e) => (e.shiftKey || e.ctrlKey || e.metaKey ? toggleOverlay(me) : openHead(me)),
      }, canvas, h("span", {class: "cap"},
        caption ? `${SHORT[caption] || caption} ${fmt(kindStats[caption][layer][head])}` : ""));
      if (sameHead(me, state.head)) cell.classList.add("selected");
      if (overlayIndex >= 0) {
        cell.classList.add("overlay");
        cell.style.borderColor = headColour(overlayIndex + 1);
        cell.append(h("span", {class: "dot", style: `background:${headColour(overlayIndex + 1)}`}));
      }
      if (best && sameHead(best, me)) {
        cell.classList.add("best");
        cell.append(h("span", {class: "badge", title: "best-aligned head (highest agreement with the gold alignment)"},
          "★ best"));
      }
      nodes.push(cell);
    }
  }
  ui.grid.replaceChildren(...nodes);
}
