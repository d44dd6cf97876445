// Your sentence as the run read it (./translate's `read`): the pieces its source tokenizer read as <unk>
// (`unknown`, [start, end) spans counted in characters as Python counts them, code points) marked.
import assert from "node:assert/strict";
import {test} from "node:test";

import {readSegments} from "../../viz/tab/static/sentence.js";

test("the unknown pieces are cut out of the sentence as read, in order", () => {
  assert.deepEqual(readSegments("我们喝龙茶。", [[3, 4]]), [["我们喝", false], ["龙", true], ["茶。", false]]);
  assert.deepEqual(readSegments("龙龟", [[0, 1], [1, 2]]), [["龙", true], ["龟", true]]);
  assert.deepEqual(readSegments("我们喝茶。", []), [["我们喝茶。", false]]);
});

test("a character outside the Basic Multilingual Plane counts once, as in Python", () => {
  assert.deepEqual(readSegments("𠀋龙茶", [[1, 2]]), [["𠀋", false], ["龙", true], ["茶", false]]);
});
