// A run whose training supervised one cross-attention head: its summary line names the head, the grid and the
// head table mark it on cross maps only; each method's map chosen on the scored gold pairs wears its AER on the
// others.
import assert from "node:assert/strict";
import {test} from "node:test";

import {chosenMapName, reportedText} from "../../viz/tab/static/explain.js";
import {isSupervised, supervisedText} from "../../viz/tab/static/state.js";

const SUPERVISED = {layer: 2, head: 1, labels: "eflomal", weight: 0.05};

test("the summary line names the supervised head as the options do, counted from 1, with its links and λ", () => {
  assert.equal(supervisedText(SUPERVISED),
    "supervised head: layer 2 head 1 (guided alignment on eflomal's links, λ 0.05)");
  assert.equal(supervisedText({...SUPERVISED, labels: "train.align", weight: 0.1}),
    "supervised head: layer 2 head 1 (guided alignment on the links of train.align, λ 0.1)");
  assert.equal(supervisedText({...SUPERVISED, weight: 0.5, shifted: true}),
    "supervised head: layer 2 head 1 (guided alignment on eflomal's links, λ 0.5, at the step that reads each " +
    "word: read it with Shift-Att)");
  assert.equal(supervisedText({...SUPERVISED, weight: 1, full_context: true, shifted: true}),
    "supervised head: layer 2 head 1 (guided alignment on eflomal's links, λ 1, seeing the whole target: its " +
    "AER read so, its maps drawn causal, at the step that reads each word: read it with Shift-Att)");
  assert.equal(supervisedText({...SUPERVISED, weight: 1, shifted: true, null: true}),
    "supervised head: layer 2 head 1 (guided alignment on eflomal's links, λ 1, at the step that reads each word: " +
    "read it with Shift-Att, unlinked words trained toward the source's </s>: weight there says 'no word')");
  assert.equal(supervisedText(null), "");
  assert.equal(supervisedText(undefined), "");
});

test("only the supervised head's cross maps are marked, counted from 0 in the grid", () => {
  const run = {supervised: SUPERVISED};
  assert.equal(isSupervised({layer: 1, head: 0}, run, "cross"), true);
  assert.equal(isSupervised({layer: 1, head: 1}, run, "cross"), false);
  assert.equal(isSupervised({layer: 0, head: 0}, run, "cross"), false);
  assert.equal(isSupervised({layer: 1, head: 0}, run, "decoder"), false); // the same head of another kind
  assert.equal(isSupervised({layer: 1, head: null}, run, "cross"), false); // the layer's own map
  assert.equal(isSupervised({layer: 1, head: 0}, {supervised: null}, "cross"), false);
});

test("a reported map reads as its AER on the reporting pairs, chosen on the scored ones", () => {
  const head = {layer: "layer 2", head: 1, aer: 0.41234, chosen_aer: 0.38, choose: [1, 100], report: [101, 582]};
  assert.equal(reportedText(head), "AER on pairs 101–582: 0.412, chosen on 1–100 (layer 2 head 1, AER 0.380 there)");
  const layer = {...head, head: null, aer: null, choose: [1, 1], report: [2, 3]};
  assert.equal(chosenMapName(layer), "layer 2");
  assert.equal(reportedText(layer), "AER on pairs 2–3: –, chosen on 1 (layer 2, AER 0.380 there)");
});
