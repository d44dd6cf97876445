// The run list: runs that ./runs lists without maps (waiting for their first, or unreadable) stay in the run
// selector, greyed with the line that says why, and cannot be chosen.
import assert from "node:assert/strict";
import {test} from "node:test";

import {runOptions, selectRun, start, state, unavailableRuns, wire} from "../../viz/tab/static/state.js";
import {VOCABULARY} from "./vocabulary.mjs";

globalThis.fetch = async () => ({ok: false, status: 404, statusText: "Not Found", json: async () => ({error: "-"})});
const drawn = [];
wire({draw: async () => drawn.push("draw"), sync: () => {}, explainCustom: () => {}});

const WAITING = "no attention logged yet: maps come at the first validation, after epoch 1 (every 5 epochs after, "
  + "and at the end of training)";
const SKIPPED = "run 'old' logged with layout version 1 of the attention summaries; this tab reads version 3";

function run(name) {
  return {run: name, steps: [6], sentences: [{id: 0}], kinds: ["encoder", "decoder", "cross"],
    num_layers: {encoder: 2, decoder: 2, cross: 2}, num_heads: 2, methods: []};
}

test("unavailableRuns: the waiting and skipped runs by name, each with its reason", () => {
  const answer = {runs: [run("toy")], waiting: {"zh/version_1": WAITING, "en/version_0": "off"},
    skipped: {old: SKIPPED}};
  assert.deepEqual(unavailableRuns(answer), [
    {run: "en/version_0", reason: "off"}, {run: "old", reason: SKIPPED}, {run: "zh/version_1", reason: WAITING},
  ]);
  assert.deepEqual(unavailableRuns({runs: []}), []); // an answer without either list
});

test("runOptions: the runs with maps can be chosen; the others follow, disabled, labelled with their reason", () => {
  start(VOCABULARY, [run("toy")]);
  state.unavailable = unavailableRuns({waiting: {"zh/version_0": WAITING}});
  assert.deepEqual(runOptions(), [
    {value: "toy", label: "toy", disabled: false, title: ""},
    {value: "zh/version_0", label: `zh/version_0 · ${WAITING}`, disabled: true, title: WAITING},
  ]);
});

test("choosing a run without maps changes nothing and draws nothing", () => {
  start(VOCABULARY, [run("toy")]);
  state.unavailable = [{run: "zh/version_0", reason: WAITING}];
  drawn.length = 0;
  selectRun("zh/version_0");
  assert.equal(state.run.run, "toy");
  assert.deepEqual(drawn, []);
});
