// What the tab chooses to show: the best-aligned map the grid stars, the best head of the statistics table,
// the leader line's "since", the map set of the shown kind and method, and which tokens of a self-attention
// map line up.
import assert from "node:assert/strict";
import {beforeEach, test} from "node:test";

import {leadSince} from "../../viz/tab/static/explain.js";
import {selfShift} from "../../viz/tab/static/focus.js";
import {bestMap} from "../../viz/tab/static/grid.js";
import {aerOf, mapName, mapOf, mapSet} from "../../viz/tab/static/maps.js";
import {start, state} from "../../viz/tab/static/state.js";
import {bestHead, defaultSort, shortName, statKeys} from "../../viz/tab/static/stats.js";
import {OWN, STEPS, VOCABULARY, WEIGHTS} from "./vocabulary.mjs";

const ATTENTION = {name: WEIGHTS.name, label: WEIGHTS.label, per_head: true, signed: false,
  layers: ["layer 1", "layer 2"]};
const IG = {name: STEPS.name, label: STEPS.label, per_head: false, signed: true,
  layers: ["embeddings", "layer 1", "layer 2"]};

beforeEach(() => {
  start(VOCABULARY, [{run: "a", steps: [6, 12], sentences: [{id: 0}], kinds: ["encoder", "decoder", "cross"],
    num_layers: {encoder: 2, decoder: 2, cross: 2}, num_heads: 2, methods: [ATTENTION, IG]}]);
  state.gold = true;
});

// Statistics at step 12 of two layers × two heads; NaN is served as null.
const STATS = {step: 12, definitions: [{name: "agreement", short: "agr"}, {name: "entropy", short: "ent"}],
  kinds: {cross: {agreement: [[0.5, 0.8], [0.8, null]], aer: [[0.4, 0.3], [0.2, 0.1]], entropy: [[1, 2], [3, 4]],
    extra: [[0, 0], [0, 0]]},
  encoder: {entropy: [[1, 1], [1, 1]]}}};

test("the best head has the highest agreement, ties going to the lower AER; a head without a value is none", () => {
  assert.deepEqual(bestHead(STATS), {layer: 1, head: 0, value: 0.8, aer: 0.2});
  const tied = {kinds: {cross: {agreement: [[0.8, 0.8]], aer: [[null, 0.3]]}}};
  assert.deepEqual(bestHead(tied), {layer: 0, head: 1, value: 0.8, aer: 0.3}); // no AER counts as the worst
  assert.equal(bestHead({kinds: {cross: {agreement: [[null, NaN]]}}}), null);
  state.kind = "encoder"; // no gold alignment: no agreement, no best head
  assert.equal(bestHead(STATS), null);
  assert.equal(bestHead(null), null);
});

test("the table sorts by agreement where there is one, else by layer", () => {
  assert.deepEqual(defaultSort(STATS), {key: "agreement", dir: -1});
  state.kind = "encoder";
  assert.deepEqual(defaultSort(STATS), {key: "layer", dir: 1});
});

test("statistics keep the definitions' order, the undefined last, under their short names", () => {
  assert.deepEqual(statKeys(STATS.kinds.cross, STATS), ["agreement", "entropy", "aer", "extra"]);
  assert.equal(shortName(STATS, "entropy"), "ent");
  assert.equal(shortName(STATS, "extra"), "extra");
});

test("the grid stars the best head of attention weights, from the statistics' step", () => {
  const set = {method: WEIGHTS.name, weights: true};
  assert.deepEqual(bestMap(set, STATS, null), {map: {layer: 1, head: 0, value: 0.8, aer: 0.2},
    text: "agreement 0.800 · AER 0.200", step: 12,
    title: "best-aligned head (highest agreement with the gold alignment)"});
  assert.equal(bestMap(set, null, null), null);
});

test("for a method the grid stars its map of lowest AER: a head where it has heads, else a layer", () => {
  const explanations = {step: 6, methods: {
    [OWN.name]: {head_aer: [[0.5, null], [0.25, 0.3]], aer: [0.4, 0.2]},
    [STEPS.name]: {head_aer: null, aer: [0.6, null, 0.35]},
  }};
  const own = {method: OWN.name, weights: false};
  const head = bestMap(own, STATS, explanations);
  assert.deepEqual([head.map, head.text, head.step], [{layer: 1, head: 0}, "AER 0.250 on the explanation sentences", 6]);
  const layer = bestMap({method: STEPS.name, weights: false}, STATS, explanations);
  assert.deepEqual([layer.map, layer.text], [{layer: 2, head: null}, "AER 0.350 on the explanation sentences"]);
  assert.equal(bestMap(own, STATS, {step: 6, methods: {}}), null); // not scored
  assert.equal(bestMap(own, STATS, {step: 6, methods: {[OWN.name]: {aer: [null, NaN]}}}), null);
});

test("the leader line says whether the leader took the lead at this step or since which", () => {
  const leader = {method: OWN.name, aer: 0.1, since_step: 6};
  assert.equal(leadSince(leader, 6), "leading at step 6");
  assert.equal(leadSince(leader, 12), "the leader since step 6");
});

// An ./attention answer: every kind's weights (L × H × T × S), tokens and gold links.
const ATTENTION_ANSWER = {step: 12, gold: [[0, 1]], kinds: {
  encoder: {rows: ["a", "b"], cols: ["a", "b"], weights: [[[[1, 0], [0, 1]], [[0.5, 0.5], [0.5, 0.5]]],
    [[[0, 1], [1, 0]], [[1, 0], [1, 0]]]]},
  cross: {rows: ["x", "</s>"], cols: ["a", "b"], weights: [[[[0.1, 0.9], [0.2, 0.8]], [[0.3, 0.7], [0.4, 0.6]]],
    [[[0.5, 0.5], [0.6, 0.4]], [[0.7, 0.3], [0.8, 0.2]]]]},
}};

test("one kind's attention weights: its heads, no layer maps, no gold outside cross maps", () => {
  state.kind = "encoder";
  const set = mapSet(ATTENTION_ANSWER, null);
  assert.deepEqual([set.method, set.weights, set.heads, set.layers, set.perLayer, set.gold],
    [null, true, 2, ["layer 1", "layer 2"], null, null]);
  assert.deepEqual(mapOf(set, {layer: 1, head: 1}), [[1, 0], [1, 0]]);
  assert.equal(mapOf(set, {layer: 1, head: null}), null);
  assert.equal(mapOf(set, {layer: 2, head: 0}), null);
});

test("cross maps of the weights' own method take the heads from ./attention, the layer maps and AER from ./explanation", () => {
  const explanation = {method: WEIGHTS.name, layers: ["layer 1", "layer 2"], per_layer: [[[0.2, 0.8]], [[0.6, 0.4]]],
    aer: {per_layer: [0.5, 0.25], per_head: [[1, 0], [0.5, null]]}};
  const set = mapSet(ATTENTION_ANSWER, explanation);
  assert.deepEqual([set.method, set.weights, set.heads, set.gold], [WEIGHTS.name, true, 2, [[0, 1]]]);
  assert.deepEqual(mapOf(set, {layer: 0, head: 1}), [[0.3, 0.7], [0.4, 0.6]]);
  assert.deepEqual(mapOf(set, {layer: 1, head: null}), [[0.6, 0.4]]);
  assert.deepEqual([aerOf(set, {layer: 1, head: null}), aerOf(set, {layer: 0, head: 1}), aerOf(set, {layer: 1, head: 1})],
    [0.25, 0, null]);
  assert.deepEqual([mapName(set, {layer: 1, head: 0}), mapName(set, {layer: 1, head: null})],
    ["L2 H1", "layer 2 (all heads)"]);
  state.gold = false;
  assert.equal(mapSet(ATTENTION_ANSWER, explanation).gold, null);
  // Without its ./explanation answer yet: the heads alone.
  const heads = mapSet(ATTENTION_ANSWER, null);
  assert.deepEqual([heads.perLayer, heads.aer, heads.layers], [null, null, ["layer 1", "layer 2"]]);
});

test("a method's cross maps come from its own answer only; a method without heads names its layers", () => {
  state.method = STEPS.name;
  assert.equal(mapSet(ATTENTION_ANSWER, null), null); // still loading
  assert.equal(mapSet(ATTENTION_ANSWER, {method: WEIGHTS.name}), null); // another method's answer
  const answer = {method: STEPS.name, label: STEPS.label, signed: true, rows: ["x"],
    cols: ["a", "b"], layers: ["embeddings", "layer 1"], per_head: null, per_layer: [[[0.5, -0.5]], [[0.9, 0.1]]],
    aer: null};
  const set = mapSet(ATTENTION_ANSWER, answer);
  assert.deepEqual([set.weights, set.heads, set.signed, set.rows, set.perHead], [false, 0, true, ["x"], null]);
  assert.deepEqual(mapOf(set, {layer: 0, head: null}), [[0.5, -0.5]]);
  assert.equal(mapName(set, {layer: 0, head: null}), "embeddings");
  assert.equal(aerOf(set, {layer: 0, head: null}), null);
});

test("a self-attention map lines up its tokens: the same (encoder), one on (decoder), or not at all", () => {
  assert.equal(selfShift(["a", "b", "</s>"], ["a", "b", "</s>"]), 0);
  assert.equal(selfShift(["le", "chat", "</s>"], ["<s>", "le", "chat"]), 1);
  assert.equal(selfShift(["x", "y"], ["a", "b"]), null);
  assert.equal(selfShift(["a", "b"], ["a", "b", "c"]), null);
});
