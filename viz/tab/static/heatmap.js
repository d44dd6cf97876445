// Canvas heatmaps for attention maps: a white -> dark blue sequential colour map (ColorBrewer "Blues"),
// drawn cell by cell so that cell borders stay crisp at any size, with gold-alignment outlines on top.

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

export const GOLD_COLOUR = "#f76707";
export const MASKED_COLOUR = "#e9ecef";

export function colourOf(weight) {
  const k = Math.round(Math.max(0, Math.min(1, weight)) * 255);
  return LUT[k];
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
 * Draw `matrix` (rows x cols of weights in [0, 1]) into `canvas` at `width` x `height` CSS pixels.
 * Options: gold (list of [row, col] cells to outline), numbers (write values >= 0.1 when cells are big enough),
 * causal (grey out the cells above the diagonal, which a causal mask hides: "cannot attend", not "weight 0").
 */
export function drawMatrix(canvas, matrix, width, height, {gold = null, numbers = false, causal = false} = {}) {
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
      ctx.fillStyle = causal && j > i ? MASKED_COLOUR : colourOf(matrix[i][j]);
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
        if (w < 0.1) continue;
        ctx.fillStyle = w > 0.55 ? "#fff" : "#08306b";
        ctx.fillText(w >= 0.995 ? "1" : w.toFixed(2).slice(1), (xs[j] + xs[j + 1]) / 2, (ys[i] + ys[i + 1]) / 2);
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

/** A small horizontal colour bar with its scale, as a DOM element. */
export function colourBar() {
  const wrap = document.createElement("span");
  wrap.className = "colour-bar";
  wrap.title = "colour scale of every map: attention weight from 0 to 1";
  const canvas = document.createElement("canvas");
  const ctx = sized(canvas, 96, 10);
  for (let x = 0; x < 96; x++) {
    ctx.fillStyle = colourOf(x / 95);
    ctx.fillRect(x, 0, 1, 10);
  }
  ctx.strokeStyle = "#adb5bd";
  ctx.strokeRect(0.5, 0.5, 95, 9);
  const lo = document.createElement("span");
  lo.textContent = "0";
  const hi = document.createElement("span");
  hi.textContent = "1";
  wrap.append(lo, canvas, hi);
  return wrap;
}
