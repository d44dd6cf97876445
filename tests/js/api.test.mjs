// Fetching the plugin's routes: the one-line error a failed answer becomes, and the cache of answers (asked
// once; a failure forgotten so that the next draw asks again).
import assert from "node:assert/strict";
import {beforeEach, test} from "node:test";

import {ApiError, attentionUrl, cached, explanationUrl, fetchJSON} from "../../viz/tab/static/api.js";

let answers = {};
const asked = [];
globalThis.fetch = async (url) => {
  asked.push(url);
  const [status, body] = answers[url] ?? [404, {error: `no route ${url}`}];
  return {ok: status < 400, status, statusText: status === 500 ? "Internal Server Error" : "",
    json: async () => (body === undefined ? JSON.parse("<html>") : body)};
};

beforeEach(() => {
  answers = {};
  asked.length = 0;
});

test("the routes' query strings are encoded", () => {
  assert.equal(attentionUrl("runs/tiny 1", 12, 0), "./attention?run=runs%2Ftiny+1&step=12&sentence=0");
  assert.equal(explanationUrl("r", 6, 1, "a method"), "./explanation?run=r&step=6&sentence=1&method=a+method");
});

test("an answer is its JSON; a failed one the route's error line, or its status", async () => {
  answers = {"./ok": [200, {runs: []}], "./bad": [400, {error: "step must be an integer, got 'x'"}],
    "./down": [500, undefined], "./html": [200, undefined]};
  assert.deepEqual(await fetchJSON("./ok"), {runs: []});
  await assert.rejects(fetchJSON("./bad"), new ApiError("step must be an integer, got 'x'"));
  await assert.rejects(fetchJSON("./down"), new ApiError("500 Internal Server Error"));
  await assert.rejects(fetchJSON("./html?run=a"), new ApiError("no route ./html?run=a"));
  answers["./html?run=a"] = [200, undefined];
  await assert.rejects(fetchJSON("./html?run=a"), new ApiError("./html: the answer was not JSON"));
});

test("an answer is asked once; a failure is forgotten and asked again", async () => {
  answers = {"./attention?a": [200, {step: 1}]};
  const [first, second] = [cached("./attention?a"), cached("./attention?a")];
  assert.equal(first, second);
  assert.deepEqual(await first, {step: 1});
  await assert.rejects(cached("./attention?b"), ApiError);
  answers["./attention?b"] = [200, {step: 2}];
  assert.deepEqual(await cached("./attention?b"), {step: 2});
  assert.deepEqual(asked, ["./attention?a", "./attention?b", "./attention?b"]);
});
