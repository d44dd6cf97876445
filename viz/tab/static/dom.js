// Small DOM helpers shared by the tab's parts: element building, number formatting, text measuring, the one
// tooltip and the one message line.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function fmt(v) {
  if (!Number.isFinite(v)) return "–"; // null, undefined, NaN: no value
  return Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(3);
}

export const headName = ({layer, head}) => `L${layer + 1} H${head + 1}`;
export const sameHead = (a, b) => a.layer === b.layer && a.head === b.head;

let measureCtx = null;
export function textWidth(text, px) {
  measureCtx = measureCtx || document.createElement("canvas").getContext("2d");
  measureCtx.font = `${px}px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
  return measureCtx.measureText(text).width;
}

export function debounce(fn, ms) {
  let t = null;
  return (...a) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...a), ms);
  };
}

// The page's one tooltip (position: fixed), created by the entry point with `tooltip()`.
let tip = null;

export function tooltip() {
  tip = h("div", {class: "tooltip"});
  return tip;
}

export function showTooltip(event, ...content) {
  tip.replaceChildren(...content);
  tip.style.display = "block";
  const tw = tip.offsetWidth;
  const x = event.clientX + 14 + tw > window.innerWidth ? event.clientX - tw - 10 : event.clientX + 14;
  tip.style.left = `${x}px`;
  tip.style.top = `${event.clientY + 14}px`;
}

export function hideTooltip() {
  tip.style.display = "none";
}

// The line of errors (#message) under the toolbars.
let message = null;

export function messageLine() {
  message = h("div", {id: "message", role: "alert"});
  return message;
}

export function showMessage(text) {
  message.textContent = text || "";
}

// A small line of `points` ([step, value] pairs) drawn in an SVG of the given size; the axes span `steps` and
// `values` ([first, last], [lowest, highest]), lower values drawn lower; a dot marks the step `shown`. Points
// without a value are left out.
export function sparkline(points, shown, {steps: [s0, s1], values: [lo, hi], width, height, pad, dot, className}) {
  points = points.filter(([, v]) => Number.isFinite(v)); // a step without a value (NaN, null) is left out
  const X = (s) => pad + ((s - s0) / (s1 - s0 || 1)) * (width - 2 * pad);
  const Y = (v) => height - pad - ((v - lo) / (hi - lo || 1)) * (height - 2 * pad);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", className);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", points.map(([s, v]) => `${X(s).toFixed(1)},${Y(v).toFixed(1)}`).join(" "));
  svg.append(line);
  const here = points.find(([s]) => s === shown);
  if (here) {
    const circle = document.createElementNS(NS, "circle");
    circle.setAttribute("cx", X(here[0]));
    circle.setAttribute("cy", Y(here[1]));
    circle.setAttribute("r", dot);
    svg.append(circle);
  }
  return svg;
}
