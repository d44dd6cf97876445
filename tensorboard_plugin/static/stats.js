// The statistics table: one row per head of the shown kind, one column per head statistic (measured on the
// validation set at a logged step), sortable; the best-aligned cross-attention head starred.

import {fmt, h, sameHead} from "./dom.js";
import {KIND_BUTTON} from "./controls.js";
import {draw, openHead, state, toggleOverlay} from "./state.js";

// Statistics where lower is better are sorted ascending on first click, the others descending.
const LOWER_IS_BETTER = new Set(["entropy", "distance", "aer"]);
const STAT_ORDER = ["entropy", "distance", "diagonal", "previous", "next", "agreement", "aer"];
export const SHORT = {entropy: "entropy", distance: "dist", diagonal: "diag", previous: "prev", next: "next",
  agreement: "agr", aer: "AER"};

const ui = {};

export function statsSection() {
  ui.title = h("h2");
  ui.table = h("table", {id: "stats-table"});
  return [ui.title, h("div", {class: "stats-wrap"}, ui.table)];
}

/** The head with the highest agreement with the gold alignment (ties: the lower AER), or null. */
export function bestHead(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (!kindStats || !kindStats.agreement) return null;
  let best = null;
  kindStats.agreement.forEach((row, layer) => row.forEach((v, head) => {
    const aer = kindStats.aer ? kindStats.aer[layer][head] : 0;
    if (!best || v > best.value || (v === best.value && aer < best.aer)) best = {layer, head, value: v, aer};
  }));
  return best;
}

export function defaultSort(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (kindStats && kindStats.agreement) return {key: "agreement", dir: -1};
  return {key: "layer", dir: 1};
}

// The statistics present, in a fixed reading order (unknown ones last).
export function statKeys(kindStats) {
  return STAT_ORDER.filter((k) => kindStats[k]).concat(Object.keys(kindStats).filter((k) => !STAT_ORDER.includes(k)));
}

// Hovering a table row outlines its head in the grid.
function peek({layer, head}, on) {
  const cell = document.querySelector(`#grid .head-cell[data-layer="${layer}"][data-head="${head}"]`);
  if (cell) cell.classList.toggle("peek", on);
}

export function drawStats(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (!kindStats) {
    ui.title.replaceChildren("Head statistics", h("span", {class: "sub"}, "none logged for this run"));
    ui.table.replaceChildren();
    return;
  }
  ui.title.replaceChildren("Head statistics",
    h("span", {class: "sub"}, `${KIND_BUTTON[state.kind].toLowerCase()} · validation set at step ${stats.step}`));
  const keys = statKeys(kindStats);
  const sort = state.sort[state.kind] || defaultSort(stats);
  const L = kindStats[keys[0]].length;
  const H = kindStats[keys[0]][0].length;
  const items = [];
  for (let layer = 0; layer < L; layer++) for (let head = 0; head < H; head++) items.push({layer, head});
  const value = (it, key) => (key === "layer" ? it.layer * 1000 + it.head : key === "head" ? it.head * 1000 + it.layer
    : kindStats[key][it.layer][it.head]);
  items.sort((a, b) => sort.dir * (value(a, sort.key) - value(b, sort.key)) || a.layer - b.layer || a.head - b.head);
  const ranges = Object.fromEntries(keys.map((k) => {
    const flat = kindStats[k].flat();
    return [k, [Math.min(...flat, 0), Math.max(...flat)]];
  }));
  const best = bestHead(stats);
  const descriptions = stats.descriptions || {};
  const header = (key, label, title) => {
    const sorted = sort.key === key;
    return h("th", {
      "data-key": key, title: title || "", "aria-sort": sorted ? (sort.dir > 0 ? "ascending" : "descending") : null,
      onclick: () => {
        const dir = sorted ? -sort.dir : LOWER_IS_BETTER.has(key) || key === "layer" || key === "head" ? 1 : -1;
        state.sort[state.kind] = {key, dir};
        draw();
      },
    }, label, sorted ? h("span", {class: "arrow"}, sort.dir > 0 ? "▲" : "▼") : "");
  };
  const thead = h("thead", {}, h("tr", {},
    header("layer", "Layer", "layer (1 = nearest the input)"), header("head", "Head", "head within its layer"),
    keys.map((k) => header(k, k, descriptions[k] || k))));
  const tbody = h("tbody", {}, items.map((it) => {
    const tr = h("tr", {
      "data-layer": String(it.layer), "data-head": String(it.head),
      onclick: (e) => (e.shiftKey || e.ctrlKey || e.metaKey ? toggleOverlay(it) : openHead(it)),
      onmouseenter: () => peek(it, true),
      onmouseleave: () => peek(it, false),
    }, h("td", {}, `L${it.layer + 1}`), h("td", {}, `H${it.head + 1}`),
    keys.map((k) => {
      const v = kindStats[k][it.layer][it.head];
      const [lo, hi] = ranges[k];
      const share = hi > lo ? Math.round((100 * (v - lo)) / (hi - lo)) : 0;
      const bar = `linear-gradient(90deg,rgba(28,126,214,.13) ${share}%,transparent ${share}%)`;
      return h("td", {style: `background:${bar}`}, fmt(v));
    }));
    if (sameHead(it, state.head)) tr.classList.add("selected");
    if (best && sameHead(best, it)) tr.classList.add("best");
    return tr;
  }));
  ui.table.replaceChildren(thead, tbody);
}
