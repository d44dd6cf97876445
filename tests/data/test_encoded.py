"""Encoded pairs stored as flat arrays give back the lists they were made of, encoded in chunks or at once."""

import numpy as np
import pytest

from data.encoded import EncodedPairs, Side
from data.pairs import Pair
from data.tokenizer import Tokenizer

ROWS = [[5, 6, 7], [], [70000], [8, 9]]


def test_a_side_gives_back_its_rows_in_the_narrowest_type_that_holds_them():
    side = Side.of(ROWS)
    assert [side.row(i) for i in range(4)] == ROWS
    assert side.ids.dtype == np.int32  # 70000 does not fit 16 bits
    assert side.lengths().tolist() == [3, 0, 1, 2]
    small = Side.of([[1, 2], [65535]])
    assert small.ids.dtype == np.uint16 and small.row(1) == [65535]
    assert small.ids.nbytes == 6  # two bytes a token


def test_joining_and_selecting_rows():
    joined = Side.join([Side.of(ROWS[:2]), Side.of(ROWS[2:])])
    assert [joined.row(i) for i in range(4)] == ROWS
    picked = joined.select(np.array([3, 0, 3, 1]))
    assert [picked.row(i) for i in range(4)] == [[8, 9], [5, 6, 7], [8, 9], []]
    assert picked.offsets.tolist() == [0, 2, 5, 7, 7]
    with pytest.raises(ValueError, match="offsets must run from 0 to the 3 ids"):
        Side(np.array([1, 2, 3]), np.array([0, 2]))


def test_encoded_pairs_are_items_as_collate_takes_them():
    items = [(0, [5, 6], [7]), (1, [8], [9, 10, 11]), (2, [12, 13, 14, 15], [16])]
    encoded = EncodedPairs.of(items)
    assert list(encoded) == items and len(encoded) == 3
    assert encoded[-1] == items[-1] and encoded[1:] == items[1:]
    assert encoded.lengths().tolist() == [3, 4, 5]  # the longer of source + EOS and BOS + target
    kept = encoded.select(np.array([2, 0]))
    assert list(kept) == [(0, [12, 13, 14, 15], [16]), (1, [5, 6], [7])]  # renumbered in their order
    with pytest.raises(IndexError):
        encoded[3]
    with pytest.raises(ValueError, match="2 source sentences but 1 target sentences"):
        EncodedPairs(Side.of([[1], [2]]), Side.of([[3]]))


def test_encoding_in_chunks_equals_encoding_at_once():
    pairs = [Pair(f"a b {'c ' * i}", f"x {'y ' * (i % 3)}z") for i in range(7)]
    src = Tokenizer.train([p.source for p in pairs], kind="word", vocab_size=50)
    tgt = Tokenizer.train([p.target for p in pairs], kind="word", vocab_size=50)
    whole = EncodedPairs.encode(pairs, src, tgt)
    chunked = EncodedPairs.encode(pairs, src, tgt, chunk=3)
    expected = [(i, src.encode(p.source), tgt.encode(p.target)) for i, p in enumerate(pairs)]
    assert list(whole) == expected and list(chunked) == expected
    assert EncodedPairs.encode([], src, tgt, chunk=3).lengths().tolist() == []
