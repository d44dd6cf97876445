// The statistics table: one row per head of the shown kind, one column per head statistic (measured on the
// validation set at a logged step; their names, short names, descriptions and directions come from the
// statistics route's `definitions`), and for cross-attention one AER column per explanation method with heads
// (over the explanation sentences, from ./explanations); sortable; the best-aligned cross-attention head starred.

import {fmt, h, sameHead} from "./dom.js";
import {aligns, draw, isSupervised, kindOf, openHead, state, toggleOverlay} from "./state.js";

const METHOD_KEY = "aer:"; // column keys of the methods' AER: "aer:<method>"

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
    if (!Number.isFinite(v)) return; // a head without a value is no candidate
    const known = kindStats.aer?.[layer]?.[head];
    const aer = Number.isFinite(known) ? known : Infinity;
    if (!best || v > best.value || (v === best.value && aer < best.aer)) best = {layer, head, value: v, aer};
  }));
  return best;
}

export function defaultSort(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (kindStats && kindStats.agreement) return {key: "agreement", dir: -1};
  return {key: "layer", dir: 1};
}

const definitionsOf = (stats) => Object.fromEntries(((stats && stats.definitions) || []).map((d) => [d.name, d]));

/** A statistic's short name (column heading, grid caption), as the statistics route defines it. */
export function shortName(stats, key) {
  return definitionsOf(stats)[key]?.short || key;
}

// The statistics present, in the definitions' reading order (statistics they do not define last).
export function statKeys(kindStats, stats) {
  const order = ((stats && stats.definitions) || []).map((d) => d.name);
  return order.filter((k) => kindStats[k]).concat(Object.keys(kindStats).filter((k) => !order.includes(k)));
}

// Which way a first click sorts: better first where a direction is defined; a statistic that only describes a
// head (no better side) from small to large, a share (bounded) from large to small.
function firstDirection(definition) {
  if (!definition) return -1;
  if (definition.lower_is_better === null || definition.lower_is_better === undefined) {
    return definition.bounded ? -1 : 1;
  }
  return definition.lower_is_better ? 1 : -1;
}

// The methods with heads whose AER over the explanation sentences the table shows (cross-attention only).
function methodColumns(explanations) {
  if (!aligns() || !explanations || !explanations.methods) return [];
  const known = new Map((state.run.methods || []).map((m) => [m.name, m]));
  return Object.entries(explanations.methods).filter(([name, m]) => m.head_aer && known.has(name))
    .map(([name, m]) => ({key: `${METHOD_KEY}${name}`, name, label: m.label, values: m.head_aer}));
}

/** A method's label short enough for a column heading: the name in its brackets, else its first words. */
function shortLabel(label) {
  const bracket = /\(([^)]+)\)/.exec(label);
  if (bracket) return bracket[1];
  return label.length <= 16 ? label : `${label.slice(0, 15)}…`;
}

// Hovering a table row outlines its head in the grid.
function peek({layer, head}, on) {
  const cell = document.querySelector(`#grid .head-cell[data-layer="${layer}"][data-head="${head}"]`);
  if (cell) cell.classList.toggle("peek", on);
}

export function drawStats(stats, explanations) {
  const kindStats = stats && stats.kinds[state.kind];
  if (!kindStats) {
    ui.title.replaceChildren("Head statistics", h("span", {class: "sub"}, "none logged for this run"));
    ui.table.replaceChildren();
    return;
  }
  ui.title.replaceChildren("Head statistics",
    h("span", {class: "sub"}, `${kindOf(state.kind).short.toLowerCase()} · validation set at step ${stats.step}`));
  const definitions = definitionsOf(stats);
  const methods = methodColumns(explanations);
  const columns = [
    ...statKeys(kindStats, stats).map((k) => {
      const d = definitions[k];
      return {key: k, label: d?.short || k, title: d?.description || (stats.descriptions || {})[k] || k,
        values: kindStats[k], first: firstDirection(d), bounded: Boolean(d?.bounded)};
    }),
    ...methods.map((m) => ({key: m.key, label: h("span", {}, "AER ", h("small", {}, shortLabel(m.label))),
      title: `AER of ${m.label}, per head, over the explanation sentences at step ${explanations.step} `
        + "(lower is better)", values: m.values, first: 1, bounded: true,
      method: m.name})),
  ];
  const byKey = Object.fromEntries(columns.map((c) => [c.key, c]));
  const sort = state.sort[state.kind] && (byKey[state.sort[state.kind].key] || ["layer", "head"]
    .includes(state.sort[state.kind].key)) ? state.sort[state.kind] : defaultSort(stats);
  const L = columns[0].values.length;
  const H = columns[0].values[0].length;
  const items = [];
  for (let layer = 0; layer < L; layer++) for (let head = 0; head < H; head++) items.push({layer, head});
  const value = (it, key) => (key === "layer" ? it.layer * 1000 + it.head : key === "head" ? it.head * 1000 + it.layer
    : byKey[key].values[it.layer]?.[it.head] ?? NaN);
  // Heads without a value (NaN, served as null) go last in either direction.
  const missing = (it) => !Number.isFinite(value(it, sort.key));
  items.sort((a, b) => missing(a) - missing(b) || sort.dir * (value(a, sort.key) - value(b, sort.key))
    || a.layer - b.layer || a.head - b.head);
  const ranges = Object.fromEntries(columns.map((c) => {
    const flat = c.values.flat().filter(Number.isFinite);
    return [c.key, c.bounded ? [0, 1] : [Math.min(...flat, 0), Math.max(...flat)]];
  }));
  const best = bestHead(stats);
  const header = (key, label, title, first = 1, extra = {}) => {
    const sorted = sort.key === key;
    return h("th", {
      "data-key": key, title: title || "", "aria-sort": sorted ? (sort.dir > 0 ? "ascending" : "descending") : null,
      ...extra,
      onclick: () => {
        state.sort[state.kind] = {key, dir: sorted ? -sort.dir : first};
        draw();
      },
    }, label, sorted ? h("span", {class: "arrow"}, sort.dir > 0 ? "▲" : "▼") : "");
  };
  const thead = h("thead", {}, h("tr", {},
    header("layer", "Layer", "layer (1 = nearest the input)"), header("head", "Head", "head within its layer"),
    columns.map((c) => header(c.key, c.label, c.title, c.first,
      c.method ? {class: c.method === state.method ? "method shown" : "method"} : {}))));
  const tbody = h("tbody", {}, items.map((it) => {
    const tr = h("tr", {
      "data-layer": String(it.layer), "data-head": String(it.head),
      onclick: (e) => (e.shiftKey || e.ctrlKey || e.metaKey ? toggleOverlay(it) : openHead(it)),
      onmouseenter: () => peek(it, true),
      onmouseleave: () => peek(it, false),
    }, h("td", {}, `L${it.layer + 1}`), h("td", {}, `H${it.head + 1}`, isSupervised(it)
      ? h("span", {class: "sup-key", title: "the head guided alignment trained to follow word links"}, " ⚑") : null),
    columns.map((c) => {
      const v = c.values[it.layer]?.[it.head];
      const [lo, hi] = ranges[c.key];
      const share = hi > lo && Number.isFinite(v) ? Math.round((100 * (v - lo)) / (hi - lo)) : 0;
      const bar = `linear-gradient(90deg,rgba(28,126,214,.13) ${share}%,transparent ${share}%)`;
      return h("td", {"data-key": c.key, class: c.method ? "method" : null, style: `background:${bar}`}, fmt(v));
    }));
    if (sameHead(it, state.head)) tr.classList.add("selected");
    if (best && sameHead(best, it)) tr.classList.add("best");
    if (isSupervised(it)) tr.classList.add("supervised");
    return tr;
  }));
  ui.table.replaceChildren(thead, tbody);
}
