// The ATTENTION tab: every attention head of every layer, of the three kinds (encoder self, decoder causal self,
// cross), at every logged step, with per-head statistics beside it; and the same views for a sentence you type.
// TensorBoard loads this ES module in an iframe whose <base href="plugin/attention/"> makes relative URLs hit the
// plugin's routes (see docs of the backend HTTP API); the other modules are served under ./static/.
//
// This file only wires the parts together:
//   static/api.js       fetching the routes, the cache of answers (./vocabulary, read once, names every kind,
//                       method and limit the page shows: none is spelled in these files)
//   static/state.js     the one state object and every change to it
//   static/controls.js  the toolbars (run, sentence, kind, gold links, step slider)
//   static/grid.js      every head as a small map
//   static/stats.js     the statistics table
//   static/maps.js      which maps are shown: one kind's attention, or the chosen explanation method's cross maps
//   static/detail.js    the open map, big, compared, and its lines view; static/focus.js its hover focus;
//                       static/lens.js the logit-lens panel beside it
//   static/explain.js   which explanation method aligns best, and since which step
//   static/sentence.js  your own sentence
//   static/heatmap.js, static/lines.js, static/style.js, static/dom.js: drawing, style sheet, DOM helpers
//
// DOM hooks (stable, for tests):
//   #run-select (a run ./runs lists without maps is a disabled `option.unavailable` labelled with its reason),
//   #run-summary (the head the run's training supervised, shown only where there is one; that head's cross
//   maps in the grid carry `.supervised` and a `.sup-badge`, its row of #stats-table the class `supervised`),
//   #empty (no run has maps yet; its #waiting-runs lists the others, `li[data-run]`), #step-slider (range over step indices), #step-label (shows the step number), #sentence-select,
//   #kind-encoder / #kind-decoder / #kind-cross (buttons; the active one has class `active`), #method-select
//   (the explanation method of the cross maps, values = method names), #gold-toggle (checkbox), #grid with cells
//   `.head-cell[data-layer][data-head]` (0-based; the open map has class `selected`, overlaid maps `overlay`,
//   the best-aligned one `best`) and, for cross maps of a method with per-layer maps, `.layer-cell[data-layer]`;
//   each cross map of a sentence with gold links carries `.aer-badge[data-aer]` (its AER on this sentence),
//   #detail (the detail panel; attribute data-step = the step shown, data-kind, data-method, data-layer,
//   data-head, "" for a layer's map), in it the open map's `.aer-badge` (or `.no-aer`), one `.matrix` per map (a
//   second one when comparing; attribute data-gold-cells = number of gold links outlined) with tokens
//   `.token[data-axis="row"|"col"][data-index]` and highlight bands `.band[data-axis][data-index]`,
//   #lines-view (tokens `.lv-token[data-side="query"|"key"][data-index]`, one <g data-head="L1 H2"> of
//   <line>s per overlaid head), #stats-table (header cells `th[data-key]` with aria-sort on the sorted one;
//   rows `tr[data-layer][data-head]`, cells `td[data-key]`; a method's AER column has key "aer:<method>"),
//   #compare-step and #compare-run (selects; "" = off), #translate-input, #translate-beam, #ig-steps,
//   #translate-button, #translation, #back-to-probes, #message (errors); #explain-summary (static/explain.js)
//   and #lens-panel (static/lens.js) list their own.
// What a hovered token lights (class `highlight`) is specified at the top of static/focus.js.

import {
  attentionUrl, cached, explanationUrl, explanationsUrl, fetchJSON, lensUrl, runsUrl, statisticsUrl, vocabularyUrl,
} from "./static/api.js";
import {listRuns, loading, onKey, runSummary, syncControls, toolbars} from "./static/controls.js";
import {compareTarget, detailSection, drawDetail} from "./static/detail.js";
import {debounce, h, messageLine, showMessage, tooltip} from "./static/dom.js";
import {drawExplanations, explainSection} from "./static/explain.js";
import {bestMap, drawGrid, gridSection} from "./static/grid.js";
import {explained, mapOf, mapSet} from "./static/maps.js";
import {bannerSection, drawBanner, explainCustom, syncTranslate, translateControls} from "./static/sentence.js";
import {
  currentMethod, currentStep, isWeights, kindOf, nearest, prefetchSteps, refreshRuns, start, state, unavailableRuns,
  update, wire,
} from "./static/state.js";
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
  let answer, vocabulary;
  try {
    [vocabulary, answer] = await Promise.all([fetchJSON(vocabularyUrl()), fetchJSON(runsUrl())]);
  } catch (e) {
    app.replaceChildren(h("div", {id: "message"}, `Could not list runs: ${e.message}`));
    return;
  }
  const runs = answer.runs || [];
  state.unavailable = unavailableRuns(answer);
  if (!runs.length) {
    app.replaceChildren(emptyState());
    // Training may start later, and a run in training gets its first maps at its first validation: look again,
    // and draw the tab once a run has them.
    const timer = setInterval(async () => {
      const again = await fetchJSON(runsUrl()).catch(() => null);
      if (!again) return;
      if ((again.runs || []).length) {
        clearInterval(timer);
        render();
      } else {
        state.unavailable = unavailableRuns(again);
        app.replaceChildren(emptyState());
      }
    }, RUNS_POLL_MS);
    return;
  }
  start(vocabulary, runs);
  wire({draw, sync, explainCustom});
  const left = h("section", {class: "left"}, explainSection(), ...gridSection(), h("div", {style: "height:14px"}),
    ...statsSection());
  const right = h("section", {class: "right"}, detailSection());
  app.replaceChildren(...toolbars(translateControls()), runSummary(), messageLine(), bannerSection(),
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
  let answer;
  try {
    answer = await fetchJSON(runsUrl());
  } catch {
    return; // the next look may work; a failing backend shows its errors on the next draw
  }
  const runs = answer.runs || [];
  const unavailable = unavailableRuns(answer);
  const sameRuns = JSON.stringify(runs) === JSON.stringify(state.runs);
  if (!runs.length || (sameRuns && JSON.stringify(unavailable) === JSON.stringify(state.unavailable))) return;
  state.unavailable = unavailable;
  if (!sameRuns) refreshRuns(runs);
  listRuns();
  if (!sameRuns) update();
}

// No run has maps: the runs listed without them, each with why and when its first maps come.
function emptyState() {
  const listed = state.unavailable.map((r) => h("li", {"data-run": r.run}, h("code", {}, r.run), ": ", r.reason));
  return h(
    "div",
    {class: "empty", id: "empty"},
    h("h1", {}, "No attention data yet"),
    h("p", {}, "None of the runs in this log directory has logged attention maps."),
    listed.length ? h("ul", {id: "waiting-runs"}, listed) : null,
    h("p", {}, "Train with ", h("code", {}, "python train.py"), "; maps are logged from a run's first validation."),
    h("p", {}, "This tab looks for new data every 30 seconds."),
  );
}

function shownData() {
  if (state.mode === "custom") return Promise.resolve(state.custom);
  return cached(attentionUrl(state.run.run, currentStep(), state.sentence));
}

// The newest logged step at or before the shown one (the newest of all for your sentence) among `steps`.
function stepAtOrBefore(steps) {
  if (!steps || !steps.length) return null;
  return state.mode === "custom" ? steps[steps.length - 1] : nearest(steps, currentStep(), {notAbove: true});
}

const failed = (promise) => promise.catch((e) => ({error: e.message}));

// The chosen method's maps of a probe sentence (cross maps only; for the method whose maps are the cross
// weights they add the layer maps and the AER to the weights of ./attention).
function explanationOf(run, step, sentence) {
  if (!explained()) return null;
  return failed(cached(explanationUrl(run, step, sentence, currentMethod().name)));
}

// The logit lens of the shown sentence, for the maps whose rows are target positions (decoder and cross maps):
// {error} says why there is none.
function lensOf() {
  if (kindOf(state.kind).rows !== "target") return null;
  if (state.mode === "custom") return state.custom.lens || null;
  if (!state.run.has_lens) return {error: "This run logged no logit lens."};
  return failed(cached(lensUrl(state.run.run, currentStep(), state.sentence)));
}

async function draw() {
  if (!state.run) return;
  const token = ++drawToken;
  loading(true);
  const sStep = stepAtOrBefore(state.run.statistics_steps);
  const eStep = state.run.has_gold ? stepAtOrBefore(state.run.explanation_steps) : null;
  const cmp = compareTarget();
  const probe = state.mode === "probe";
  const [data, stats, other, explanation, otherExplanation, explanations, lens] = await Promise.all([
    failed(shownData()),
    sStep === null ? null : failed(cached(statisticsUrl(state.run.run, sStep))),
    cmp ? failed(cached(attentionUrl(cmp.run, cmp.step, cmp.sentence))) : null,
    probe ? explanationOf(state.run.run, currentStep(), state.sentence) : null,
    cmp ? explanationOf(cmp.run, cmp.step, cmp.sentence) : null,
    eStep === null ? null : failed(cached(explanationsUrl(state.run.run, eStep))),
    lensOf(),
  ]);
  if (token !== drawToken) return; // a newer draw started while this one waited
  loading(false);
  // A method's maps that cannot be read are an error for the maps; the extra layer maps of the method whose
  // maps are the cross weights are not.
  const weights = isWeights(currentMethod().name);
  const errors = [data, stats, other, weights ? null : explanation, weights ? null : otherExplanation]
    .filter((x) => x && x.error).map((x) => x.error);
  showMessage([state.translateError, ...errors].filter(Boolean).join(" · "));
  drawBanner();
  drawExplanations(eStep === null ? null : explanations);
  if (data.error) return;
  const good = (x) => (x && !x.error ? x : null);
  if (!data.kinds[state.kind]) {
    showMessage(`This run logged no ${state.kind} attention.`);
    return;
  }
  const set = mapSet(data, probe ? good(explanation) : data.explanation);
  if (!set) {
    if (!state.translating && !errors.length && !state.translateError) {
      showMessage(state.mode === "custom" ? "Your sentence is not explained by this method yet." : "");
    }
    return;
  }
  if (!state.headChosen) openBest(set, good(stats), good(explanations));
  // The open map may not exist in this set (a method without heads, layer maps not loaded): open the nearest.
  if (!mapOf(set, state.head)) {
    state.head = {layer: Math.min(state.head.layer, set.layers.length - 1), head: set.heads ? 0 : null};
    if (!mapOf(set, state.head)) state.head = {layer: 0, head: set.heads ? 0 : null};
  }
  state.overlay = state.overlay.filter((o) => mapOf(set, o));
  const otherSet = good(other) ? mapSet(other, good(otherExplanation)) : null;
  drawGrid(data, set, good(stats), good(explanations));
  drawStats(good(stats), good(explanations));
  drawDetail(data, set, good(stats), good(explanations), otherSet ? {data: other, set: otherSet} : null,
    lens && lens.error ? lens : good(lens));
}

// The first drawing opens the map the grid stars as best-aligned (cross maps with gold links), not simply the
// first head; from then on the open map is the user's.
function openBest(set, stats, explanations) {
  const best = bestMap(set, stats, explanations);
  if (best) state.head = {...best.map};
  state.headChosen = true;
}
