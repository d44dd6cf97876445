// Which maps the grid, the detail view and the lines view show: the attention weights of one kind, or, for
// cross maps, the chosen explanation method's (from ./explanation, or from ./translate for your sentence). Every
// part reads a "map set", so that none asks which method made it:
//   {kind, method, label, weights, signed, rows, cols, layers: [labels], heads: H (0: the method has no heads),
//    perHead: L × H × T × S or null, perLayer: L × T × S or null, aer: {per_layer, per_head} | null, gold}
// `weights`: the maps are attention weights (one kind's, or the cross weights of the method whose maps they
// are), drawn on the fixed 0..1 scale and described by the head statistics; `method` is null for a kind's.
// A map is named by {layer, head}; head === null names a layer's own map (per_layer).

import {fmt} from "./dom.js";
import {scaleOf} from "./heatmap.js";
import {aligns, currentMethod, isWeights, state} from "./state.js";

/** Whether the shown maps are the chosen method's (cross maps) rather than one kind's attention weights. */
export const explained = () => aligns();

/**
 * The map set of `data` (an ./attention or ./translate answer) for the shown kind, with `explanation` (an
 * ./explanation answer, or a translation's "explanation") for cross maps; null when the method's maps are
 * not there (still loading, or an error shown elsewhere).
 */
export function mapSet(data, explanation) {
  const kd = data.kinds[state.kind];
  const method = currentMethod();
  const gold = aligns() && state.gold && data.gold ? data.gold : null;
  const layerNames = (n) => Array.from({length: n}, (_, l) => `layer ${l + 1}`);
  if (!explained()) {
    return {kind: state.kind, method: null, label: null, weights: true, signed: false, rows: kd.rows,
      cols: kd.cols, layers: layerNames(kd.weights.length), heads: kd.weights[0].length, perHead: kd.weights,
      perLayer: null, aer: null, gold: null};
  }
  const e = explanation && explanation.method === method.name ? explanation : null;
  if (isWeights(method.name)) {
    // The heads come from the attention answer (the same weights), the layer maps and AER from ./explanation.
    return {kind: state.kind, method: method.name, label: method.label, weights: true, signed: false,
      rows: kd.rows, cols: kd.cols,
      layers: e ? e.layers : method.layers.length ? method.layers : layerNames(kd.weights.length),
      heads: kd.weights[0].length, perHead: kd.weights, perLayer: e ? e.per_layer : null,
      aer: e ? e.aer || null : null, gold};
  }
  if (!e) return null;
  return {kind: state.kind, method: e.method, label: e.label, weights: false, signed: e.signed, rows: e.rows,
    cols: e.cols, layers: e.layers, heads: e.per_head ? e.per_head[0].length : 0, perHead: e.per_head,
    perLayer: e.per_layer, aer: e.aer || null, gold};
}

/** The matrix (T × S) of map {layer, head} of a set, or null when the set has no such map. */
export function mapOf(set, {layer, head}) {
  if (head === null) return set.perLayer ? set.perLayer[layer] ?? null : null;
  return set.perHead ? set.perHead[layer]?.[head] ?? null : null;
}

/** The drawing options {scale, signed} of one map of a set: attention weights, and maps whose rows are
 * distributions as theirs are (Shift-Att, rollout), keep the fixed 0..1 scale, so that a flat row looks pale;
 * other scores are drawn on the map's own largest magnitude (its colour bar in the detail view says which),
 * since the size of a gradient or a value norm means nothing from one method to the next. */
export function scaleFor(set, matrix) {
  if (set.weights) return {scale: 1, signed: false};
  return scaleOf(matrix, set.signed, {weights: !set.signed && rowsAreDistributions(matrix)});
}

// Every row sums to 1 (or is all 0: a row with nothing to read, as Shift-Att's last), within the rounding of
// the routes' four decimals over a row.
function rowsAreDistributions(matrix) {
  return matrix.every((row) => {
    const sum = row.reduce((a, b) => a + b, 0);
    return row.every((v) => v >= 0) && (sum === 0 || Math.abs(sum - 1) <= 0.01);
  });
}

/** The per-sentence AER of map {layer, head}, or null (no gold alignment, or not loaded). */
export function aerOf(set, {layer, head}) {
  if (!set.aer) return null;
  if (head === null) return set.aer.per_layer?.[layer] ?? null;
  return set.aer.per_head?.[layer]?.[head] ?? null;
}

/** How a map is named: "L2 H1" for a head, the method's layer label for a layer's own map. */
export function mapName(set, {layer, head}) {
  const name = set.layers[layer] ?? `layer ${layer + 1}`;
  if (head === null) return set.heads ? `${name} (all heads)` : name;
  return `L${layer + 1} H${head + 1}`;
}

/** The AER badge's text. */
export const aerText = (aer) => `AER ${fmt(aer)}`;
