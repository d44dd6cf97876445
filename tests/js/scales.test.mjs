// The colour scales of the maps: which scale a map is drawn on (the fixed weight scale, or its own largest
// magnitude) and the colours at its ends.
import assert from "node:assert/strict";
import {test} from "node:test";

import {colourOf, divergingColourOf, scaleOf} from "../../viz/tab/static/heatmap.js";
import {scaleFor} from "../../viz/tab/static/maps.js";

const channels = (rgb) => rgb.match(/\d+/g).map(Number);

test("weights run from ColorBrewer Blues' lightest to its darkest, clamped to [0, 1]", () => {
  assert.equal(colourOf(0), "rgb(247,251,255)");
  assert.equal(colourOf(1), "rgb(8,48,107)");
  assert.equal(colourOf(-0.5), colourOf(0));
  assert.equal(colourOf(7), colourOf(1));
  const darkness = [0, 0.25, 0.5, 0.75, 1].map((w) => channels(colourOf(w)).reduce((a, b) => a + b));
  assert.deepEqual(darkness, [...darkness].sort((a, b) => b - a)); // a larger weight is never lighter
});

test("signed scores run blue through white to red, clamped to [-1, 1]", () => {
  assert.equal(divergingColourOf(-1), "rgb(5,48,97)");
  assert.equal(divergingColourOf(0), "rgb(247,247,247)");
  assert.equal(divergingColourOf(1), "rgb(103,0,31)");
  assert.equal(divergingColourOf(-3), divergingColourOf(-1));
  assert.equal(divergingColourOf(3), divergingColourOf(1));
  const [r, , b] = channels(divergingColourOf(-0.5));
  const [r2, , b2] = channels(divergingColourOf(0.5));
  assert.ok(b > r && r2 > b2, "below 0 blue, above 0 red");
});

test("a map of weights keeps the fixed scale; any other map is drawn on its largest magnitude", () => {
  assert.deepEqual(scaleOf([[0.2, 0.8], [1, 0]]), {scale: 1, signed: false});
  assert.deepEqual(scaleOf([[0.5, 2.5]]), {scale: 2.5, signed: false}); // above 1: not weights
  assert.deepEqual(scaleOf([[-0.5, 0.2]]), {scale: 0.5, signed: false}); // below 0: not weights
  assert.deepEqual(scaleOf([[-3, 1]], true), {scale: 3, signed: true});
  assert.deepEqual(scaleOf([[0.2, 0.4]], false, {weights: false}), {scale: 0.4, signed: false});
  assert.deepEqual(scaleOf([[0, 0]], false, {weights: false}), {scale: 1, signed: false}); // never 0
});

test("missing values (null, NaN) take no part in the scale", () => {
  assert.deepEqual(scaleOf([[null, 0.4], [NaN, 0.1]]), {scale: 1, signed: false});
  assert.deepEqual(scaleOf([[null, -2], [NaN, 0.1]], true), {scale: 2, signed: true});
});

test("scaleFor: weights and maps whose rows are distributions on the weight scale, other scores on their own", () => {
  const weights = {weights: true, signed: false};
  const method = {weights: false, signed: false};
  const signed = {weights: false, signed: true};
  assert.deepEqual(scaleFor(weights, [[0.2, 0.3]]), {scale: 1, signed: false});
  assert.deepEqual(scaleFor(method, [[0.2, 0.3]]), {scale: 0.3, signed: false}); // the same rows, not weights
  // Rows summing to 1 within the routes' rounding, or all 0 (a row with nothing to read): distributions.
  assert.deepEqual(scaleFor(method, [[0.3, 0.7], [0, 0], [0.333, 0.333, 0.333]]), {scale: 1, signed: false});
  assert.deepEqual(scaleFor(method, [[0.2, 0.3], [0.1, 0.1]]), {scale: 0.3, signed: false});
  assert.deepEqual(scaleFor(signed, [[0.25, -0.5]]), {scale: 0.5, signed: true});
});
