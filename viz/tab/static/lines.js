// The two-column "lines" view (after BertViz): query tokens on the left, key tokens on the right, one line per
// (query, key) pair whose opacity and width grow with the attention weight; several heads in their own colours.

const SVG = "http://www.w3.org/2000/svg";

// Distinct colours for overlaid heads, the first ones differing most. // Orange is left out: it marks gold links.
export const HEAD_COLOURS = ["#1c7ed6", "#c2255c", "#2b8a3e", "#7048e8", "#0c8599", "#8c564b", "#5c5f66", "#e64980"];

// Lines lighter than this are left out: they would only add haze.
const MIN_WEIGHT = 0.02;

function el(name, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

// Label widths are measured in the page's font, not guessed from a count of characters: a Chinese or
// Japanese character is about twice as wide as a Latin letter.
const MAX_LABEL = 103; // px of text in a label column of at most 110 px
let measuring = null;

function textWidth(text, px) {
  measuring = measuring || document.createElement("canvas").getContext("2d");
  measuring.font = `${px}px ${getComputedStyle(document.body).fontFamily}`;
  return measuring.measureText(text).width;
}

// The token, shortened with an ellipsis to 16 characters and to MAX_LABEL pixels at `px`.
function clip(token, px, n = 16) {
  let shown = token.length > n ? `${token.slice(0, n - 1)}…` : token;
  for (let kept = Math.min(token.length, n - 1); kept > 1 && textWidth(shown, px) > MAX_LABEL; kept--) {
    shown = `${token.slice(0, kept - 1)}…`;
  }
  return shown;
}

/**
 * Build the lines view.
 *   rows, cols: token lists (queries, keys); heads: [{label, colour, matrix, scale?, signed?}] (matrix rows x
 *   cols; a score map that is not a weight in [0, 1] gives its largest magnitude as `scale`, and lines are
 *   drawn for |value| / scale; with `signed`, lines of negative values are dashed);
 *   top: y of the first token row (px), step: the spacing of token rows (px), so that rows can sit level with
 *   the rows of a matrix beside it.
 * Returns {node, setFocus(focus)} where focus is null or {rows: Set, cols: Set} of lit indices: with a focus
 * only the lines leaving lit queries or reaching lit keys are drawn, and lit tokens get class `highlight`.
 */
export function linesView({rows, cols, heads, top = 26, step = 20, width = 300}) {
  const n = Math.max(rows.length, cols.length, 1);
  top = Math.max(top, 22);
  const fullHeight = Math.ceil(top + n * step + 6);
  const font = step < 16 ? 11 : step < 22 ? 12 : 13;
  const labels = new Map([...rows, ...cols].map((t) => [t, clip(t, font)]));
  const widest = Math.max(...[...labels.values()].map((t) => textWidth(t, font)));
  const labelWidth = Math.min(110, Math.max(40, 7 + Math.ceil(widest)));
  const x0 = labelWidth + 6;
  const x1 = width - labelWidth - 6;
  const svg = el("svg", {width, height: fullHeight, viewBox: `0 0 ${width} ${fullHeight}`, class: "lines-svg"});
  svg.append(
    el("text", {x: x0 - 2, y: top - 8, "text-anchor": "end", class: "lv-head"}, "queries"),
    el("text", {x: x1 + 2, y: top - 8, "text-anchor": "start", class: "lv-head"}, "keys"),
  );
  const yRow = (i) => top + (i + 0.5) * step;
  const linesGroup = el("g", {class: "lv-lines"});
  svg.append(linesGroup);
  const tokens = [];
  const addToken = (side, i, token) => {
    const left = side === "query";
    const g = el("g", {class: "lv-token", "data-side": side, "data-index": i});
    g.append(el("rect", {
      x: left ? 0 : x1, y: yRow(i) - step / 2, width: labelWidth + 6, height: step,
      rx: 3, class: "lv-hit", "pointer-events": "all",
    }));
    const label = el("text", {
      x: left ? x0 - 4 : x1 + 4, y: yRow(i), "text-anchor": left ? "end" : "start",
      "dominant-baseline": "central", "font-size": font,
    }, labels.get(token));
    label.append(el("title", {}, token));
    g.append(label);
    svg.append(g);
    tokens.push(g);
  };
  rows.forEach((t, i) => addToken("query", i, t));
  cols.forEach((t, j) => addToken("key", j, t));

  function setFocus(focus) {
    linesGroup.replaceChildren();
    for (const head of heads) {
      const g = el("g", {stroke: head.colour, "data-head": head.label});
      const scale = head.scale || 1;
      head.matrix.forEach((row, i) => {
        row.forEach((value, j) => {
          if (!Number.isFinite(value)) return; // no value (a diverged run's NaN, served as null): no line
          const negative = value < 0;
          const w = head.signed ? Math.abs(value) / scale : value / scale;
          if (w < MIN_WEIGHT) return;
          if (focus && !focus.rows.has(i) && !focus.cols.has(j)) return;
          g.append(el("line", {
            x1: x0, y1: yRow(i), x2: x1, y2: yRow(j),
            "stroke-opacity": Math.min(1, Math.max(0.04, w)).toFixed(3),
            "stroke-width": (0.6 + 3.4 * Math.min(1, w)).toFixed(2),
            ...(negative && head.signed ? {"stroke-dasharray": "3 2", "data-sign": "negative"} : {}),
          }));
        });
      });
      linesGroup.append(g);
    }
    for (const g of tokens) {
      const i = Number(g.dataset.index);
      const lit = focus && (g.dataset.side === "query" ? focus.rows.has(i) : focus.cols.has(i));
      g.classList.toggle("highlight", Boolean(lit));
    }
  }
  setFocus(null);
  return {node: svg, setFocus};
}
