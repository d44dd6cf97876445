// The ATTENTION tab: every attention head of every layer, of the three kinds (encoder self, decoder causal self,
// cross), at every logged step, with per-head statistics beside it; and the same views for a sentence you type.
// TensorBoard loads this ES module in an iframe whose <base href="plugin/attention/"> makes relative URLs hit the
// plugin's routes (see docs of the backend HTTP API); the other modules are served under ./static/.
//
// This file only wires the parts together:
//   static/api.js       fetching the routes, the cache of answers
//   static/state.js     the one state object and every change to it
//   static/controls.js  the toolbars (run, sentence, kind, gold links, step slider)
//   static/grid.js      every head as a small map
//   static/stats.js     the statistics table
//   static/detail.js    the open head, big, compared, and its lines view; static/focus.js its hover focus
//   static/sentence.js  your own sentence
//   static/heatmap.js, static/lines.js, static/style.js, static/dom.js: drawing, style sheet, DOM helpers
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
// What a hovered token lights (class `highlight`) is specified at the top of static/focus.js.

import {attentionUrl, cached, fetchJSON, runsUrl, statisticsUrl} from "./static/api.js";
import {listRuns, loading, onKey, syncControls, toolbars} from "./static/controls.js";
import {compareTarget, detailSection, drawDetail} from "./static/detail.js";
import {debounce, h, messageLine, showMessage, tooltip} from "./static/dom.js";
import {drawGrid, gridSection} from "./static/grid.js";
import {bannerSection, drawBanner, syncTranslate, translateControls} from "./static/sentence.js";
import {currentStep, nearest, prefetchSteps, refreshRuns, start, state, update, wire} from "./static/state.js";
import {drawStats, statsSection} from "./static/stats.js";
import {CSS} from "./static/style.js";

const RUNS_POLL_MS = 30_000;

let drawToken = 0;

export async function render() {
  if (!document.getElementById("attention-style")) document.head.append(h("style", {id: "attention-style"}, CSS));
  document.body.replaceChildren();
  const app = h("div", {id: "app"});
  document.body.append(app, tooltip());
  app.append(h("div", {class: "note"}, "Loading runs…"));
  let runs;
  try {
    runs = (await fetchJSON(runsUrl())).runs || [];
  } catch (e) {
    app.replaceChildren(h("div", {id: "message"}, `Could not list runs: ${e.message}`));
    return;
  }
  if (!runs.length) {
    app.replaceChildren(emptyState());
    // Training may start later: look again, and draw the tab once a run has attention data.
    const timer = setInterval(async () => {
      const again = await fetchJSON(runsUrl()).then((r) => r.runs || []).catch(() => []);
      if (again.length) {
        clearInterval(timer);
        render();
      }
    }, RUNS_POLL_MS);
    return;
  }
  start(runs);
  wire({draw, sync});
  const left = h("section", {class: "left"}, ...gridSection(), h("div", {style: "height:14px"}), ...statsSection());
  const right = h("section", {class: "right"}, detailSection());
  app.replaceChildren(...toolbars(translateControls()), messageLine(), bannerSection(),
    h("div", {class: "main"}, left, right));
  window.addEventListener("resize", debounce(() => draw(), 150));
  await update();
  prefetchSteps();
  setInterval(pollRuns, RUNS_POLL_MS);
  document.addEventListener("keydown", onKey);
}

function sync() {
  syncControls();
  syncTranslate();
}

// While a run trains, new validations add steps: look again now and then.
async function pollRuns() {
  if (document.hidden || state.playing) return;
  let runs;
  try {
    runs = (await fetchJSON(runsUrl())).runs || [];
  } catch (e) {
    return; // the next look may work; a failing backend shows its errors on the next draw
  }
  if (!runs.length || JSON.stringify(runs) === JSON.stringify(state.runs)) return;
  refreshRuns(runs);
  listRuns();
  update();
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

function shownData() {
  if (state.mode === "custom") return Promise.resolve(state.custom);
  return cached(attentionUrl(state.run.run, currentStep(), state.sentence));
}

// The logged step of head statistics to show: the shown step's, else the newest before it.
function statsStep() {
  const steps = state.run.statistics_steps || [];
  if (!steps.length) return null;
  const target = state.mode === "custom" ? Infinity : currentStep();
  return nearest(steps, target === Infinity ? steps[steps.length - 1] : target, {notAbove: true});
}

async function draw() {
  if (!state.run) return;
  const token = ++drawToken;
  loading(true);
  const sStep = statsStep();
  const cmp = compareTarget();
  const [data, stats, other] = await Promise.all([
    shownData().catch((e) => ({error: e.message})),
    sStep === null ? null : cached(statisticsUrl(state.run.run, sStep)).catch((e) => ({error: e.message})),
    cmp ? cached(attentionUrl(cmp.run, cmp.step, cmp.sentence)).catch((e) => ({error: e.message})) : null,
  ]);
  if (token !== drawToken) return; // a newer draw started while this one waited
  loading(false);
  const errors = [data, stats, other].filter((x) => x && x.error).map((x) => x.error);
  showMessage([state.translateError, ...errors].filter(Boolean).join(" · "));
  drawBanner();
  if (data.error) return;
  const statsKind = stats && !stats.error ? stats : null;
  if (!data.kinds[state.kind]) {
    showMessage(`This run logged no ${state.kind} attention.`);
    return;
  }
  drawGrid(data, statsKind);
  drawStats(statsKind);
  drawDetail(data, statsKind, other && !other.error ? {data: other, target: cmp} : null);
}
