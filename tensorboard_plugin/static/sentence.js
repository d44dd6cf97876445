// "Your sentence": a sentence the user types, translated with the run's newest weights by ./translate, shown in
// the same grid, table and detail view as the probe sentences; a banner says so while it is shown.

import {fetchJSON, translateUrl} from "./api.js";
import {h, showMessage} from "./dom.js";
import {togglePlay} from "./controls.js";
import {leaveCustom, state, update} from "./state.js";

const ui = {};

/** The input, beam and button at the right of the second toolbar. */
export function translateControls() {
  // No maxlength: the backend's own message says what is too long.
  ui.input = h("input", {id: "translate-input", type: "text", spellcheck: "false",
    oninput: () => { state.translateError = ""; },
    onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); translate(); } }});
  ui.beam = h("select", {id: "translate-beam", title: "beam size (1 = greedy)"},
    [1, 2, 3, 4, 5, 6, 7, 8].map((b) => h("option", {value: String(b)}, String(b))));
  ui.button = h("button", {id: "translate-button", onclick: translate}, "Translate");
  ui.note = h("span", {class: "note"});
  return h("span", {class: "translate"}, h("label", {class: "ctl", for: "translate-input"}, "Your sentence"),
    ui.input, h("label", {class: "ctl"}, "beam", ui.beam), ui.button, ui.note);
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
}

async function translate() {
  const text = ui.input.value.trim();
  if (state.translating) return;
  if (!text) {
    showMessage("Type a sentence to translate first.");
    return;
  }
  state.translateError = "";
  state.translating = true;
  ui.button.disabled = true;
  ui.button.textContent = "Translating…";
  try {
    state.custom = await fetchJSON(translateUrl({run: state.run.run, text, beam: ui.beam.value}));
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

export function drawBanner() {
  if (state.mode !== "custom") {
    ui.banner.style.display = "none";
    ui.banner.replaceChildren();
    return;
  }
  const c = state.custom;
  ui.banner.style.display = "flex";
  ui.banner.replaceChildren(
    h("span", {}, h("b", {}, "Your sentence"), ` (${c.run}, ${c.checkpoint}, step ${c.step}, beam ${c.beam}):`),
    h("span", {}, c.text, "  →  ", h("span", {id: "translation"}, c.translation),
      c.translation ? null : h("span", {class: "note"}, "(empty: the model ended the sentence at once)")),
    h("span", {class: "note"}, "the step slider does not apply"),
    h("button", {id: "back-to-probes", onclick: () => leaveCustom()}, "← back to probe sentences"),
  );
}
