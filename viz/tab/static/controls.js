// The toolbars: run, sentence, attention kind, the explanation method ("view") of the cross maps, gold links, the
// colour scale, the step slider and its player; `syncControls` sets them from the state after every change.

import {h} from "./dom.js";
import {colourBar} from "./heatmap.js";
import {
  aligns, currentMethod, currentStep, draw, kindTitle, runOptions, selectKind, selectMethod, selectRun, selectSentence,
  selectStep, state, supervisedText,
} from "./state.js";

const ui = {};

/** The shown run's summary line under the toolbars: the head its training supervised, where there is one. */
export function runSummary() {
  ui.summary = h("div", {id: "run-summary", class: "run-summary", style: "display:none"});
  return ui.summary;
}

function syncSummary() {
  const text = supervisedText(state.run.supervised);
  ui.summary.style.display = text ? "" : "none";
  ui.summary.replaceChildren(...(text ? [h("span", {class: "sup-key"}, "⚑"), " ", text,
    h("span", {class: "note"}, " · marked ⚑ in the cross maps and the head table")] : []));
}

/** The two toolbars; `right` (your sentence's controls) ends the second. */
export function toolbars(right) {
  ui.runSelect = h("select", {id: "run-select", onchange: () => selectRun(ui.runSelect.value)});
  ui.slider = h("input", {id: "step-slider", type: "range", min: "0", step: "1",
    oninput: () => selectStep(Number(ui.slider.value)), title: "logged step (drag; arrow keys move one step)"});
  ui.stepLabel = h("span", {id: "step-label"});
  ui.play = h("button", {class: "icon-btn", title: "play through the steps", onclick: togglePlay}, "▶");
  ui.sentenceSelect = h("select", {id: "sentence-select", onchange: () => selectSentence(ui.sentenceSelect.value)});
  // The kinds, their words and titles come from ./vocabulary, never from a list here.
  ui.kindButtons = state.vocabulary.kinds.map((k) => h("button", {id: `kind-${k.name}`, "data-kind": k.name,
    title: kindTitle(k.name), onclick: () => selectKind(k.name)}, k.short));
  // The methods and their labels come from the run (./runs' `methods`), never from a list here.
  ui.method = h("select", {id: "method-select", onchange: () => selectMethod(ui.method.value)});
  ui.methodLabel = h("label", {class: "ctl"}, "View", ui.method);
  ui.gold = h("input", {id: "gold-toggle", type: "checkbox", checked: true,
    onchange: () => { state.gold = ui.gold.checked; draw(); }});
  ui.goldLabel = h("label", {class: "ctl", title: "outline the gold word alignment on cross-attention maps"},
    ui.gold, h("span", {class: "gold-key"}), "gold links");
  ui.loading = h("span", {class: "loading"}, "loading…");
  listRuns();
  const toolbar = h("div", {class: "toolbar"},
    h("label", {class: "ctl"}, "Run", ui.runSelect),
    h("label", {class: "ctl"}, "Sentence", ui.sentenceSelect),
    h("span", {class: "seg", role: "group", "aria-label": "attention kind"}, ui.kindButtons),
    ui.methodLabel,
    ui.goldLabel,
    colourBar(),
    ui.loading,
  );
  const second = h("div", {class: "toolbar second"},
    h("span", {class: "step-ctl"}, ui.play, h("label", {class: "ctl"}, "Step", ui.slider), ui.stepLabel),
    right);
  return [toolbar, second];
}

/** Fill the run selector from the state's lists of runs (`runOptions`), keeping the shown run chosen. */
export function listRuns() {
  ui.runSelect.replaceChildren(...runOptions().map((o) => h("option",
    {value: o.value, disabled: o.disabled, title: o.title || null, class: o.disabled ? "unavailable" : null}, o.label)));
  if (state.run) ui.runSelect.value = state.run.run;
}

export function loading(on) {
  ui.loading.classList.toggle("on", on);
}

export function syncControls() {
  const run = state.run;
  ui.runSelect.value = run.run;
  if (ui.summary) syncSummary();
  ui.slider.max = String(run.steps.length - 1);
  ui.slider.value = String(state.stepIndex);
  ui.slider.disabled = state.mode === "custom" || run.steps.length < 2;
  ui.play.disabled = ui.slider.disabled;
  updateStepLabel();
  const options = run.sentences.map((s) => h("option", {value: String(s.id), title: `${s.source}  →  ${s.target}`},
    `${s.id + 1}. ${s.source.length > 60 ? `${s.source.slice(0, 59)}…` : s.source}`));
  if (state.custom) {
    options.push(h("option", {value: "custom"}, `✎ your sentence: ${state.custom.text.slice(0, 40)}`));
  }
  ui.sentenceSelect.replaceChildren(...options);
  ui.sentenceSelect.value = state.mode === "custom" ? "custom" : String(state.sentence);
  for (const b of ui.kindButtons) {
    const k = b.dataset.kind;
    b.classList.toggle("active", k === state.kind);
    b.setAttribute("aria-pressed", String(k === state.kind));
    b.disabled = !run.kinds.includes(k);
  }
  const methods = run.methods && run.methods.length ? run.methods : [currentMethod()];
  ui.method.replaceChildren(...methods.map((m) => h("option", {value: m.name,
    title: `${m.label}: ${m.per_head ? "per head and per layer" : "one map per layer"}${m.signed ? ", signed" : ""}`},
  m.label)));
  ui.method.value = currentMethod().name;
  ui.methodLabel.classList.toggle("dim", !aligns());
  ui.methodLabel.title = aligns()
    ? "what the cross maps show: attention weights, or another explanation of what the model uses"
    : "explanation methods explain the cross maps (target → source): choosing one shows them";
  const goldApplies = aligns() && run.has_gold && state.mode === "probe";
  ui.gold.disabled = !goldApplies;
  ui.goldLabel.title = goldApplies ? "outline the gold word alignment on cross-attention maps"
    : "gold links exist for cross-attention of probe sentences on data with gold alignments";
}

function updateStepLabel() {
  const run = state.run;
  if (state.mode === "custom") {
    ui.stepLabel.replaceChildren(`checkpoint step ${state.custom.step ?? "?"}`);
  } else {
    ui.stepLabel.replaceChildren(`step ${currentStep()}`,
      h("span", {class: "of"}, ` (${state.stepIndex + 1}/${run.steps.length})`));
  }
}

export function togglePlay() {
  if (state.playing) {
    clearInterval(state.playing);
    state.playing = null;
    ui.play.textContent = "▶";
    return;
  }
  if (state.stepIndex >= state.run.steps.length - 1) state.stepIndex = -1;
  ui.play.textContent = "❚❚";
  const tick = () => {
    if (state.stepIndex >= state.run.steps.length - 1 || state.mode === "custom") {
      togglePlay();
      return;
    }
    selectStep(state.stepIndex + 1);
  };
  tick();
  state.playing = setInterval(tick, 700);
}

// Left / right arrow keys move the step slider from anywhere but a text field or a list.
export function onKey(e) {
  if (!["ArrowLeft", "ArrowRight"].includes(e.key) || e.altKey || e.ctrlKey || e.metaKey) return;
  if (e.target.closest && e.target.closest("input, select, textarea")) return;
  if (state.mode !== "probe") return;
  const next = state.stepIndex + (e.key === "ArrowRight" ? 1 : -1);
  if (next < 0 || next >= state.run.steps.length) return;
  e.preventDefault();
  selectStep(next);
}
