// What the page reads from ./vocabulary, as tests/js/vocabulary.json keeps it: tests/test_js.py checks that the
// file equals the route's answer (viz.tab.plugin.vocabulary), so these tests cannot drift from the backend.
import {readFileSync} from "node:fs";

export const VOCABULARY = JSON.parse(readFileSync(new URL("./vocabulary.json", import.meta.url), "utf8"));
