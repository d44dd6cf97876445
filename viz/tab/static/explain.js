// The explanations summary: which explanation method aligns best with the gold alignment at the shown step, and
// since which step it has led (./explanations); per method its best layer and AER, and a small line of its best
// AER over training. A click on a method shows its maps. On data without gold links it says that no AER exists.
// On a gold set with pairs past the scored ones, each method's map chosen on the scored pairs wears its AER on
// the others (the reporting part, as evaluate.py --gold-choose reports it).
//
// DOM hooks: #explain-summary, in it #leader (attributes data-method, data-since) or #aer-note (no gold), and
// rows `tr[data-method]` of #explain-table with cells `td.best-layer`, `td.best-aer` and, where reported,
// `td.reported-aer` (attribute data-aer).

import {fmt, h, sparkline} from "./dom.js";
import {aligns, selectMethod, state} from "./state.js";

const ui = {};

export function explainSection() {
  ui.node = h("div", {id: "explain-summary"});
  return ui.node;
}

/** Since when `leader` (the ./explanations answer's, {method, aer, since_step}) has led, as read at `step`. */
export function leadSince(leader, step) {
  return leader.since_step === step ? `leading at step ${step}` : `the leader since step ${leader.since_step}`;
}

/** Pairs [first, last] (counted from 1) in words: "101–582", or "3" for one pair. */
const pairsText = ([first, last]) => (first === last ? String(first) : `${first}–${last}`);

/** The map chosen on the scored pairs (./explanations' `reported`: layer name, head from 1 or null), in words. */
export const chosenMapName = (reported) => (reported.head === null ? reported.layer
  : `${reported.layer} head ${reported.head}`);

/** A reported map in words: "AER on pairs 101–582: 0.412, chosen on 1–100 (layer 2 head 1, AER 0.380 there)". */
export function reportedText(reported) {
  return `AER on pairs ${pairsText(reported.report)}: ${fmt(reported.aer)}, chosen on ${pairsText(reported.choose)} `
    + `(${chosenMapName(reported)}, AER ${fmt(reported.chosen_aer)} there)`;
}

/** Draw the summary of `explanations` (the ./explanations answer, {error} when it failed, or null when the
 * run has no scored steps). */
export function drawExplanations(explanations) {
  const run = state.run;
  const title = h("h2", {}, "Which explanation aligns best?");
  if (!run.has_gold || !(run.explanation_steps || []).length) {
    const why = run.has_gold ? "this run logged no explanation scores (train with the explanation methods on)"
      : "this run's data has no gold alignment to score the explanations against; every method's maps are "
        + "still shown";
    ui.node.replaceChildren(title, h("div", {id: "aer-note", class: "note"}, `No AER available: ${why}.`));
    return;
  }
  if (!explanations || explanations.error) {
    ui.node.replaceChildren(title, h("div", {class: "note"}, explanations ? explanations.error : "loading…"));
    return;
  }
  const methods = explanations.methods;
  const leader = explanations.leader;
  const labelOf = (name) => methods[name]?.label || name;
  const leaderLine = leader
    ? h("div", {id: "leader", class: "leader", "data-method": leader.method, "data-since": String(leader.since_step)},
      "★ ", h("b", {}, labelOf(leader.method)), ` aligns best: AER ${fmt(leader.aer)} at `,
      methods[leader.method]?.best?.layer ?? "?", ` · ${leadSince(leader, explanations.step)}`)
    : null;
  const steps = Object.values(explanations.history).flat().map(([s]) => s);
  const [s0, s1] = [Math.min(...steps), Math.max(...steps)];
  const values = Object.values(explanations.history).flat().map(([, v]) => v).filter(Number.isFinite);
  const [lo, hi] = [Math.min(...values), Math.max(...values)];
  const reported = Object.values(methods).map((m) => m.reported).find(Boolean);
  const rows = (state.run.methods || []).filter((m) => methods[m.name]).map((m) => {
    const scores = methods[m.name];
    const chosen = scores.reported;
    const on = m.name === state.method && aligns();
    return h("tr", {"data-method": m.name, class: [on ? "shown" : "", leader?.method === m.name ? "lead" : ""]
      .join(" ").trim() || null, title: `show the maps of ${m.label}`, onclick: () => selectMethod(m.name)},
    h("td", {class: "method-name"}, m.label),
    h("td", {class: "best-layer"}, scores.best?.layer ?? "–"), // no best: every layer's AER was NaN
    h("td", {class: "best-aer"}, fmt(scores.best?.aer)),
    reported ? h("td", {class: "reported-aer", "data-aer": chosen ? String(chosen.aer) : null,
      title: chosen ? reportedText(chosen) : "not reported at this step"},
    fmt(chosen?.aer), chosen ? h("small", {}, chosenMapName(chosen)) : null) : null,
    h("td", {}, sparkline(explanations.history[m.name] || [], explanations.step,
        {steps: [s0, s1], values: [lo, hi], width: 90, height: 20, pad: 2, dot: 2.5, className: "spark"})));
  });
  ui.node.replaceChildren(title, leaderLine,
    h("table", {id: "explain-table"},
      h("thead", {}, h("tr", {}, h("th", {}, "method"), h("th", {}, "best layer"),
        h("th", {title: "lowest AER over the layers, on the explanation sentences (lower is better)"}, "AER"),
        reported ? h("th", {title: `AER on gold pairs ${pairsText(reported.report)} of the map (layer or head) `
          + `of lowest AER on pairs ${pairsText(reported.choose)}, the explanation sentences (lower is better)`},
        `AER on ${pairsText(reported.report)}`) : null,
        h("th", {title: "the method's best AER at every logged step (lower is better; the dot is this step)"},
          "over training"))),
      h("tbody", {}, rows)),
    h("div", {class: "note"}, `AER against the gold alignment on the explanation sentences, step ${explanations.step}`
      + (reported ? ` (gold ${reported.choose[0] === reported.choose[1] ? "pair" : "pairs"} `
        + `${pairsText(reported.choose)}); each method's map of lowest AER there is chosen `
        + `and reported on pairs ${pairsText(reported.report)}` : "") + "; click a method to show its maps."));
}

