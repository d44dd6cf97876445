// The ATTENTION tab: every attention head of every layer, of the three kinds (encoder self, decoder causal self,
// cross), at every logged step, with per-head statistics beside it; and the same views for a sentence you type.
// TensorBoard loads this ES module in an iframe whose <base href="plugin/attention/"> makes relative URLs hit the
// plugin's routes (see docs of the backend HTTP API); other modules are served under ./static/.
//
// DOM hooks (stable, for tests):
//   #run-select, #step-slider (range over step indices), #step-label (shows the step number), #sentence-select,
//   #kind-encoder / #kind-decoder / #kind-cross (buttons; the active one has class `active`), #gold-toggle
//   (checkbox), #grid with cells `.head-cell[data-layer][data-head]` (0-based; the open head has class
//   `selected`, overlaid heads `overlay`, the best-aligned cross head `best`), #detail (the detail panel;
//   attribute data-step = the step shown, data-kind, data-layer, data-head), in it one `.matrix` per map (a
//   second one when comparing; attribute data-gold-cells = number of gold links outlined) with tokens
//   `.token[data-axis="row"|"col"][data-index]` and highlight bands `.band[data-axis][data-index]`,
//   #lines-view (tokens `.lv-token[data-side="query"|"key"][data-index]`, one <g data-head="L1 H2"> of
//   <line>s per overlaid head), #stats-table (header cells `th[data-key]` with aria-sort on the sorted one;
//   rows `tr[data-layer][data-head]`), #compare-step and #compare-run (selects; "" = off),
//   #translate-input, #translate-beam, #translate-button, #translation, #back-to-probes, #message (errors).
//
// What gets the class `highlight`: hovering a token sets a focus, a set R of lit rows and a set C of lit columns
// (clicking the token pins it until clicked again).
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

import {colourBar, drawMatrix, GOLD_COLOUR} from "./static/heatmap.js";
import {HEAD_COLOURS, linesView} from "./static/lines.js";
import {CSS} from "./static/style.js";

const KINDS = ["encoder", "decoder", "cross"];
const KIND_BUTTON = {encoder: "Encoder", decoder: "Decoder", cross: "Cross"};
const KIND_TITLE = {
  encoder: "Encoder self-attention",
  decoder: "Decoder self-attention (causal)",
  cross: "Cross-attention",
};
const KIND_HELP = {
  encoder: "Each source token attends to every source token",
  decoder: "Each target position attends to the tokens read so far (grey: the masked future); a row is "
    + "labelled with the token generated there",
  cross: "Target → source: a row shows where the model looks to produce that word",
};
// Statistics where lower is better are sorted ascending on first click, the others descending.
const LOWER_IS_BETTER = new Set(["entropy", "distance", "aer"]);
const STAT_ORDER = ["entropy", "distance", "diagonal", "previous", "next", "agreement", "aer"];
const LINES_WIDTH = 300;
const RUNS_POLL_MS = 30_000;
const SHORT = {entropy: "entropy", distance: "dist", diagonal: "diag", previous: "prev", next: "next",
  agreement: "agr", aer: "AER"};

// ---------------------------------------------------------------------------------------------------------------
// State and data

const state = {
  runs: [],
  run: null, // the run's entry from ./runs
  stepIndex: 0,
  sentence: 0,
  kind: "cross",
  mode: "probe", // "probe": logged probe sentences; "custom": the user's translated sentence
  custom: null, // the ./translate response
  head: {layer: 0, head: 0}, // the head open in the detail view
  overlay: [], // further heads drawn in the lines view: [{layer, head}]
  focus: null, // {axis, index, source: "matrix"|"lines"}
  pinned: null,
  gold: true,
  numbers: true,
  compareStep: "",
  compareRun: "",
  sort: {}, // kind -> {key, dir: 1 | -1}
  translating: false,
  translateError: "", // the last failed translation's message, shown until the next try or edit
  playing: null,
};

const cache = new Map(); // url -> Promise of JSON
let drawToken = 0;
const ui = {};

class ApiError extends Error {}

async function fetchJSON(url) {
  const response = await fetch(url);
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  if (!response.ok) {
    const line = body && body.error ? body.error : `${response.status} ${response.statusText}`.trim();
    throw new ApiError(line);
  }
  if (body === null) throw new ApiError(`${url.split("?")[0]}: the answer was not JSON`);
  return body;
}

function cached(url) {
  if (!cache.has(url)) {
    const promise = fetchJSON(url);
    cache.set(url, promise);
    promise.catch(() => cache.delete(url));
  }
  return cache.get(url);
}

const q = (params) => new URLSearchParams(params).toString();
const attentionUrl = (run, step, sentence) => `./attention?${q({run, step, sentence})}`;
const statisticsUrl = (run, step) => `./statistics?${q({run, step})}`;

const currentStep = () => state.run.steps[state.stepIndex];
const runByName = (name) => state.runs.find((r) => r.run === name);

function nearest(values, target, {notAbove = false} = {}) {
  if (!values.length) return null;
  let best = values[0];
  for (const v of values) {
    if (notAbove && v > target) continue;
    if (Math.abs(v - target) < Math.abs(best - target) || (notAbove && best > target)) best = v;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------------------------
// Small DOM helpers

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function showMessage(text) {
  ui.message.textContent = text || "";
}

function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(3);
}
const headName = ({layer, head}) => `L${layer + 1} H${head + 1}`;
const sameHead = (a, b) => a.layer === b.layer && a.head === b.head;

let measureCtx = null;
function textWidth(text, px) {
  measureCtx = measureCtx || document.createElement("canvas").getContext("2d");
  measureCtx.font = `${px}px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
  return measureCtx.measureText(text).width;
}

// ---------------------------------------------------------------------------------------------------------------
// Entry point

export async function render() {
  if (!document.getElementById("attention-style")) document.head.append(h("style", {id: "attention-style"}, CSS));
  document.body.replaceChildren();
  ui.app = h("div", {id: "app"});
  ui.tooltip = h("div", {class: "tooltip"});
  document.body.append(ui.app, ui.tooltip);
  ui.app.append(h("div", {class: "note"}, "Loading runs…"));
  let runs;
  try {
    runs = (await fetchJSON("./runs")).runs || [];
  } catch (e) {
    ui.app.replaceChildren(h("div", {id: "message"}, `Could not list runs: ${e.message}`));
    return;
  }
  if (!runs.length) {
    ui.app.replaceChildren(emptyState());
    // Training may start later: look again, and draw the tab once a run has attention data.
    const timer = setInterval(async () => {
      const again = await fetchJSON("./runs").then((r) => r.runs || []).catch(() => []);
      if (again.length) {
        clearInterval(timer);
        render();
      }
    }, RUNS_POLL_MS);
    return;
  }
  state.runs = runs;
  state.run = runs[0];
  state.stepIndex = runs[0].steps.length - 1;
  state.kind = runs[0].kinds.includes("cross") ? "cross" : runs[0].kinds[0];
  buildSkeleton();
  syncControls();
  window.addEventListener("resize", debounce(() => draw(), 150));
  await draw();
  prefetchSteps();
  setInterval(pollRuns, RUNS_POLL_MS);
  document.addEventListener("keydown", onKey);
}

// Left / right arrow keys move the step slider from anywhere but a text field or a list.
function onKey(e) {
  if (!["ArrowLeft", "ArrowRight"].includes(e.key) || e.altKey || e.ctrlKey || e.metaKey) return;
  if (e.target.closest && e.target.closest("input, select, textarea")) return;
  if (state.mode !== "probe") return;
  const next = state.stepIndex + (e.key === "ArrowRight" ? 1 : -1);
  if (next < 0 || next >= state.run.steps.length) return;
  e.preventDefault();
  state.stepIndex = next;
  ui.slider.value = String(next);
  updateStepLabel();
  draw();
}

// While a run trains, new validations add steps: look again now and then, and follow the newest step if the
// slider was on the last one.
async function pollRuns() {
  if (document.hidden || state.playing) return;
  let runs;
  try {
    runs = (await fetchJSON("./runs")).runs || [];
  } catch (e) {
    return; // the next look may work; a failing backend shows its errors on the next draw
  }
  if (!runs.length || JSON.stringify(runs) === JSON.stringify(state.runs)) return;
  const wasLast = state.stepIndex === state.run.steps.length - 1;
  const step = currentStep();
  state.runs = runs;
  state.run = runByName(state.run.run) || runs[0];
  const steps = state.run.steps;
  state.stepIndex = wasLast ? steps.length - 1 : Math.max(0, steps.indexOf(nearest(steps, step)));
  ui.runSelect.replaceChildren(...runs.map((r) => h("option", {value: r.run}, r.run)));
  syncControls();
  draw();
}

function emptyState() {
  return h(
    "div",
    {class: "empty", id: "empty"},
    h("h1", {}, "No attention data yet"),
    h("p", {}, "None of the runs in this log directory has logged attention maps."),
    h("p", {}, "Train with ", h("code", {}, "python train.py"), "; attention is logged at each validation."),
    h("p", {}, "This tab looks for new data every 30 seconds."),
  );
}

function debounce(fn, ms) {
  let t = null;
  return (...a) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...a), ms);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Controls

function buildSkeleton() {
  ui.runSelect = h("select", {id: "run-select", onchange: () => selectRun(ui.runSelect.value)},
    state.runs.map((r) => h("option", {value: r.run}, r.run)));
  ui.slider = h("input", {id: "step-slider", type: "range", min: "0", step: "1", oninput: onSlide,
    title: "logged step (drag; arrow keys move one step)"});
  ui.stepLabel = h("span", {id: "step-label"});
  ui.play = h("button", {class: "icon-btn", title: "play through the steps", onclick: togglePlay}, "▶");
  ui.sentenceSelect = h("select", {id: "sentence-select", onchange: onSentence});
  ui.kindButtons = KINDS.map((k) => h("button", {id: `kind-${k}`, "data-kind": k, title: KIND_TITLE[k],
    onclick: () => selectKind(k)}, KIND_BUTTON[k]));
  ui.gold = h("input", {id: "gold-toggle", type: "checkbox", checked: true,
    onchange: () => { state.gold = ui.gold.checked; draw(); }});
  ui.goldLabel = h("label", {class: "ctl", title: "outline the gold word alignment on cross-attention maps"},
    ui.gold, h("span", {class: "gold-key"}), "gold links");
  // No maxlength: the backend's own message says what is too long.
  ui.input = h("input", {id: "translate-input", type: "text", spellcheck: "false",
    oninput: () => { state.translateError = ""; },
    onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); translate(); } }});
  ui.beam = h("select", {id: "translate-beam", title: "beam size (1 = greedy)"},
    [1, 2, 3, 4, 5, 6, 7, 8].map((b) => h("option", {value: String(b)}, String(b))));
  ui.translateButton = h("button", {id: "translate-button", onclick: translate}, "Translate");
  ui.translateNote = h("span", {class: "note"});
  ui.loading = h("span", {class: "loading"}, "loading…");

  const toolbar = h("div", {class: "toolbar"},
    h("label", {class: "ctl"}, "Run", ui.runSelect),
    h("label", {class: "ctl"}, "Sentence", ui.sentenceSelect),
    h("span", {class: "seg", role: "group", "aria-label": "attention kind"}, ui.kindButtons),
    ui.goldLabel,
    colourBar(),
    ui.loading,
  );
  const second = h("div", {class: "toolbar second"},
    h("span", {class: "step-ctl"}, ui.play, h("label", {class: "ctl"}, "Step", ui.slider), ui.stepLabel),
    h("span", {class: "translate"}, h("label", {class: "ctl", for: "translate-input"}, "Your sentence"), ui.input,
      h("label", {class: "ctl"}, "beam", ui.beam), ui.translateButton, ui.translateNote));
  ui.message = h("div", {id: "message", role: "alert"});
  ui.banner = h("div", {class: "banner", style: "display:none"});

  ui.gridTitle = h("h2");
  ui.best = h("div", {class: "best-line", style: "display:none"});
  ui.grid = h("div", {id: "grid"});
  ui.statsTitle = h("h2");
  ui.stats = h("table", {id: "stats-table"});
  ui.detail = h("div", {id: "detail"});
  const left = h("section", {class: "left"},
    ui.gridTitle,
    h("div", {class: "hint"}, "Click a head to open it · Shift/Ctrl-click to overlay it in the lines view"),
    ui.best, ui.grid,
    h("div", {style: "height:14px"}),
    ui.statsTitle,
    h("div", {class: "stats-wrap"}, ui.stats));
  const right = h("section", {class: "right"}, ui.detail);
  ui.app.replaceChildren(toolbar, second, ui.message, ui.banner, h("div", {class: "main"}, left, right));
}

function syncControls() {
  const run = state.run;
  ui.runSelect.value = run.run;
  ui.slider.max = String(run.steps.length - 1);
  ui.slider.value = String(state.stepIndex);
  ui.slider.disabled = state.mode === "custom" || run.steps.length < 2;
  ui.play.disabled = ui.slider.disabled;
  updateStepLabel();
  const options = run.sentences.map((s) => h("option", {value: String(s.id), title: `${s.source}  →  ${s.target}`},
    `${s.id + 1}. ${s.source.length > 60 ? `${s.source.slice(0, 59)}…` : s.source}`));
  if (state.custom) {
    options.push(h("option", {value: "custom"}, `✎ your sentence: ${state.custom.text.slice(0, 40)}`));
  }
  ui.sentenceSelect.replaceChildren(...options);
  ui.sentenceSelect.value = state.mode === "custom" ? "custom" : String(state.sentence);
  for (const b of ui.kindButtons) {
    const k = b.dataset.kind;
    b.classList.toggle("active", k === state.kind);
    b.setAttribute("aria-pressed", String(k === state.kind));
    b.disabled = !run.kinds.includes(k);
  }
  const goldApplies = state.kind === "cross" && run.has_gold && state.mode === "probe";
  ui.gold.disabled = !goldApplies;
  ui.goldLabel.title = goldApplies ? "outline the gold word alignment on cross-attention maps"
    : "gold links exist for cross-attention of probe sentences on data with gold alignments";
  ui.input.placeholder = run.sentences.length ? `e.g. ${run.sentences[0].source}` : "type a source sentence";
  ui.translateButton.disabled = state.translating || !run.can_translate;
  ui.translateNote.textContent = run.can_translate ? "" : run.translate_note || "this run has no checkpoint yet";
}

function updateStepLabel() {
  const run = state.run;
  if (state.mode === "custom") {
    ui.stepLabel.replaceChildren(`checkpoint step ${state.custom.step ?? "?"}`);
  } else {
    ui.stepLabel.replaceChildren(`step ${currentStep()}`,
      h("span", {class: "of"}, ` (${state.stepIndex + 1}/${run.steps.length})`));
  }
}

function selectRun(name) {
  const run = runByName(name);
  if (!run) return;
  const step = currentStep();
  state.run = run;
  state.stepIndex = Math.max(0, run.steps.indexOf(nearest(run.steps, step)));
  if (!run.sentences.some((s) => s.id === state.sentence)) {
    state.sentence = run.sentences.length ? run.sentences[0].id : 0;
  }
  if (!run.kinds.includes(state.kind)) state.kind = run.kinds[0];
  if (state.mode === "custom") leaveCustom(false);
  state.compareRun = "";
  state.compareStep = "";
  clampHeads();
  syncControls();
  draw();
  prefetchSteps();
}

function onSlide() {
  state.stepIndex = Number(ui.slider.value);
  updateStepLabel();
  draw();
}

function togglePlay() {
  if (state.playing) {
    clearInterval(state.playing);
    state.playing = null;
    ui.play.textContent = "▶";
    return;
  }
  if (state.stepIndex >= state.run.steps.length - 1) state.stepIndex = -1;
  ui.play.textContent = "❚❚";
  const tick = () => {
    if (state.stepIndex >= state.run.steps.length - 1 || state.mode === "custom") {
      togglePlay();
      return;
    }
    state.stepIndex += 1;
    ui.slider.value = String(state.stepIndex);
    updateStepLabel();
    draw();
  };
  tick();
  state.playing = setInterval(tick, 700);
}

function onSentence() {
  const v = ui.sentenceSelect.value;
  if (v === "custom") {
    state.mode = "custom";
  } else {
    state.sentence = Number(v);
    if (state.mode === "custom") leaveCustom(false);
  }
  syncControls();
  draw();
  prefetchSteps();
}

function selectKind(kind) {
  state.kind = kind;
  state.focus = null;
  state.pinned = null;
  clampHeads();
  syncControls();
  draw();
}

function layersOf(kind) {
  return state.run.num_layers[kind];
}

function clampHeads() {
  const L = layersOf(state.kind);
  const H = state.run.num_heads;
  const ok = (x) => x.layer < L && x.head < H;
  if (!ok(state.head)) state.head = {layer: 0, head: 0};
  state.overlay = state.overlay.filter(ok);
}

function leaveCustom(redraw = true) {
  state.mode = "probe";
  if (redraw) {
    syncControls();
    draw();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// "Your sentence"

async function translate() {
  const text = ui.input.value.trim();
  if (state.translating) return;
  if (!text) {
    showMessage("Type a sentence to translate first.");
    return;
  }
  state.translateError = "";
  state.translating = true;
  ui.translateButton.disabled = true;
  ui.translateButton.textContent = "Translating…";
  try {
    const url = `./translate?${q({run: state.run.run, text, beam: ui.beam.value})}`;
    const result = await fetchJSON(url);
    state.custom = result;
    state.mode = "custom";
    state.compareStep = "";
    state.compareRun = "";
    if (state.playing) togglePlay();
  } catch (e) {
    state.translateError = `Your sentence: ${e.message}`;
  } finally {
    state.translating = false;
    ui.translateButton.textContent = "Translate";
    syncControls();
  }
  await draw();
}

function drawBanner() {
  if (state.mode !== "custom") {
    ui.banner.style.display = "none";
    ui.banner.replaceChildren();
    return;
  }
  const c = state.custom;
  ui.banner.style.display = "flex";
  ui.banner.replaceChildren(
    h("span", {}, h("b", {}, "Your sentence"), ` (${c.run}, ${c.checkpoint}, step ${c.step}, beam ${c.beam}):`),
    h("span", {}, c.text, "  →  ", h("span", {id: "translation"}, c.translation),
      c.translation ? null : h("span", {class: "note"}, "(empty: the model ended the sentence at once)")),
    h("span", {class: "note"}, "the step slider does not apply"),
    h("button", {id: "back-to-probes", onclick: () => leaveCustom(true)}, "← back to probe sentences"),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Drawing

function shownData() {
  if (state.mode === "custom") return Promise.resolve(state.custom);
  return cached(attentionUrl(state.run.run, currentStep(), state.sentence));
}

function statsStep() {
  const steps = state.run.statistics_steps || [];
  if (!steps.length) return null;
  const target = state.mode === "custom" ? Infinity : currentStep();
  return nearest(steps, target === Infinity ? steps[steps.length - 1] : target, {notAbove: true});
}

function compareTarget() {
  if (state.mode !== "probe" || (!state.compareStep && !state.compareRun)) return null;
  const run = state.compareRun ? runByName(state.compareRun) : state.run;
  if (!run) return null;
  const step = state.compareStep ? Number(state.compareStep) : nearest(run.steps, currentStep());
  if (!run.steps.includes(step)) return null;
  const sentence = run.sentences.some((s) => s.id === state.sentence) ? state.sentence : 0;
  return {run: run.run, step, sentence};
}

async function draw() {
  if (!state.run) return;
  const token = ++drawToken;
  ui.loading.classList.add("on");
  const sStep = statsStep();
  const cmp = compareTarget();
  const [data, stats, other] = await Promise.all([
    shownData().catch((e) => ({error: e.message})),
    sStep === null ? null : cached(statisticsUrl(state.run.run, sStep)).catch((e) => ({error: e.message})),
    cmp ? cached(attentionUrl(cmp.run, cmp.step, cmp.sentence)).catch((e) => ({error: e.message})) : null,
  ]);
  if (token !== drawToken) return; // a newer draw started while this one waited
  ui.loading.classList.remove("on");
  const errors = [data, stats, other].filter((x) => x && x.error).map((x) => x.error);
  showMessage([state.translateError, ...errors].filter(Boolean).join(" · "));
  drawBanner();
  if (data.error) return;
  const statsKind = stats && !stats.error ? stats : null;
  const kindData = data.kinds[state.kind];
  if (!kindData) {
    showMessage(`This run logged no ${state.kind} attention.`);
    return;
  }
  ui.currentData = data;
  ui.currentStats = statsKind;
  drawGrid(data, statsKind);
  drawStats(statsKind);
  drawDetail(data, statsKind, other && !other.error ? {data: other, target: cmp} : null);
}

function bestHead(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (!kindStats || !kindStats.agreement) return null;
  let best = null;
  kindStats.agreement.forEach((row, layer) => row.forEach((v, head) => {
    const aer = kindStats.aer ? kindStats.aer[layer][head] : 0;
    if (!best || v > best.value || (v === best.value && aer < best.aer)) best = {layer, head, value: v, aer};
  }));
  return best;
}

function goldFor(data) {
  return state.kind === "cross" && state.gold && data.gold ? data.gold : null;
}

function headColour(index) {
  return HEAD_COLOURS[index % HEAD_COLOURS.length];
}

function drawGrid(data, stats) {
  const kd = data.kinds[state.kind];
  const L = kd.weights.length;
  const H = kd.weights[0].length;
  const rows = kd.rows.length;
  const cols = kd.cols.length;
  const where = state.mode === "custom" ? "your sentence" : `step ${data.step}`;
  ui.gridTitle.replaceChildren(`${KIND_TITLE[state.kind]}`,
    h("span", {class: "sub"}, `${L} layers × ${H} heads · ${where}`));
  ui.gridTitle.title = KIND_HELP[state.kind];
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

function openHead(head) {
  state.head = {layer: head.layer, head: head.head};
  state.overlay = state.overlay.filter((o) => !sameHead(o, head));
  state.pinned = null;
  state.focus = null;
  draw();
}

function toggleOverlay(head) {
  if (sameHead(head, state.head)) return;
  const i = state.overlay.findIndex((o) => sameHead(o, head));
  if (i >= 0) state.overlay.splice(i, 1);
  else state.overlay.push({layer: head.layer, head: head.head});
  draw();
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics table

function defaultSort(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (kindStats && kindStats.agreement) return {key: "agreement", dir: -1};
  return {key: "layer", dir: 1};
}

// Hovering a table row outlines its head in the grid.
function peek({layer, head}, on) {
  const cell = ui.grid.querySelector(`.head-cell[data-layer="${layer}"][data-head="${head}"]`);
  if (cell) cell.classList.toggle("peek", on);
}

// The statistics present, in a fixed reading order (unknown ones last).
function statKeys(kindStats) {
  return STAT_ORDER.filter((k) => kindStats[k]).concat(Object.keys(kindStats).filter((k) => !STAT_ORDER.includes(k)));
}

function drawStats(stats) {
  const kindStats = stats && stats.kinds[state.kind];
  if (!kindStats) {
    ui.statsTitle.replaceChildren("Head statistics", h("span", {class: "sub"}, "none logged for this run"));
    ui.stats.replaceChildren();
    return;
  }
  ui.statsTitle.replaceChildren("Head statistics",
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
  ui.stats.replaceChildren(thead, tbody);
}

// ---------------------------------------------------------------------------------------------------------------
// Detail view: the open head, big, with its tokens; a second map when comparing; the lines view

function drawDetail(data, stats, other) {
  const kd = data.kinds[state.kind];
  const {layer, head} = state.head;
  const kindStats = stats && stats.kinds[state.kind];
  const statsNote = kindStats && (state.mode === "custom" || stats.step !== data.step)
    ? h("span", {class: "note", title: "head statistics are measured on validation sentences at a logged step"},
      `validation, step ${stats.step}:`) : null;
  const chips = kindStats
    ? statKeys(kindStats).map((k) => h("span", {class: "chip", title: (stats.descriptions || {})[k] || k},
      h("span", {}, `${k} `), fmt(kindStats[k][layer][head])))
    : [];
  const where = state.mode === "custom" ? "your sentence" : `step ${data.step} · sentence ${data.sentence + 1}`;
  const trend = h("span", {class: "trend"});
  const top = h("div", {class: "detail-head"},
    h("h2", {}, `${KIND_TITLE[state.kind]} · ${headName(state.head)}`),
    h("span", {class: "note"}, where),
    h("div", {class: "chips"}, statsNote, chips),
    trend);
  if (kindStats) drawTrend(trend, trendKey(kindStats), stats.step);

  // Compare controls
  const cmpRunValue = state.compareRun;
  const stepsFor = (cmpRunValue ? runByName(cmpRunValue) : state.run)?.steps || [];
  const sameShape = state.runs.filter((r) => r.run !== state.run.run && r.num_heads === state.run.num_heads
    && KINDS.every((k) => (r.num_layers[k] ?? null) === (state.run.num_layers[k] ?? null)));
  const compareStep = h("select", {id: "compare-step", disabled: state.mode !== "probe",
    onchange: (e) => { state.compareStep = e.target.value; draw(); }},
  h("option", {value: ""}, "— off —"), stepsFor.map((s) => h("option", {value: String(s)}, `step ${s}`)));
  compareStep.value = stepsFor.includes(Number(state.compareStep)) ? state.compareStep : "";
  const compareRun = h("select", {id: "compare-run", disabled: state.mode !== "probe" || !sameShape.length,
    title: sameShape.length ? "another run with the same layers and heads" : "no other run has the same shape",
    onchange: (e) => { state.compareRun = e.target.value; draw(); }},
  h("option", {value: ""}, "— this run —"), sameShape.map((r) => h("option", {value: r.run}, r.run)));
  compareRun.value = state.compareRun;
  ui.numbers = h("input", {type: "checkbox", checked: state.numbers,
    onchange: (e) => { state.numbers = e.target.checked; draw(); }});
  const help = h("div", {class: "note kind-help"}, `Rows: queries, columns: keys. ${KIND_HELP[state.kind]}.`);
  const tools = h("div", {class: "detail-tools"},
    h("label", {}, "Compare with ", compareStep), h("label", {}, "of run ", compareRun),
    (state.compareStep || state.compareRun) && state.mode === "probe"
      ? h("button", {class: "icon-btn", title: "stop comparing",
        onclick: () => { state.compareStep = ""; state.compareRun = ""; draw(); }}, "×") : null,
    h("label", {title: "write weights ≥ 0.1 in the cells when they are big enough"},
      ui.numbers, " numbers in cells"),
    state.mode === "custom" ? h("span", {class: "note"}, "(comparing applies to the probe sentences)") : null);

  // Sizes: fit the matrices (and the lines view, beside them unless comparing) into the panel.
  const width = Math.max(420, ui.detail.clientWidth || 800);
  const comparing = Boolean(other);
  const rowsN = kd.rows.length;
  const colsN = kd.cols.length;
  const maxTokens = Math.max(rowsN, colsN);
  const guessFont = maxTokens > 30 ? 11 : 12;
  // Room for the widest token in bold (a lit token is bold), up to 120 px; longer ones end in an ellipsis.
  const labelW = Math.ceil(Math.min(120, 1.12 * Math.max(...kd.rows.map((t) => textWidth(t, guessFont + 1))) + 14));
  const labelH = Math.ceil(Math.min(120, 1.12 * Math.max(...kd.cols.map((t) => textWidth(t, guessFont + 1))) + 12));
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

  const gold = goldFor(data);
  const A = matrixPanel(kd, kd.weights[layer][head], gold, cell, font, labelW, labelH,
    comparing ? h("div", {class: "panel-cap"}, h("b", {}, "A "), `${data.run} · step ${data.step}`) : null);
  const panels = [A];
  if (comparing) {
    const okd = other.data.kinds[state.kind];
    const ogold = state.kind === "cross" && state.gold && other.data.gold ? other.data.gold : null;
    panels.push(matrixPanel(okd, okd.weights[layer][head], ogold, cell, font, labelW, labelH,
      h("div", {class: "panel-cap"}, h("b", {}, "B "), `${other.data.run} · step ${other.data.step}`)));
  }

  // Lines view: the open head plus the overlaid ones, each in its colour.
  const heads = [state.head, ...state.overlay].map((hd, i) => ({
    label: headName(hd), colour: headColour(i), matrix: kd.weights[hd.layer][hd.head], head: hd,
  }));
  // Beside the matrix, the lines view's query tokens sit level with the matrix rows.
  const lines = linesView({rows: kd.rows, cols: kd.cols, heads, width: LINES_WIDTH,
    top: linesBelow ? 26 : labelH, step: linesBelow ? Math.min(20, Math.max(14, cell)) : Math.max(14, cell)});
  ui.lines = lines;
  const legend = h("div", {class: "legend"}, heads.map((hd, i) => h("span", {class: "item", "data-head": hd.label},
    h("span", {class: "sw", style: `background:${hd.colour}`}), hd.label,
    i > 0
      ? h("button", {class: "rm", title: "remove from the lines view", onclick: () => toggleOverlay(hd.head)}, "×")
      : null)),
  heads.length === 1 ? h("span", {class: "note"}, "Shift-click heads in the grid to overlay them") : null);
  const linesPanel = h("div", {class: linesBelow ? "lines-panel below" : "lines-panel"},
    h("div", {id: "lines-view"}, lines.node), legend);

  const body = h("div", {class: "detail-body"}, ...panels, linesPanel);
  ui.detail.replaceChildren(top, help, tools, body);
  ui.detail.dataset.step = String(state.mode === "custom" ? "" : data.step);
  ui.detail.dataset.kind = state.kind;
  ui.detail.dataset.layer = String(layer);
  ui.detail.dataset.head = String(head);
  ui.detail.dataset.mode = state.mode;
  ui.selfShift = state.kind === "cross" ? null : selfShift(kd.rows, kd.cols);
  ui.shape = [kd.rows.length, kd.cols.length];
  wireFocus(body);
  applyFocus();
}

// The statistic followed over training in the detail header: agreement where there is one, else the sorted one.
function trendKey(kindStats) {
  if (kindStats.agreement) return "agreement";
  const sortKey = (state.sort[state.kind] || {}).key;
  return kindStats[sortKey] ? sortKey : "entropy" in kindStats ? "entropy" : Object.keys(kindStats)[0];
}

// A small line of the open head's statistic at every step with statistics; the dot marks the step shown, a
// click on the line moves the slider there.
async function drawTrend(node, key, shownStep) {
  const run = state.run;
  const steps = run.statistics_steps || [];
  if (steps.length < 2 || !key) return;
  const {layer, head} = state.head;
  const kind = state.kind;
  const all = [];
  for (let k = 0; k < steps.length; k += 4) { // four requests at a time: a long run has many steps
    const chunk = steps.slice(k, k + 4).map((s) => cached(statisticsUrl(run.run, s)).catch(() => null));
    all.push(...(await Promise.all(chunk)));
    if (!node.isConnected) return; // redrawn meanwhile; the next drawing starts again from the cache
  }
  const points = steps.map((s, k) => [s, all[k]?.kinds?.[kind]?.[key]?.[layer]?.[head]])
    .filter(([, v]) => typeof v === "number");
  if (points.length < 2) return;
  const [W, H, pad] = [150, 30, 3];
  const xs = points.map(([s]) => s);
  const vs = points.map(([, v]) => v);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const lo = Math.min(...vs);
  const hi = Math.max(...vs);
  const X = (s) => pad + ((s - x0) / (x1 - x0 || 1)) * (W - 2 * pad);
  const Y = (v) => H - pad - ((v - lo) / (hi - lo || 1)) * (H - 2 * pad);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("class", "trend-svg");
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", points.map(([s, v]) => `${X(s).toFixed(1)},${Y(v).toFixed(1)}`).join(" "));
  svg.append(line);
  const current = points.find(([s]) => s === shownStep);
  if (current) {
    const dot = document.createElementNS(NS, "circle");
    dot.setAttribute("cx", X(current[0]));
    dot.setAttribute("cy", Y(current[1]));
    dot.setAttribute("r", 3);
    svg.append(dot);
  }
  svg.addEventListener("click", (e) => {
    if (state.mode !== "probe") return;
    const r = svg.getBoundingClientRect();
    const s = x0 + ((e.clientX - r.left - pad) / (W - 2 * pad)) * (x1 - x0);
    const step = nearest(state.run.steps, s);
    state.stepIndex = state.run.steps.indexOf(step);
    ui.slider.value = String(state.stepIndex);
    updateStepLabel();
    draw();
  });
  node.title = `${key} of ${headName(state.head)} at every logged step (${fmt(vs[0])} → ${fmt(vs[vs.length - 1])}); `
    + "click to go to a step";
  node.replaceChildren(h("span", {class: "note"}, `${key} over training`), svg);
}

function matrixPanel(kd, matrix, gold, cell, font, labelW, labelH, caption) {
  const rowsN = kd.rows.length;
  const colsN = kd.cols.length;
  const w = cell * colsN;
  const hgt = cell * rowsN;
  const node = h("div", {class: "matrix", style: `width:${labelW + w}px;height:${labelH + hgt}px;font-size:${font}px`,
    "data-gold-cells": String(gold ? gold.filter(([i, j]) => i < rowsN && j < colsN).length : 0)});
  kd.cols.forEach((t, j) => node.append(h("div", {
    class: "token", "data-axis": "col", "data-index": String(j), title: `key ${j}: ${t}`,
    style: `left:${labelW + j * cell}px;top:0;width:${cell}px;height:${labelH}px;line-height:${cell}px`}, t)));
  kd.rows.forEach((t, i) => node.append(h("div", {
    class: "token", "data-axis": "row", "data-index": String(i), title: `query ${i}: ${t}`,
    style: `left:0;top:${labelH + i * cell}px;width:${labelW}px;height:${cell}px;line-height:${cell}px`}, t)));
  const canvas = h("canvas", {style: `left:${labelW}px;top:${labelH}px`});
  const causal = state.kind === "decoder";
  drawMatrix(canvas, matrix, w, hgt, {gold, numbers: state.numbers, causal});
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
    ui.tooltip.replaceChildren(h("b", {}, causal && j > i ? "masked" : matrix[i][j].toFixed(4)), "  ",
      `${kd.rows[i]} → ${kd.cols[j]}`, h("span", {style: "color:#adb5bd"}, `  (row ${i}, col ${j})`),
      goldSet.has(`${i},${j}`) ? h("span", {style: `color:${GOLD_COLOUR}`}, "  gold link") : "");
    ui.tooltip.style.display = "block";
    const tw = ui.tooltip.offsetWidth;
    const x = e.clientX + 14 + tw > window.innerWidth ? e.clientX - tw - 10 : e.clientX + 14;
    ui.tooltip.style.left = `${x}px`;
    ui.tooltip.style.top = `${e.clientY + 14}px`;
  });
  canvas.addEventListener("mouseleave", () => {
    clearSoft();
    ui.tooltip.style.display = "none";
  });
  return h("div", {class: "matrix-panel"}, caption, node);
}

// ---------------------------------------------------------------------------------------------------------------
// Hover focus (see the contract at the top of this file)

function focusFromNode(node) {
  if (!node) return null;
  if (node.classList.contains("token")) {
    return {axis: node.dataset.axis, index: Number(node.dataset.index), source: "matrix"};
  }
  return {axis: node.dataset.side === "query" ? "row" : "col", index: Number(node.dataset.index), source: "lines"};
}

// In a self-attention map, the column of row i's token: i (encoder: rows and columns are the same tokens) or
// i + 1 (decoder: the token generated at i is read at i + 1); null when the labels do not line up either way.
function selfShift(rows, cols) {
  const same = (a, b) => a.length === b.length && a.every((t, k) => t === b[k]);
  if (same(rows, cols)) return 0;
  if (rows.length === cols.length && same(rows.slice(0, -1), cols.slice(1))) return 1;
  return null;
}

function litSets(focus) {
  if (!focus) return null;
  const rows = new Set();
  const cols = new Set();
  const shift = ui.selfShift;
  if (focus.source === "matrix" && shift !== null) {
    const row = focus.axis === "row" ? focus.index : focus.index - shift;
    const col = focus.axis === "col" ? focus.index : focus.index + shift;
    if (row >= 0 && row < ui.shape[0]) rows.add(row);
    if (col >= 0 && col < ui.shape[1]) cols.add(col);
  } else if (focus.axis === "row") {
    rows.add(focus.index);
  } else {
    cols.add(focus.index);
  }
  return {rows, cols};
}

function wireFocus(body) {
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
}

function applyFocus() {
  const lit = litSets(state.focus || state.pinned);
  for (const node of ui.detail.querySelectorAll(".matrix .token, .matrix .band")) {
    const i = Number(node.dataset.index);
    const on = Boolean(lit) && (node.dataset.axis === "row" ? lit.rows.has(i) : lit.cols.has(i));
    node.classList.toggle("highlight", on);
  }
  if (ui.lines) ui.lines.setFocus(lit);
}

// ---------------------------------------------------------------------------------------------------------------
// Prefetch every logged step of the shown sentence, so that dragging the slider is instant.

async function prefetchSteps() {
  const run = state.run;
  const sentence = state.sentence;
  for (const step of [...run.steps].reverse()) {
    if (state.run !== run || state.sentence !== sentence) return;
    try {
      await cached(attentionUrl(run.run, step, sentence));
    } catch (e) {
      return; // the error shows when that step is drawn
    }
  }
}
