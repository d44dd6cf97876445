// "Your sentence": a sentence the user types, translated with the run's newest weights by ./translate and
// explained by the chosen method under forced decoding of that translation (its map and the logit lens come in
// the same answer), shown in the same grid, table and detail view as the probe sentences; a banner says so
// while it is shown. Choosing another method asks again (one request at a time, as the route allows).

import {fetchJSON, translateUrl} from "./api.js";
import {h, showMessage} from "./dom.js";
import {togglePlay} from "./controls.js";
import {currentMethod, leaveCustom, state, takesSteps, update} from "./state.js";

// The beams (the default, "run": the beam the run validates with), which methods take steps (their cost, which
// the route bounds with `ig_steps`) and the steps' default and most come from ./vocabulary.

const ui = {};
const answers = new Map(); // url -> ./translate answer: switching back to a method is instant

/** The input, beam, IG steps and button at the right of the second toolbar. */
export function translateControls() {
  // No maxlength: the backend's own message says what is too long.
  ui.input = h("input", {id: "translate-input", type: "text", spellcheck: "false",
    oninput: () => { state.translateError = ""; },
    onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); translate(); } }});
  const {beam, ig_steps: igSteps} = state.vocabulary;
  const beams = [beam.default, ...Array.from({length: beam.max}, (_, i) => String(i + 1))];
  ui.beam = h("select", {id: "translate-beam", title: `beam size (1 = greedy; ${beam.default}: the beam the `
    + `run's validation decodes with, at most ${beam.max})`}, beams.map((b) => h("option", {value: b}, b)));
  ui.beam.value = beam.default;
  ui.igSteps = h("input", {id: "ig-steps", type: "number", min: "1", max: String(igSteps.max),
    value: String(igSteps.default),
    title: `Integrated Gradients' steps for your sentence, at most ${igSteps.max} (more: closer to the `
      + "integral, slower)"});
  ui.igLabel = h("label", {class: "ctl", style: "display:none"}, "IG steps", ui.igSteps);
  ui.button = h("button", {id: "translate-button", onclick: translate}, "Translate");
  ui.note = h("span", {class: "note"});
  return h("span", {class: "translate"}, h("label", {class: "ctl", for: "translate-input"}, "Your sentence"),
    ui.input, h("label", {class: "ctl"}, "beam", ui.beam), ui.igLabel, ui.button, ui.note);
}

/** The banner above the maps while your sentence is shown. */
export function bannerSection() {
  ui.banner = h("div", {class: "banner", style: "display:none"});
  return ui.banner;
}

export function syncTranslate() {
  const run = state.run;
  ui.input.placeholder = run.sentences.length ? `e.g. ${run.sentences[0].source}` : "type a source sentence";
  ui.button.disabled = state.translating || !run.can_translate;
  ui.note.textContent = run.can_translate ? "" : run.translate_note || "this run has no checkpoint yet";
  ui.igLabel.style.display = takesSteps(state.method) ? "" : "none";
}

function requestUrl(text, beam) {
  const params = {run: state.run.run, text, beam, method: currentMethod().name};
  if (takesSteps(params.method)) {
    params.ig_steps = ui.igSteps.value.trim() || String(state.vocabulary.ig_steps.default);
  }
  return translateUrl(params);
}

// Ask ./translate (one request at a time); the answer becomes the shown sentence, an error its message.
async function ask(url) {
  state.translateError = "";
  state.translating = true;
  ui.button.disabled = true;
  ui.button.textContent = "Translating…";
  try {
    if (!answers.has(url)) answers.set(url, await fetchJSON(url));
    state.custom = answers.get(url);
    state.mode = "custom";
    state.compareStep = "";
    state.compareRun = "";
    if (state.playing) togglePlay();
  } catch (e) {
    state.translateError = `Your sentence: ${e.message}`;
  } finally {
    state.translating = false;
    ui.button.textContent = "Translate";
  }
  await update();
}

async function translate() {
  const text = ui.input.value.trim();
  if (state.translating) return;
  if (!text) {
    showMessage("Type a sentence to translate first.");
    return;
  }
  const url = requestUrl(text, ui.beam.value);
  answers.delete(url); // asked again: the run may have saved newer weights since
  await ask(url);
}

/** Your sentence explained by the chosen method (asked when another method is chosen while it is shown). */
export async function explainCustom() {
  const c = state.custom;
  if (!c || state.translating || (c.explanation && c.explanation.method === currentMethod().name)) return;
  await ask(requestUrl(c.text, String(c.beam)));
}

export function drawBanner() {
  if (state.mode !== "custom") {
    ui.banner.style.display = "none";
    ui.banner.replaceChildren();
    return;
  }
  const c = state.custom;
  ui.banner.style.display = "flex";
  ui.banner.replaceChildren(
    h("span", {}, h("b", {}, "Your sentence"), ` (${c.run}, ${c.checkpoint}, step ${c.step}, ${beamText(c)}):`),
    h("span", {}, readText(c), "  →  ", h("span", {id: "translation"}, c.translation),
      c.translation ? null : h("span", {class: "note"}, "(empty: the model ended the sentence at once)")),
    c.explanation ? h("span", {class: "note"}, `explained by ${c.explanation.label} (forced decoding of the `
      + "translation)") : null,
    h("span", {class: "note"}, "the step slider does not apply"),
    h("button", {id: "back-to-probes", onclick: () => leaveCustom()}, "← back to probe sentences"),
  );
}

// Which beam translated your sentence, beside the run's validation beam.
function beamText({beam, run_beam: runBeam}) {
  return beam === runBeam ? `beam ${beam}, the run's validation beam` : `beam ${beam}; the run validates with ${runBeam}`;
}

/** The sentence as the run read it (`read`: its data's script conversion applied), cut into [text, unknown]
 * runs at the pieces its source tokenizer read as <unk> (`unknown`: [start, end) spans of code points, as
 * Python counts characters). */
export function readSegments(read, unknown) {
  const characters = Array.from(read);
  const segments = [];
  let at = 0;
  for (const [start, end] of unknown) {
    if (start > at) segments.push([characters.slice(at, start).join(""), false]);
    segments.push([characters.slice(start, end).join(""), true]);
    at = end;
  }
  if (at < characters.length) segments.push([characters.slice(at).join(""), false]);
  return segments;
}

// Your sentence as the run read it, its unknown pieces marked, and as typed where reading changed it.
function readText(c) {
  const unknown = c.unknown || [];
  const parts = readSegments(c.read ?? c.text, unknown).map(([text, isUnknown]) => (isUnknown
    ? h("mark", {class: "unknown", title: "unknown to this run: read as <unk>"}, text) : text));
  const notes = [c.read !== undefined && c.read !== c.text ? `typed as ${c.text}` : null,
    unknown.length ? `${unknown.length} unknown to this run` : null].filter(Boolean);
  return notes.length ? [...parts, h("span", {class: "note"}, ` (${notes.join("; ")})`)] : parts;
}
