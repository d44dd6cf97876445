// The tab's one state object and every change to it. A change ends by asking the entry point to bring the
// controls in line (`sync`) and to draw again (`draw`), both wired once by index.js, so that the parts that
// change the state (toolbar, grid, table, detail view, your sentence) need not know one another.

import {attentionUrl, cached, explanationUrl} from "./api.js";
import {sameHead} from "./dom.js";

export const state = {
  vocabulary: null, // ./vocabulary: the kinds, methods and limits, as the backend defines them
  runs: [],
  unavailable: [], // the runs listed without maps, by name: [{run, reason}] (unavailableRuns)
  run: null, // the run's entry from ./runs
  stepIndex: 0,
  sentence: 0,
  kind: null, // the shown attention kind: a name from the vocabulary's kinds (set by start)
  method: null, // the explanation method of the cross maps (a name from the run's `methods`; set by start)
  mode: "probe", // "probe": logged probe sentences; "custom": the user's translated sentence
  custom: null, // the ./translate response
  head: {layer: 0, head: 0}, // the map open in the detail view (head null: the layer's own map)
  headChosen: false, // whether the open map was chosen (by the user, or by the first drawing: the best-aligned)
  overlay: [], // further maps drawn in the lines view: [{layer, head}]
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

const hooks = {draw: () => Promise.resolve(), sync: () => {}, explainCustom: () => {}};

/** Wire what a change calls: `draw()` (returns a promise), `sync()` (controls from the state) and
 * `explainCustom()` (your sentence explained by the chosen method). */
export function wire({draw, sync, explainCustom}) {
  hooks.draw = draw;
  hooks.sync = sync;
  hooks.explainCustom = explainCustom;
}

export const draw = () => hooks.draw();

/** Whether `map` ({layer, head}, 0-based) is the cross-attention head the run's training supervised with
 * guided alignment (./runs' `supervised`, counted from 1), shown as a cross map. */
export function isSupervised(map, run = state.run, kind = state.kind) {
  const s = run && run.supervised;
  return Boolean(s) && kind === "cross" && map.head !== null && map.layer === s.layer - 1 && map.head === s.head - 1;
}

/** The run's supervised head in words ("" for none): "supervised head: layer 2 head 1 (guided alignment on
 * eflomal's links, λ 0.05)"; where it was trained seeing the whole target (full context), that its AER is read
 * so and its drawn maps causal; where it was supervised at the step that reads each word, "…, read it with
 * Shift-Att"; where its unlinked words trained toward the source's </s>, that weight there says "no word". */
export function supervisedText(supervised) {
  if (!supervised) return "";
  const {layer, head, labels, weight, shifted, full_context: fullContext, null: none} = supervised;
  const links = labels === "eflomal" ? "eflomal's links" : labels ? `the links of ${labels}` : "word links";
  const whole = fullContext ? ", seeing the whole target: its AER read so, its maps drawn causal" : "";
  const reading = shifted ? ", at the step that reads each word: read it with Shift-Att" : "";
  const unaligned = none ? ", unlinked words trained toward the source's </s>: weight there says 'no word'" : "";
  return `supervised head: layer ${layer} head ${head} (guided alignment on ${links}, λ ${weight}${whole}${reading}` +
    `${unaligned})`;
}

/** Bring the controls in line with the state, then draw. */
export function update() {
  hooks.sync();
  return hooks.draw();
}

/** The runs ./runs lists without maps, by name, each with the one line that says why: those waiting for their
 * first maps (`waiting`) and those whose data this tab cannot read (`skipped`). */
export function unavailableRuns(answer) {
  const listed = {...answer.skipped, ...answer.waiting};
  return Object.keys(listed).sort().map((run) => ({run, reason: listed[run]}));
}

/** The run selector's options: the runs with maps, then the unavailable ones, greyed (disabled) with their
 * reason, so that none can be chosen to an error. */
export function runOptions() {
  return [
    ...state.runs.map((r) => ({value: r.run, label: r.run, disabled: false, title: ""})),
    ...state.unavailable.map((r) => ({value: r.run, label: `${r.run} · ${r.reason}`, disabled: true,
      title: r.reason})),
  ];
}

export const currentStep = () => state.run.steps[state.stepIndex];
export const runByName = (name) => state.runs.find((r) => r.run === name);
export const layersOf = (kind) => state.run.num_layers[kind];

/** The names of the attention kinds, in the backend's order. */
export const kindNames = () => state.vocabulary.kinds.map((k) => k.name);
/** An attention kind's entry in ./vocabulary: {name, label, short, help, rows, cols, causal, aligns}. */
export const kindOf = (name) => state.vocabulary.kinds.find((k) => k.name === name);

const uprightPatterns = new Map(); // ./vocabulary's `upright` -> its RegExp, built once
/** Whether `token` stands upright in a column label, one character under the other (Han, kana, Hangul), as
 * ./vocabulary's `upright` pattern says; other labels are turned to read bottom to top. */
export function upright(token) {
  const pattern = state.vocabulary.upright;
  if (!uprightPatterns.has(pattern)) uprightPatterns.set(pattern, new RegExp(`^(?:${pattern})$`, "u"));
  return uprightPatterns.get(pattern).test(token);
}
/** Whether kind `name` (the shown one by default) is the target → source kind: the maps that explanation
 * methods explain and gold alignments score. */
export const aligns = (name = state.kind) => kindOf(name).aligns;
/** The name of the target → source kind. */
export const alignmentKind = () => state.vocabulary.kinds.find((k) => k.aligns).name;
/** A kind's label as a title, its first letter a capital. */
export const kindTitle = (name) => {
  const {label} = kindOf(name);
  return label.charAt(0).toUpperCase() + label.slice(1);
};
/** An explanation method's entry in ./vocabulary: {name, label, weights, gradients, takes_steps, costly}. */
export const methodOf = (name) => state.vocabulary.methods.find((m) => m.name === name);
/** Whether method `name`'s maps are the cross-attention weights themselves (./vocabulary's `weights`). */
export const isWeights = (name) => Boolean(methodOf(name)?.weights);
/** Whether method `name` takes ./vocabulary's `ig_steps`, the points of its path integral (`takes_steps`). */
export const takesSteps = (name) => Boolean(methodOf(name)?.takes_steps);

/** The chosen method's entry in the run's `methods` (the cross weights' own when the run lists no methods). */
export function currentMethod() {
  const methods = state.run.methods || [];
  const weights = state.vocabulary.methods.find((m) => m.weights);
  return methods.find((m) => m.name === state.method) || methods[0]
    || {name: weights.name, label: weights.label, per_head: true, signed: false, layers: []};
}

export function nearest(values, target, {notAbove = false} = {}) {
  if (!values.length) return null;
  let best = values[0];
  for (const v of values) {
    if (notAbove && v > target) continue;
    if (Math.abs(v - target) < Math.abs(best - target) || (notAbove && best > target)) best = v;
  }
  return best;
}

/** Start on the vocabulary (./vocabulary) and a list of runs (./runs): the first run, its newest step,
 * cross-attention where it has it. */
export function start(vocabulary, runs) {
  state.vocabulary = vocabulary;
  state.runs = runs;
  state.run = runs[0];
  state.stepIndex = runs[0].steps.length - 1;
  state.kind = runs[0].kinds.includes(alignmentKind()) ? alignmentKind() : runs[0].kinds[0];
  state.method = currentMethod().name;
}

/** A new list of runs while the tab is open: keep the run and step, or follow the newest step if the slider
 * was on the last one. */
export function refreshRuns(runs) {
  const wasLast = state.stepIndex === state.run.steps.length - 1;
  const step = currentStep();
  state.runs = runs;
  state.run = runByName(state.run.run) || runs[0];
  const steps = state.run.steps;
  state.stepIndex = wasLast ? steps.length - 1 : Math.max(0, steps.indexOf(nearest(steps, step)));
}

export function selectRun(name) {
  const run = runByName(name);
  if (!run) return;
  const step = currentStep();
  state.run = run;
  state.stepIndex = Math.max(0, run.steps.indexOf(nearest(run.steps, step)));
  if (!run.sentences.some((s) => s.id === state.sentence)) {
    state.sentence = run.sentences.length ? run.sentences[0].id : 0;
  }
  if (!run.kinds.includes(state.kind)) state.kind = run.kinds[0];
  state.method = currentMethod().name; // the same method where the run has it, else its first
  if (state.mode === "custom") state.mode = "probe";
  state.compareRun = "";
  state.compareStep = "";
  clampHeads();
  update();
  prefetchSteps();
}

/** Show the logged step at `index` of the run's steps. */
export function selectStep(index) {
  state.stepIndex = index;
  return update();
}

/** A probe sentence by its id, or "custom" for the user's translated sentence. */
export function selectSentence(value) {
  if (value === "custom") {
    state.mode = "custom";
  } else {
    state.sentence = Number(value);
    state.mode = "probe";
  }
  update();
  prefetchSteps();
}

export function selectKind(kind) {
  state.kind = kind;
  state.focus = null;
  state.pinned = null;
  clampHeads();
  update();
}

/** Show the cross maps of explanation method `name` (switching to cross maps: methods explain those). */
export function selectMethod(name) {
  state.method = name;
  state.kind = alignmentKind();
  state.focus = null;
  state.pinned = null;
  clampHeads();
  update();
  if (state.mode === "custom") hooks.explainCustom();
  else prefetchSteps();
}

// Keep the open and overlaid maps among those the shown kind and method have: heads where they have heads,
// else the layers' own maps.
function clampHeads() {
  const method = aligns() ? currentMethod() : null;
  const L = method && method.layers.length ? method.layers.length : layersOf(state.kind);
  const H = method && !method.per_head ? 0 : state.run.num_heads;
  const ok = (x) => x.layer < L && (x.head === null ? aligns() : x.head < H);
  if (!ok(state.head)) state.head = {layer: 0, head: H ? 0 : null};
  state.overlay = state.overlay.filter(ok);
}

/** Open a head in the detail view (it leaves the overlay if it was there). */
export function openHead(head) {
  state.head = {layer: head.layer, head: head.head};
  state.headChosen = true;
  state.overlay = state.overlay.filter((o) => !sameHead(o, head));
  state.pinned = null;
  state.focus = null;
  draw();
}

/** Add a head to the lines view, or take it away. */
export function toggleOverlay(head) {
  if (sameHead(head, state.head)) return;
  const i = state.overlay.findIndex((o) => sameHead(o, head));
  if (i >= 0) state.overlay.splice(i, 1);
  else state.overlay.push({layer: head.layer, head: head.head});
  draw();
}

export function leaveCustom() {
  state.mode = "probe";
  update();
}

// Prefetch every logged step of the shown sentence (and of the chosen method's cross maps), so that dragging
// the slider is instant.
export async function prefetchSteps() {
  const run = state.run;
  const sentence = state.sentence;
  const method = aligns() ? currentMethod().name : null;
  for (const step of [...run.steps].reverse()) {
    if (state.run !== run || state.sentence !== sentence) return;
    try {
      await cached(attentionUrl(run.run, step, sentence));
      if (method !== null && state.method === method) await cached(explanationUrl(run.run, step, sentence, method));
    } catch {
      return; // the error shows when that step is drawn
    }
  }
}
