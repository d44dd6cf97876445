// How the tab writes numbers: the grid's captions and badges, the tooltips' values, the logit lens's ranks and
// the numbers written in a map's cells. A missing value (a diverged run's NaN, served as null) is a dash.
import assert from "node:assert/strict";
import {test} from "node:test";

import {valueText} from "../../viz/tab/static/detail.js";
import {fmt, headName, sameHead} from "../../viz/tab/static/dom.js";
import {cellText} from "../../viz/tab/static/heatmap.js";
import {rankText} from "../../viz/tab/static/lens.js";
import {aerText} from "../../viz/tab/static/maps.js";

test("fmt writes three decimals below 10, one from 10, and a dash for no value", () => {
  assert.deepEqual([0, 0.83149, -0.0404, 9.9994, 10, 123.45, -12.34].map(fmt),
    ["0.000", "0.831", "-0.040", "9.999", "10.0", "123.5", "-12.3"]);
  assert.deepEqual([null, undefined, NaN, Infinity, -Infinity].map(fmt), ["–", "–", "–", "–", "–"]);
});

test("a cell's value in the tooltip has four decimals, or a dash", () => {
  assert.deepEqual([0.12345, 1, 0, -0.5].map(valueText), ["0.1235", "1.0000", "0.0000", "-0.5000"]);
  assert.deepEqual([null, NaN].map(valueText), ["–", "–"]);
});

test("the logit lens counts ranks from 1", () => {
  assert.deepEqual([0, 4, null, NaN].map(rankText), ["#1", "#5", "–", "–"]);
});

test("weights in a cell read as .42, a near-certain one as 1; other scores with two significant digits", () => {
  assert.deepEqual([0.42, 0.999, 0.995, 0.994, 0.1].map((w) => cellText(w, 1)), [".42", "1", "1", ".99", ".10"]);
  assert.deepEqual([0.0123, -0.456, 3.14159, -12.5].map((w) => cellText(w, 5)), [".012", "-.46", "3.1", "-13"]);
  assert.equal(cellText(-0.3, 1), "-.3"); // a negative score on the weight scale is a score, not a weight
});

test("AER badges and head names", () => {
  assert.equal(aerText(0.25), "AER 0.250");
  assert.equal(aerText(null), "AER –");
  assert.equal(headName({layer: 0, head: 3}), "L1 H4");
  assert.ok(sameHead({layer: 1, head: 0}, {layer: 1, head: 0, value: 0.5}));
  assert.ok(!sameHead({layer: 1, head: 0}, {layer: 1, head: null}));
});
