// Canvas heatmaps for attention maps: a white -> dark blue sequential colour map (ColorBrewer "Blues") for
// weights, a blue -> white -> red diverging one (ColorBrewer "RdBu") for signed scores, drawn cell by cell so
// that cell borders stay crisp at any size, with gold-alignment outlines on top.

const STOPS = [
  [247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107],
];

// 256 precomputed colours; index = round(weight * 255) with weights clamped to [0, 1].
const LUT = Array.from({length: 256}, (_, k) => {
  const x = (k / 255) * (STOPS.length - 1);
  const i = Math.min(Math.floor(x), STOPS.length - 2);
  const t = x - i;
  const [a, b] = [STOPS[i], STOPS[i + 1]];
  return `rgb(${a.map((v, c) => Math.round(v + (b[c] - v) * t)).join(",")})`;
});

// ColorBrewer "RdBu" from -1 (blue) through 0 (white) to +1 (red).
const DIVERGING = [
  [5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31],
];
const DIVERGING_LUT = Array.from({length: 257}, (_, k) => {
  const x = (k / 256) * (DIVERGING.length - 1);
  const i = Math.min(Math.floor(x), DIVERGING.length - 2);
  const t = x - i;
  const [a, b] = [DIVERGING[i], DIVERGING[i + 1]];
  return `rgb(${a.map((v, c) => Math.round(v + (b[c] - v) * t)).join(",")})`;
});

export const GOLD_COLOUR = "#f76707";
export const MASKED_COLOUR = "#e9ecef";

export function colourOf(weight) {
  const k = Math.round(Math.max(0, Math.min(1, weight)) * 255);
  return LUT[k];
}

/** The diverging colour of `x` in [-1, 1] (clamped): blue below 0, white at 0, red above. */
export function divergingColourOf(x) {
  return DIVERGING_LUT[Math.round((Math.max(-1, Math.min(1, x)) + 1) * 128)];
}

/**
 * How to colour a map of scores: {scale, signed} for drawMatrix, where scale is the largest magnitude in the
 * matrix. With `weights` (the default), a map whose values all lie in [0, 1] and that is not signed keeps the
 * fixed weight scale (scale 1); without it every map is drawn on its own largest value (scores whose size
 * means nothing across maps, such as gradients).
 */
export function scaleOf(matrix, signed = false, {weights = true} = {}) {
  let top = 0;
  let low = 0;
  for (const row of matrix) {
    for (const v of row) {
      if (!Number.isFinite(v)) continue; // no value (see drawMatrix)
      top = Math.max(top, Math.abs(v));
      low = Math.min(low, v);
    }
  }
  if (weights && !signed && low >= 0 && top <= 1) return {scale: 1, signed: false};
  return {scale: top || 1, signed};
}

// A value as written in a cell: weights as ".42", other scores with two significant digits.
export function cellText(w, scale) {
  if (scale === 1 && w >= 0) return w >= 0.995 ? "1" : w.toFixed(2).slice(1);
  return Number(w.toPrecision(2)).toString().replace(/^(-?)0\./, "$1.");
}

// Size a canvas to CSS (width, height) at the screen's pixel density; returns its 2-D context in CSS pixels.
function sized(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(width * ratio));
  canvas.height = Math.max(1, Math.round(height * ratio));
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/**
 * Draw `matrix` (rows x cols of weights in [0, 1]; null or NaN: no value, a blank cell) into `canvas` at `width` x `height` CSS pixels.
 * Options: gold (list of [row, col] cells to outline), numbers (write values >= 0.1 when cells are big enough),
 * causal (grey out the cells above the diagonal, which a causal mask hides: "cannot attend", not "weight 0"),
 * scale (values are divided by it before colouring: a score map drawn on its own largest magnitude, see
 * scaleOf), signed (a diverging scale from -scale to +scale, white at 0).
 */
export function drawMatrix(canvas, matrix, width, height,
  {gold = null, numbers = false, causal = false, scale = 1, signed = false} = {}) {
  const ctx = sized(canvas, width, height);
  const rows = matrix.length;
  const cols = rows ? matrix[0].length : 0;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  if (!rows || !cols) return;
  const xs = Array.from({length: cols + 1}, (_, j) => Math.round((j * width) / cols));
  const ys = Array.from({length: rows + 1}, (_, i) => Math.round((i * height) / rows));
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const masked = causal && j > i;
      // A diverged run's NaN (served as null) is no value: its cell is left blank, not drawn as 0.
      if (!masked && !Number.isFinite(matrix[i][j])) continue;
      const x = matrix[i][j] / scale;
      ctx.fillStyle = masked ? MASKED_COLOUR : signed ? divergingColourOf(x) : colourOf(x);
      ctx.fillRect(xs[j], ys[i], xs[j + 1] - xs[j], ys[i + 1] - ys[i]);
    }
  }
  const cell = Math.min(width / cols, height / rows);
  if (numbers && cell >= 24) {
    ctx.font = `${Math.min(11, Math.floor(cell / 2.6))}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const w = matrix[i][j];
        const x = w / scale;
        if (!Number.isFinite(x) || Math.abs(x) < 0.1 || (!signed && x < 0)) continue;
        ctx.fillStyle = Math.abs(x) > 0.55 ? "#fff" : "#08306b";
        ctx.fillText(cellText(w, scale), (xs[j] + xs[j + 1]) / 2, (ys[i] + ys[i + 1]) / 2);
      }
    }
  }
  if (gold) {
    const line = cell >= 16 ? 2 : 1;
    ctx.strokeStyle = GOLD_COLOUR;
    ctx.lineWidth = line;
    for (const [i, j] of gold) {
      if (i >= rows || j >= cols) continue;
      ctx.strokeRect(xs[j] + line / 2, ys[i] + line / 2, xs[j + 1] - xs[j] - line, ys[i + 1] - ys[i] - line);
    }
  }
}

/**
 * A small horizontal colour bar with its scale, as a DOM element: by default the weight scale 0 to 1; with
 * {scale, signed} (see scaleOf) the scale of one score map, -scale to +scale when signed.
 */
export function colourBar({scale = 1, signed = false, title = null} = {}) {
  const wrap = document.createElement("span");
  wrap.className = "colour-bar";
  const label = (v) => Number(v.toPrecision(2)).toString();
  wrap.title = title || (scale === 1 && !signed ? "colour scale of every map: attention weight from 0 to 1"
    : `colour scale of this map: ${signed ? `${label(-scale)} (blue) to ${label(scale)} (red)`
      : `0 to ${label(scale)}`}`);
  const canvas = document.createElement("canvas");
  const ctx = sized(canvas, 96, 10);
  for (let x = 0; x < 96; x++) {
    ctx.fillStyle = signed ? divergingColourOf((2 * x) / 95 - 1) : colourOf(x / 95);
    ctx.fillRect(x, 0, 1, 10);
  }
  ctx.strokeStyle = "#adb5bd";
  ctx.strokeRect(0.5, 0.5, 95, 9);
  const lo = document.createElement("span");
  lo.textContent = signed ? label(-scale) : "0";
  const hi = document.createElement("span");
  hi.textContent = scale === 1 && !signed ? "1" : label(scale);
  wrap.append(lo, canvas, hi);
  return wrap;
}
