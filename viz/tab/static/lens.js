// The logit-lens panel of a decoder or cross map: each decoder layer's output read through the final norm and
// the output projection (./lens, or a translation's "lens"). An overview shows, per layer and target position,
// the probability of the token finally produced there (at which layer does the decoder settle on each word?);
// for the hovered target position, per layer, the top tokens with the produced one highlighted and its
// probability as a bar.
//
// DOM hooks: #lens-panel (attribute data-row = the target position shown, "" for none), overview cells
// `.lens-cell[data-layer][data-row]`, the position's table rows `tr.lens-layer[data-layer]` with the top tokens
// `.lens-top[data-token]` (the produced token's has class `produced`) and the produced token's bar
// `.lens-bar[data-prob]`.

import {fmt, h} from "./dom.js";
import {colourOf} from "./heatmap.js";
import {upright} from "./state.js";

/**
 * The panel for `lens` ({rows, layers, top_tokens L×T×k, top_probs L×T×k, produced_prob L×T, produced_rank
 * L×T, 0 = the most probable, shown as #1}); returns {node, showRow(i)}: showRow(i) shows target position i (null: keeps the one shown).
 */
export function lensPanel(lens) {
  const T = lens.rows.length;
  const L = lens.layers.length;
  const detail = h("div", {class: "lens-detail"},
    h("div", {class: "note"}, "Hover a target word (a row of the map) to see what each layer would produce there."));
  const node = h("div", {id: "lens-panel", "data-row": ""});
  const cells = [];
  const overview = h("div", {class: "lens-overview", style: `grid-template-columns: 64px repeat(${T}, 22px)`},
    h("span"),
    lens.rows.map((t, i) => h("span", {class: upright(t) ? "lens-col upright" : "lens-col", title: `position ${i}: ${t}`},
      t)),
    lens.layers.flatMap((label, l) => [
      h("span", {class: "lens-rowname"}, label),
      lens.rows.map((t, i) => {
        const p = lens.produced_prob[l][i];
        const cell = h("span", {class: "lens-cell", "data-layer": String(l), "data-row": String(i),
          style: `background:${Number.isFinite(p) ? colourOf(p) : "#fff"}`, // no value: blank
          title: `${label}, position ${i}: p(${t}) = ${fmt(p)}, rank ${rankText(lens.produced_rank[l][i])}`,
          onmouseenter: () => showRow(i)});
        cells.push(cell);
        return cell;
      }),
    ].flat()));

  function showRow(i) {
    if (i === null || i === undefined || i < 0 || i >= T) return;
    node.dataset.row = String(i);
    cells.forEach((c) => c.classList.toggle("on", Number(c.dataset.row) === i));
    const produced = lens.rows[i];
    const rows = [];
    for (let l = 0; l < L; l++) {
      const p = lens.produced_prob[l][i];
      const rank = rankText(lens.produced_rank[l][i]);
      rows.push(h("tr", {class: "lens-layer", "data-layer": String(l)},
        h("td", {class: "lens-name"}, lens.layers[l]),
        h("td", {}, lens.top_tokens[l][i].map((t, k) => h("span", {
          class: t === produced ? "lens-top produced" : "lens-top", "data-token": t,
          "data-prob": String(lens.top_probs[l][i][k]),
          title: `probability ${fmt(lens.top_probs[l][i][k])}`}, t, h("small", {}, fmt(lens.top_probs[l][i][k]))))),
        h("td", {class: "lens-prob", title: `p(${produced}) at ${lens.layers[l]}, rank ${rank}`},
          h("span", {class: "lens-bar", "data-prob": String(p)},
            h("span", {style: `width:${Number.isFinite(p) ? Math.round(100 * Math.max(0, Math.min(1, p))) : 0}%`})),
          h("small", {}, `${fmt(p)} · ${rank}`))));
    }
    detail.replaceChildren(
      h("div", {class: "lens-where"}, `position ${i}: produced `, h("b", {class: "produced"}, produced)),
      h("table", {class: "lens-table"}, h("thead", {}, h("tr", {}, h("th", {}, "layer"), h("th", {}, "top 3"),
        h("th", {}, `p(${produced}) · rank`))), h("tbody", {}, rows)));
  }

  node.append(
    h("h3", {}, "Logit lens", h("span", {class: "sub"}, "each decoder layer's output through the final norm and "
      + "the output projection")),
    h("div", {class: "note"}, "probability of the token produced, per layer (rows) and position (columns)"),
    overview, detail);
  return {node, showRow};
}

/** A panel saying why there is no logit lens (a message line from the route, or none logged). */
export function lensNote(text) {
  return h("div", {id: "lens-panel", "data-row": ""}, h("h3", {}, "Logit lens"), h("div", {class: "note"}, text));
}

// A rank as shown, counted from 1 ("#1" = the most probable); "–" where there is none (a diverged run's NaN).
export const rankText = (rank) => (Number.isFinite(rank) ? `#${rank + 1}` : "–");
