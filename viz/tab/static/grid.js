// The grid: every map of the shown kind as a small picture — every head of every layer, and for cross maps of
// an explanation method its layers' own maps (a method without heads has only those); a click opens a map in
// the detail view, Shift/Ctrl-click overlays it in the lines view. Each map of a sentence with gold links
// carries its AER badge; the best-aligned map is starred.

import {fmt, h, sameHead, textWidth} from "./dom.js";
import {drawMatrix} from "./heatmap.js";
import {HEAD_COLOURS} from "./lines.js";
import {aerOf, aerText, mapName, mapOf, scaleFor} from "./maps.js";
import {isSupervised, kindOf, kindTitle, openHead, state, toggleOverlay} from "./state.js";
import {bestHead, defaultSort, shortName} from "./stats.js";

const ui = {};

export function gridSection() {
  ui.title = h("h2");
  ui.best = h("div", {class: "best-line", style: "display:none"});
  ui.grid = h("div", {id: "grid"});
  return [ui.title,
    h("div", {class: "hint"}, "Click a map to open it · Shift/Ctrl-click to overlay it in the lines view"),
    ui.best, ui.grid];
}

/** The colour of the lines view's `index`-th map (0 = the open one). */
export function headColour(index) {
  return HEAD_COLOURS[index % HEAD_COLOURS.length];
}

/** The best map of the shown maps, or null: for attention weights the head of highest agreement on the
 * validation set (statistics); for an explanation method its lowest AER over the explanation sentences
 * (./explanations): its best head, or its best layer when it has no heads. */
export function bestMap(set, stats, explanations) {
  if (set.weights) {
    const best = bestHead(stats);
    if (!best) return null;
    const aer = stats.kinds[state.kind].aer ? ` · AER ${fmt(best.aer)}` : "";
    return {map: best, text: `agreement ${fmt(best.value)}${aer}`, step: stats.step,
      title: "best-aligned head (highest agreement with the gold alignment)"};
  }
  const scores = explanations && explanations.methods ? explanations.methods[set.method] : null;
  if (!scores) return null;
  let best = null;
  const consider = (map, aer) => {
    if (Number.isFinite(aer) && (!best || aer < best.aer)) best = {map, aer}; // null: no AER, no candidate
  };
  if (scores.head_aer) {
    scores.head_aer.forEach((row, layer) => row.forEach((aer, head) => consider({layer, head}, aer)));
  } else {
    scores.aer.forEach((aer, layer) => consider({layer, head: null}, aer));
  }
  return best && {map: best.map, text: `AER ${fmt(best.aer)} on the explanation sentences`,
    step: explanations.step, title: "the map of this method with the lowest AER against the gold alignment"};
}

export function drawGrid(data, set, stats, explanations) {
  const L = set.layers.length;
  const H = set.heads;
  const layerMaps = Boolean(set.perLayer);
  const rows = set.rows.length;
  const cols = set.cols.length;
  const where = state.mode === "custom" ? "your sentence" : `step ${data.step}`;
  const shape = H ? `${L} layers × ${H} heads${layerMaps ? " and each layer's map" : ""}` : "one map per layer";
  const named = !set.weights; // an explanation method's own maps: named by its label
  ui.title.replaceChildren(named ? set.label : kindTitle(state.kind),
    h("span", {class: "sub"}, `${named ? "target → source · " : ""}${shape} · ${where}`));
  ui.title.title = kindOf(state.kind).help;
  const best = bestMap(set, stats, explanations);
  if (best) {
    ui.best.style.display = "";
    ui.best.replaceChildren(...[
      "★ Best-aligned: ",
      h("button", {id: "best-head", onclick: () => openHead(best.map)}, mapName(set, best.map)),
      ` · ${best.text}`,
      best.step !== data.step ? h("span", {class: "note"}, ` · step ${best.step}`) : null,
    ].filter(Boolean));
  } else {
    ui.best.style.display = "none";
  }
  const columns = H + (layerMaps ? 1 : 0);
  // The left column's 456 px less the 24 px axis; each map's cell adds 10 px (padding, border), 4 px of gap.
  const avail = 456 - 24 - columns * 14;
  const box = Math.max(34, Math.min(100, Math.floor(avail / Math.max(columns, 2))));
  const scale = box / Math.max(rows, cols);
  const w = Math.max(8, Math.round(cols * scale));
  const hgt = Math.max(8, Math.round(rows * scale));
  // Head statistics describe attention heads: their caption goes under attention weights only.
  const kindStats = set.weights ? stats && stats.kinds[state.kind] : null;
  const sortKey = (state.sort[state.kind] || defaultSort(stats)).key;
  const caption = kindStats && kindStats[sortKey] ? sortKey : null;
  ui.grid.style.gridTemplateColumns = `24px repeat(${columns}, auto)`;
  const nodes = [h("span")];
  for (let head = 0; head < H; head++) nodes.push(h("span", {class: "axis"}, `H${head + 1}`));
  if (layerMaps) {
    nodes.push(h("span", {class: "axis", title: H ? "the layer's own map (all heads together)" : ""},
      H ? "all" : ""));
  }
  const cell = (me) => {
    const matrix = mapOf(set, me);
    const canvas = h("canvas");
    drawMatrix(canvas, matrix, w, hgt, {gold: scale >= 8 ? set.gold : null, causal: kindOf(state.kind).causal,
      ...scaleFor(set, matrix)});
    const overlayIndex = state.overlay.findIndex((o) => sameHead(o, me));
    const isHead = me.head !== null;
    const aer = aerOf(set, me);
    const node = h("div", {
      class: isHead ? "head-cell" : "layer-cell", "data-layer": String(me.layer),
      "data-head": isHead ? String(me.head) : null,
      title: `${mapName(set, me)}: click to open, Shift/Ctrl-click to overlay in the lines view`,
      onclick: (e) => (e.shiftKey || e.ctrlKey || e.metaKey ? toggleOverlay(me) : openHead(me)),
    }, canvas, caption && isHead ? statCaption(shortName(stats, caption), kindStats[caption][me.layer][me.head], box)
      : captionLine(H ? "" : set.layers[me.layer], box),
    aer === null ? null : h("span", {class: "aer-badge", "data-aer": String(aer),
      title: "alignment error rate of this map on this sentence against its gold links (lower is better)"},
    aerText(aer)));
    if (sameHead(me, state.head)) node.classList.add("selected");
    if (overlayIndex >= 0) {
      node.classList.add("overlay");
      node.style.borderColor = headColour(overlayIndex + 1);
      node.append(h("span", {class: "dot", style: `background:${headColour(overlayIndex + 1)}`}));
    }
    if (isSupervised(me)) {
      node.classList.add("supervised");
      node.append(h("span", {class: "sup-badge", title: "the head guided alignment trained to follow word links"},
        "⚑ sup"));
    }
    if (best && sameHead(best.map, me)) {
      node.classList.add("best");
      node.append(h("span", {class: "badge", title: best.title}, "★ best"));
    }
    return node;
  };
  for (let layer = 0; layer < L; layer++) {
    nodes.push(h("span", {class: "axis", title: set.layers[layer]}, H ? `L${layer + 1}` : ""));
    for (let head = 0; head < H; head++) nodes.push(cell({layer, head}));
    if (layerMaps) nodes.push(cell({layer, head: null}));
  }
  ui.grid.replaceChildren(...nodes);
}

const CAPTION_PX = 10; // the captions' font size (style.js, .cap)

// A caption under a map, on one line at most `width` px wide: `text`, or `short` where `text` would not fit
// (an ellipsis ends what still does not); the tooltip holds the whole text.
function captionLine(text, width, short = text) {
  const shown = textWidth(text, CAPTION_PX) + 4 <= width ? text : short; // 4 px: tabular digits are wider
  return h("span", {class: "cap", style: `max-width:${width}px`, title: text || null}, shown);
}

// A statistic's caption: "agreement 0.831", or "agr 0.831" under a narrow map.
function statCaption(name, value, width) {
  return captionLine(`${name} ${fmt(value)}`, width, `${name.slice(0, 3)} ${fmt(value)}`);
}
