// What the page reads from ./vocabulary, as tests/js/vocabulary.json keeps it: tests/viz/test_js.py checks that the
// file equals the route's answer (viz.tab.plugin.vocabulary), so these tests cannot drift from the backend.
import {readFileSync} from "node:fs";

export const VOCABULARY = JSON.parse(readFileSync(new URL("./vocabulary.json", import.meta.url), "utf8"));

// Methods picked by their properties, as the page picks them, never by their names.
/** The method whose maps are the cross-attention weights themselves. */
export const WEIGHTS = VOCABULARY.methods.find((m) => m.weights);
/** A method that takes steps (the points of a path integral). */
export const STEPS = VOCABULARY.methods.find((m) => m.takes_steps);
/** A method of its own maps, read from the attention (no gradients). */
export const OWN = VOCABULARY.methods.find((m) => !m.weights && !m.gradients);
