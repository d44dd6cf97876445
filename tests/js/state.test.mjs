// The tab's state transitions (static/state.js), with the drawing and the controls wired to recorders and
// the routes answering 404: what each change leaves in the one state object.
import assert from "node:assert/strict";
import {beforeEach, test} from "node:test";

import {
  alignmentKind, aligns, currentMethod, currentStep, isWeights, kindOf, nearest, openHead, refreshRuns, selectKind,
  selectMethod, selectRun, selectSentence, selectStep, start, state, takesSteps, toggleOverlay, upright, wire,
} from "../../viz/tab/static/state.js";
import {STEPS, VOCABULARY, WEIGHTS} from "./vocabulary.mjs";

const asked = [];
globalThis.fetch = async (url) => {
  asked.push(url);
  return {ok: false, status: 404, statusText: "Not Found", json: async () => ({error: "not logged"})};
};

const calls = [];
wire({draw: async () => calls.push("draw"), sync: () => calls.push("sync"),
  explainCustom: () => calls.push("explainCustom")});

const ATTENTION = {name: WEIGHTS.name, label: WEIGHTS.label, per_head: true, signed: false,
  layers: ["layer 1", "layer 2"]};
const IG = {name: STEPS.name, label: STEPS.label, per_head: false, signed: true,
  layers: ["embeddings", "layer 1", "layer 2"]};

function run(name, steps, overrides = {}) {
  return {run: name, steps, sentences: [{id: 0}, {id: 1}], kinds: ["encoder", "decoder", "cross"],
    num_layers: {encoder: 3, decoder: 2, cross: 2}, num_heads: 4, methods: [ATTENTION, IG], ...overrides};
}

beforeEach(() => {
  Object.assign(state, {mode: "probe", sentence: 0, head: {layer: 0, head: 0}, overlay: [], focus: null,
    pinned: null, compareRun: "", compareStep: ""});
  calls.length = 0;
  asked.length = 0;
});

test("nearest: the closest value, the first of ties; with notAbove the closest not above the target", () => {
  assert.equal(nearest([100, 200, 300], 240), 200);
  assert.equal(nearest([100, 200, 300], 250), 200);
  assert.equal(nearest([100, 200, 300], 1000), 300);
  assert.equal(nearest([100, 200, 300], 290, {notAbove: true}), 200);
  assert.equal(nearest([300, 200, 100], 150, {notAbove: true}), 100);
  assert.equal(nearest([], 5), null);
});

test("start opens the first run at its newest step, on cross maps where it has them", () => {
  start(VOCABULARY, [run("a", [10, 20, 30]), run("b", [5])]);
  assert.deepEqual([state.run.run, currentStep(), state.kind, state.method], ["a", 30, "cross", WEIGHTS.name]);
  start(VOCABULARY, [run("enc", [1, 2], {kinds: ["encoder"], methods: []})]);
  assert.deepEqual([state.kind, state.method], ["encoder", WEIGHTS.name]); // no methods: the cross weights' own
  assert.deepEqual(currentMethod(), {name: WEIGHTS.name, label: WEIGHTS.label, per_head: true, signed: false,
    layers: []});
});

test("a method is told apart by its properties in the vocabulary, whatever its name", () => {
  const renamed = {...VOCABULARY, methods: [
    {name: "raw", label: "raw weights", weights: true, gradients: false, takes_steps: false, costly: false},
    {name: "path", label: "a path integral", weights: false, gradients: true, takes_steps: true, costly: true},
  ]};
  start(renamed, [run("a", [1], {methods: []})]);
  assert.deepEqual([state.method, currentMethod().label], ["raw", "raw weights"]);
  assert.deepEqual(["raw", "path", "unknown"].map(isWeights), [true, false, false]);
  assert.deepEqual(["raw", "path", "unknown"].map(takesSteps), [false, true, false]);
  start(VOCABULARY, [run("a", [1])]);
  assert.deepEqual(VOCABULARY.methods.filter((m) => isWeights(m.name)), [WEIGHTS]);
  assert.deepEqual(VOCABULARY.methods.filter((m) => takesSteps(m.name)), [STEPS]);
});

test("the kinds' meaning comes from the vocabulary: cross maps align, decoder maps are causal", () => {
  start(VOCABULARY, [run("a", [10])]);
  assert.equal(alignmentKind(), "cross");
  assert.deepEqual(["encoder", "decoder", "cross"].map((k) => aligns(k)), [false, false, true]);
  assert.deepEqual(["encoder", "decoder", "cross"].map((k) => kindOf(k).causal), [false, true, false]);
  assert.equal(aligns(), true); // the shown kind: cross
  selectKind("decoder");
  assert.equal(aligns(), false);
});

test("a new list of runs follows the newest step from the last one, and keeps a chosen earlier step", () => {
  start(VOCABULARY, [run("a", [10, 20])]);
  refreshRuns([run("a", [10, 20, 30])]);
  assert.equal(currentStep(), 30);
  selectStep(0);
  refreshRuns([run("a", [10, 20, 30, 40])]);
  assert.equal(currentStep(), 10);
  refreshRuns([run("b", [7, 8])]); // the run is gone: the first of the new list
  assert.equal(state.run.run, "b");
});

test("another run keeps the nearest step, the sentence and the kind it has, and drops what it has not", () => {
  start(VOCABULARY, [run("a", [100, 200, 300]), run("b", [90, 210], {sentences: [{id: 5}], kinds: ["encoder", "decoder"],
    methods: [ATTENTION]})]);
  selectStep(1);
  selectSentence("1");
  state.kind = "decoder";
  state.method = STEPS.name;
  state.compareStep = "100";
  state.head = {layer: 1, head: 3};
  calls.length = 0;
  selectRun("b");
  assert.deepEqual([currentStep(), state.sentence, state.kind, state.method], [210, 5, "decoder", WEIGHTS.name]);
  assert.equal(state.compareStep, "");
  assert.deepEqual(state.head, {layer: 1, head: 3}); // b's decoder has that head too
  assert.deepEqual(calls, ["sync", "draw"]);
  selectRun("no such run");
  assert.equal(state.run.run, "b");
});

test("a method without heads opens a layer's own map; a kind with fewer layers the first head", () => {
  start(VOCABULARY, [run("a", [1])]);
  state.head = {layer: 1, head: 2};
  state.overlay = [{layer: 0, head: 1}];
  selectMethod(STEPS.name);
  assert.deepEqual([state.kind, currentMethod().name], ["cross", STEPS.name]);
  assert.deepEqual(state.head, {layer: 0, head: null}); // no heads
  assert.deepEqual(state.overlay, []);
  selectMethod(WEIGHTS.name);
  state.head = {layer: 2, head: 0};
  selectKind("encoder"); // three layers
  assert.deepEqual(state.head, {layer: 2, head: 0});
  selectKind("decoder"); // two
  assert.deepEqual(state.head, {layer: 0, head: 0});
});

test("choosing a method in your sentence explains it; on probes it prefetches the steps", async () => {
  start(VOCABULARY, [run("a", [1, 2])]);
  state.mode = "custom";
  selectMethod(STEPS.name);
  assert.deepEqual(calls, ["sync", "draw", "explainCustom"]);
  state.mode = "probe";
  calls.length = 0;
  selectMethod(STEPS.name);
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.deepEqual(calls, ["sync", "draw"]);
  // Newest step first; the first failed answer stops the prefetch (its error shows when drawn).
  assert.deepEqual(asked, ["./attention?run=a&step=2&sentence=0"]);
});

test("a head opened leaves the overlay; overlaying toggles, never the open head", () => {
  start(VOCABULARY, [run("a", [1])]);
  toggleOverlay({layer: 0, head: 1});
  toggleOverlay({layer: 1, head: 2});
  toggleOverlay({layer: 0, head: 0}); // the open one
  assert.deepEqual(state.overlay, [{layer: 0, head: 1}, {layer: 1, head: 2}]);
  toggleOverlay({layer: 0, head: 1});
  assert.deepEqual(state.overlay, [{layer: 1, head: 2}]);
  state.pinned = {axis: "row", index: 1};
  openHead({layer: 1, head: 2, value: 0.9});
  assert.deepEqual([state.head, state.headChosen, state.overlay, state.pinned], [{layer: 1, head: 2}, true, [], null]);
});

test("a sentence is a probe's id, or your own", () => {
  start(VOCABULARY, [run("a", [1])]);
  selectSentence("1");
  assert.deepEqual([state.mode, state.sentence], ["probe", 1]);
  selectSentence("custom");
  assert.deepEqual([state.mode, state.sentence], ["custom", 1]);
});

test("upright: column labels of Han, kana and Hangul tokens stand upright, as the vocabulary's pattern says", () => {
  start(VOCABULARY, [run("a", [1])]);
  const tokens = ["我", "▁我", "喜欢", "ですが", "한국", "。", "𠀋", "", "▁", "a我", "我…", "tea", "</s>"];
  assert.deepEqual(tokens.filter(upright), ["我", "▁我", "喜欢", "ですが", "한국", "。", "𠀋"]);
});
