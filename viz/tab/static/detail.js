// The detail view: the open map, big, with its tokens and its AER badge; a second map when comparing with another
// step or run; the lines view of the open and overlaid maps; the map's statistics or scores and their trend over
// training; for decoder and cross maps the logit-lens panel of the hovered target position.

import {cached, explanationsUrl, statisticsUrl} from "./api.js";
import {fmt, h, hideTooltip, showTooltip, sparkline, textWidth} from "./dom.js";
import {selfShift, wireFocus} from "./focus.js";
import {GOLD_COLOUR, colourBar, drawMatrix} from "./heatmap.js";
import {lensNote, lensPanel} from "./lens.js";
import {linesView} from "./lines.js";
import {headColour} from "./grid.js";
import {aerOf, aerText, mapName, mapOf, scaleFor} from "./maps.js";
import {aligns, draw, kindNames, kindOf, kindTitle, nearest, runByName, selectStep, state, toggleOverlay,
  upright} from "./state.js";
import {shortName, statKeys} from "./stats.js";

const LINES_WIDTH = 300;

const ui = {};

export function detailSection() {
  ui.detail = h("div", {id: "detail"});
  return ui.detail;
}

/**
 * Draw the open map of `set` (see maps.js) of `data` (an ./attention or ./translate answer). `other` = {data,
 * set} to compare with; `explanations` the ./explanations answer or null; `lens` the logit lens ({error} when it
 * could not be read, null where it does not apply).
 */
export function drawDetail(data, set, stats, explanations, other, lens) {
  const sel = state.head;
  const matrix = mapOf(set, sel);
  const attentionHead = set.weights && sel.head !== null;
  const kindStats = attentionHead ? stats && stats.kinds[state.kind] : null;
  const statsNote = kindStats && (state.mode === "custom" || stats.step !== data.step)
    ? h("span", {class: "note", title: "head statistics are measured on validation sentences at a logged step"},
      `validation, step ${stats.step}:`) : null;
  const chips = kindStats
    ? statKeys(kindStats, stats).map((k) => h("span", {class: "chip", title: (stats.descriptions || {})[k] || k},
      h("span", {}, `${shortName(stats, k)} `), fmt(kindStats[k][sel.layer][sel.head])))
    : methodChips(set, sel, explanations);
  const where = state.mode === "custom" ? "your sentence" : `step ${data.step} · sentence ${data.sentence + 1}`;
  const trend = h("span", {class: "trend"});
  const title = set.weights ? kindTitle(state.kind) : set.label;
  const top = h("div", {class: "detail-head"},
    h("h2", {}, `${title} · ${mapName(set, sel)}`),
    aerBadge(set, sel),
    h("span", {class: "note"}, where),
    h("div", {class: "chips"}, statsNote, chips),
    trend);
  if (kindStats) {
    const key = trendKey(kindStats, stats);
    drawTrend(trend, {steps: state.run.statistics_steps || [], url: (s) => statisticsUrl(state.run.run, s),
      pick: (answer) => answer?.kinds?.[state.kind]?.[key]?.[sel.layer]?.[sel.head], label: key,
      shown: stats.step});
  } else if (set.method && explanations && explanations.methods) {
    const method = set.method;
    drawTrend(trend, {steps: state.run.explanation_steps || [], url: (s) => explanationsUrl(state.run.run, s),
      pick: (answer) => validationAer(answer?.methods?.[method], sel), label: "AER (explanation sentences)",
      shown: explanations.step});
  }

  const about = set.weights ? `Rows: queries, columns: keys. ${kindOf(state.kind).help}`
    : `Rows: the words produced, columns: the source words. A row shows how much ${set.label} credits each `
      + "source word with producing that word (under forced decoding)";
  const help = h("div", {class: "note kind-help"}, `${about}.${set.signed ? " Signed scores: red above 0, blue "
    + "below." : ""}`);
  const scale = scaleFor(set, matrix);
  const tools = compareTools(scale.scale === 1 && !scale.signed ? null
    : colourBar({...scale, title: `colour scale of this map: its largest magnitude is ${fmt(scale.scale)}`}));

  // Sizes: fit the matrices (and the lines view, beside them unless comparing) into the panel.
  const width = Math.max(420, ui.detail.clientWidth || 800);
  const comparing = Boolean(other);
  const rowsN = set.rows.length;
  const colsN = set.cols.length;
  const maxTokens = Math.max(rowsN, colsN);
  const guessFont = maxTokens > 30 ? 11 : 12;
  // Room for the widest token in bold (a lit token is bold), up to 120 px; longer ones end in an ellipsis.
  const labelW = Math.ceil(Math.min(120, 1.12 * Math.max(...set.rows.map((t) => textWidth(t, guessFont + 1))) + 14));
  const labelH = Math.ceil(Math.min(120, 1.12 * Math.max(...set.cols.map((t) => textWidth(t, guessFont + 1))) + 12));
  // Cells fill the height of the window (at least 14 px, the smallest that keeps labels legible) and the width
  // left beside the lines view; when that would make them smaller than 14 px (long sentences), the lines view
  // moves below the matrix. Comparing puts two matrices side by side and the lines view below.
  const topOffset = ui.detail.getBoundingClientRect().top + 110;
  const fitH = Math.max(14, (window.innerHeight - topOffset - labelH - 24) / rowsN);
  let linesBelow = comparing;
  let fitW = comparing ? (width - 2 * labelW - 30) / 2 / colsN : (width - LINES_WIDTH - labelW - 34) / colsN;
  if (!comparing && fitW < 14) {
    linesBelow = true;
    fitW = (width - labelW - 10) / colsN;
  }
  const cell = Math.max(9, Math.min(46, Math.floor(Math.min(fitW, fitH))));
  const font = Math.max(10, Math.min(13, Math.floor(cell * 0.85), guessFont + 1));

  const A = matrixPanel(set, matrix, cell, font, labelW, labelH,
    comparing ? h("div", {class: "panel-cap"}, h("b", {}, "A "), `${data.run} · step ${data.step}`) : null);
  const panels = [A];
  if (comparing) {
    const omatrix = mapOf(other.set, sel);
    panels.push(omatrix ? matrixPanel(other.set, omatrix, cell, font, labelW, labelH,
      h("div", {class: "panel-cap"}, h("b", {}, "B "), `${other.data.run} · step ${other.data.step}`,
        " ", aerBadge(other.set, sel)))
      : h("div", {class: "note"}, `${other.data.run} · step ${other.data.step} has no ${mapName(set, sel)}`));
  }

  // Lines view: the open map plus the overlaid ones, each in its colour.
  const heads = [sel, ...state.overlay].map((hd, i) => {
    const m = mapOf(set, hd);
    return m && {label: mapName(set, hd), colour: headColour(i), matrix: m, head: hd, ...scaleFor(set, m)};
  }).filter(Boolean);
  // Beside the matrix, the lines view's query tokens sit level with the matrix rows.
  const lines = linesView({rows: set.rows, cols: set.cols, heads, width: LINES_WIDTH,
    top: linesBelow ? 26 : labelH, step: linesBelow ? Math.min(20, Math.max(14, cell)) : Math.max(14, cell)});
  const legend = h("div", {class: "legend"}, heads.map((hd, i) => h("span", {class: "item", "data-head": hd.label},
    h("span", {class: "sw", style: `background:${hd.colour}`}), hd.label,
    i > 0
      ? h("button", {class: "rm", title: "remove from the lines view", onclick: () => toggleOverlay(hd.head)}, "×")
      : null)),
  heads.length === 1 ? h("span", {class: "note"}, "Shift-click maps in the grid to overlay them") : null);
  const linesPanel = h("div", {class: linesBelow ? "lines-panel below" : "lines-panel"},
    h("div", {id: "lines-view"}, lines.node), legend);

  // The logit lens follows the hovered target position (a row of a decoder or cross map).
  let lensView = null;
  let lensNode = null;
  if (lens && lens.error) {
    lensNode = lensNote(lens.error);
  } else if (lens) {
    lensView = lensPanel(lens);
    lensNode = lensView.node;
  }
  const body = h("div", {class: "detail-body"}, ...panels, linesPanel, lensNode);
  ui.detail.replaceChildren(top, help, tools, body);
  ui.detail.dataset.step = String(state.mode === "custom" ? "" : data.step);
  ui.detail.dataset.kind = state.kind;
  ui.detail.dataset.method = set.method || "";
  ui.detail.dataset.layer = String(sel.layer);
  ui.detail.dataset.head = sel.head === null ? "" : String(sel.head);
  ui.detail.dataset.mode = state.mode;
  const onLit = lensView ? (lit) => { if (lit && lit.rows.size === 1) lensView.showRow([...lit.rows][0]); } : null;
  wireFocus(ui.detail, body, {lines, shift: aligns() ? null : selfShift(set.rows, set.cols),
    shape: [rowsN, colsN], onLit});
}

// The open map's AER on this sentence, or why there is none.
function aerBadge(set, sel) {
  if (!aligns(set.kind)) return null;
  const aer = aerOf(set, sel);
  if (aer !== null) {
    return h("span", {class: "aer-badge", "data-aer": String(aer),
      title: "alignment error rate of this map on this sentence against its gold links (lower is better)"},
    aerText(aer));
  }
  const why = state.mode === "custom" ? "your sentence has no gold alignment"
    : state.run.has_gold ? null : "this run's data has no gold alignment";
  return why ? h("span", {class: "no-aer note", title: "AER needs gold word links"}, `no AER: ${why}`) : null;
}

// A method's AER of map {layer, head} over the explanation sentences (./explanations' per-method scores).
function validationAer(scores, {layer, head}) {
  if (!scores) return undefined;
  return head === null ? scores.aer?.[layer] : scores.head_aer?.[layer]?.[head];
}

// The open map's scores over the explanation sentences at the step of ./explanations.
function methodChips(set, sel, explanations) {
  const scores = explanations && explanations.methods ? explanations.methods[set.method] : null;
  if (!scores) return [];
  const agreement = sel.head === null ? scores.agreement?.[sel.layer] : scores.head_agreement?.[sel.layer]?.[sel.head];
  const about = `over the explanation sentences at step ${explanations.step}`;
  return [
    h("span", {class: "note"}, `explanation sentences, step ${explanations.step}:`),
    h("span", {class: "chip", title: `alignment error rate ${about} (lower is better)`},
      h("span", {}, "AER "), fmt(validationAer(scores, sel))),
    h("span", {class: "chip",
      title: `share of target words whose strongest score falls on a gold-aligned source word ${about}`},
      h("span", {}, "agreement "), fmt(agreement)),
  ];
}

// Compare with another step of this run, or the same step of another run with the same layers and heads.
function compareTools(scaleNode) {
  const cmpRunValue = state.compareRun;
  const stepsFor = (cmpRunValue ? runByName(cmpRunValue) : state.run)?.steps || [];
  const sameShape = state.runs.filter((r) => r.run !== state.run.run && r.num_heads === state.run.num_heads
    && kindNames().every((k) => (r.num_layers[k] ?? null) === (state.run.num_layers[k] ?? null)));
  const compareStep = h("select", {id: "compare-step", disabled: state.mode !== "probe",
    onchange: (e) => { state.compareStep = e.target.value; draw(); }},
  h("option", {value: ""}, "— off —"), stepsFor.map((s) => h("option", {value: String(s)}, `step ${s}`)));
  compareStep.value = stepsFor.includes(Number(state.compareStep)) ? state.compareStep : "";
  const compareRun = h("select", {id: "compare-run", disabled: state.mode !== "probe" || !sameShape.length,
    title: sameShape.length ? "another run with the same layers and heads" : "no other run has the same shape",
    onchange: (e) => { state.compareRun = e.target.value; draw(); }},
  h("option", {value: ""}, "— this run —"), sameShape.map((r) => h("option", {value: r.run}, r.run)));
  compareRun.value = state.compareRun;
  const numbers = h("input", {type: "checkbox", checked: state.numbers,
    onchange: (e) => { state.numbers = e.target.checked; draw(); }});
  return h("div", {class: "detail-tools"},
    h("label", {}, "Compare with ", compareStep), h("label", {}, "of run ", compareRun),
    (state.compareStep || state.compareRun) && state.mode === "probe"
      ? h("button", {class: "icon-btn", title: "stop comparing",
        onclick: () => { state.compareStep = ""; state.compareRun = ""; draw(); }}, "×") : null,
    h("label", {title: "write values of at least a tenth of the scale in the cells when they are big enough"},
      numbers, " numbers in cells"),
    scaleNode,
    state.mode === "custom" ? h("span", {class: "note"}, "(comparing applies to the probe sentences)") : null);
}

/** What to compare the shown map with: {run, step, sentence}, or null when not comparing. */
export function compareTarget() {
  if (state.mode !== "probe" || (!state.compareStep && !state.compareRun)) return null;
  const run = state.compareRun ? runByName(state.compareRun) : state.run;
  if (!run) return null;
  const step = state.compareStep ? Number(state.compareStep) : nearest(run.steps, state.run.steps[state.stepIndex]);
  if (!run.steps.includes(step)) return null;
  const sentence = run.sentences.some((s) => s.id === state.sentence) ? state.sentence : 0;
  return {run: run.run, step, sentence};
}

// The statistic followed over training in the detail header: agreement where there is one, else the sorted one,
// else the first in reading order.
function trendKey(kindStats, stats) {
  if (kindStats.agreement) return "agreement";
  const sortKey = (state.sort[state.kind] || {}).key;
  return kindStats[sortKey] ? sortKey : statKeys(kindStats, stats)[0];
}

// A small line of one value of the open map at every logged step that has it: `url(step)` answers, `pick(answer)`
// the value; the dot marks the step `shown`, a click on the line moves the slider there.
async function drawTrend(node, {steps, url, pick, label, shown}) {
  if (steps.length < 2) return;
  const all = [];
  for (let k = 0; k < steps.length; k += 4) { // four requests at a time: a long run has many steps
    const chunk = steps.slice(k, k + 4).map((s) => cached(url(s)).catch(() => null));
    all.push(...(await Promise.all(chunk)));
    if (!node.isConnected) return; // redrawn meanwhile; the next drawing starts again from the cache
  }
  const points = steps.map((s, k) => [s, pick(all[k])]).filter(([, v]) => Number.isFinite(v));
  if (points.length < 2) return;
  const [W, H, pad] = [150, 30, 3];
  const xs = points.map(([s]) => s);
  const vs = points.map(([, v]) => v);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const svg = sparkline(points, shown, {steps: [x0, x1], values: [Math.min(...vs), Math.max(...vs)],
    width: W, height: H, pad, dot: 3, className: "trend-svg"});
  svg.addEventListener("click", (e) => {
    if (state.mode !== "probe") return;
    const r = svg.getBoundingClientRect();
    const s = x0 + ((e.clientX - r.left - pad) / (W - 2 * pad)) * (x1 - x0);
    selectStep(state.run.steps.indexOf(nearest(state.run.steps, s)));
  });
  node.title = `${label} of this map at every logged step (${fmt(vs[0])} → ${fmt(vs[vs.length - 1])}); `
    + "click to go to a step";
  node.replaceChildren(h("span", {class: "note"}, `${label} over training`), svg);
}

function matrixPanel(set, matrix, cell, font, labelW, labelH, caption) {
  const gold = set.gold;
  const rowsN = set.rows.length;
  const colsN = set.cols.length;
  const w = cell * colsN;
  const hgt = cell * rowsN;
  const node = h("div", {class: "matrix", style: `width:${labelW + w}px;height:${labelH + hgt}px;font-size:${font}px`,
    "data-gold-cells": String(gold ? gold.filter(([i, j]) => i < rowsN && j < colsN).length : 0)});
  set.cols.forEach((t, j) => node.append(h("div", {
    class: upright(t) ? "token upright" : "token", "data-axis": "col", "data-index": String(j), title: `key ${j}: ${t}`,
    style: `left:${labelW + j * cell}px;top:0;width:${cell}px;height:${labelH}px;line-height:${cell}px`}, t)));
  set.rows.forEach((t, i) => node.append(h("div", {
    class: "token", "data-axis": "row", "data-index": String(i), title: `query ${i}: ${t}`,
    style: `left:0;top:${labelH + i * cell}px;width:${labelW}px;height:${cell}px;line-height:${cell}px`}, t)));
  const canvas = h("canvas", {style: `left:${labelW}px;top:${labelH}px`});
  const causal = kindOf(state.kind).causal;
  drawMatrix(canvas, matrix, w, hgt, {gold, numbers: state.numbers, causal, ...scaleFor(set, matrix)});
  node.append(canvas);
  for (let i = 0; i < rowsN; i++) {
    node.append(h("div", {class: "band", "data-axis": "row", "data-index": String(i),
      style: `left:${labelW - 2}px;top:${labelH + i * cell - 2}px;width:${w + 4}px;height:${cell + 4}px`}));
  }
  for (let j = 0; j < colsN; j++) {
    node.append(h("div", {class: "band", "data-axis": "col", "data-index": String(j),
      style: `left:${labelW + j * cell - 2}px;top:${labelH - 2}px;width:${cell + 4}px;height:${hgt + 4}px`}));
  }
  const goldSet = new Set((gold || []).map(([i, j]) => `${i},${j}`));
  let soft = [];
  const clearSoft = () => {
    soft.forEach((n) => n.classList.remove("hl-soft"));
    soft = [];
  };
  canvas.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.min(colsN - 1, Math.floor(((e.clientX - r.left) / r.width) * colsN));
    const i = Math.min(rowsN - 1, Math.floor(((e.clientY - r.top) / r.height) * rowsN));
    if (i < 0 || j < 0) return;
    clearSoft();
    soft = [node.querySelector(`.token[data-axis="row"][data-index="${i}"]`),
      node.querySelector(`.token[data-axis="col"][data-index="${j}"]`)].filter(Boolean);
    soft.forEach((n) => n.classList.add("hl-soft"));
    showTooltip(e, h("b", {}, causal && j > i ? "masked" : valueText(matrix[i][j])), "  ",
      `${set.rows[i]} → ${set.cols[j]}`, h("span", {style: "color:#adb5bd"}, `  (row ${i}, col ${j})`),
      goldSet.has(`${i},${j}`) ? h("span", {style: `color:${GOLD_COLOUR}`}, "  gold link") : "");
  });
  canvas.addEventListener("mouseleave", () => {
    clearSoft();
    hideTooltip();
  });
  return h("div", {class: "matrix-panel"}, caption, node);
}

// A cell's value in the tooltip: four decimals, or "–" where there is none (a diverged run's NaN, served as null).
export const valueText = (v) => (Number.isFinite(v) ? v.toFixed(4) : "–");
