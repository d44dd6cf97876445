"""A split's token ids, stored compactly: each side's ids in one flat array, with each sentence's offsets.

A list of Python lists holds a token as an 8-byte pointer to a 28-byte int object (every id above 256):
about 36 bytes a token, against 2 here (4 for vocabularies over 65,536 entries), and 3M training pairs of
about 30 tokens a side held some 6.5 GB that way (``bench/corpus_growth.py``, docs/performance.md). Arrays
also give the garbage collector nothing to walk and forked loader workers no reference counts to copy pages
for. ``EncodedPairs`` is a sequence of ``data.batching.Item``: ``pairs[i]`` is ``(i, source ids, target
ids)`` as lists, which is what ``collate`` takes.
"""

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from data.batching import Item
from data.pairs import Pair

ENCODE_CHUNK = 20_000  # sentences a call to the tokenizer: its per-sentence objects live that long only


class Side:
    """One side's ids: ``ids[offsets[i]:offsets[i + 1]]`` are sentence i's."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError(f"offsets must run from 0 to the {len(ids)} ids")
        self.ids, self.offsets = ids, offsets

    @classmethod
    def of(cls, rows: Sequence[Sequence[int]]) -> "Side":
        """From one id list per sentence; ``uint16`` ids where every id fits, else ``int32``."""
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((i for row in rows for i in row), dtype=np.int64, count=int(offsets[-1]))
        return cls(_narrow(ids), offsets)

    @classmethod
    def join(cls, parts: Sequence["Side"]) -> "Side":
        """The sentences of ``parts``, one after another."""
        if not parts:
            return cls(np.zeros(0, dtype=np.uint16), np.zeros(1, dtype=np.int64))
        starts = np.cumsum([0] + [len(p.ids) for p in parts[:-1]])
        offsets = np.concatenate([parts[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(parts, starts)])
        return cls(_narrow(np.concatenate([p.ids for p in parts])), offsets)

    def lengths(self) -> np.ndarray:
        """(N,) int64: each sentence's number of ids."""
        return np.diff(self.offsets)

    def row(self, i: int) -> list[int]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]].tolist()

    def select(self, rows: np.ndarray) -> "Side":
        """The sentences at ``rows`` (int indices), in that order."""
        lengths = self.lengths()[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # Each kept id's position in ``ids``: its sentence's start plus its place in the sentence.
        within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        return Side(self.ids[np.repeat(self.offsets[:-1][rows], lengths) + within], offsets)


def _narrow(ids: np.ndarray) -> np.ndarray:
    """``ids`` as ``uint16`` where every id fits, else ``int32``."""
    if len(ids) and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        raise ValueError(f"token ids must lie in [0, 2**31), got {ids.min()}..{ids.max()}")
    fits = len(ids) == 0 or ids.max() <= np.iinfo(np.uint16).max
    return ids.astype(np.uint16 if fits else np.int32)


class EncodedPairs(Sequence[Item]):
    """The encoded pairs of a split; ``pairs[i] == (i, source ids, target ids)``, without specials."""

    def __init__(self, source: Side, target: Side) -> None:
        if len(source.offsets) != len(target.offsets):
            raise ValueError(
                f"{len(source.offsets) - 1} source sentences but {len(target.offsets) - 1} target sentences"
            )
        self.source, self.target = source, target

    @classmethod
    def encode(cls, pairs: Sequence[Pair], src_tokenizer, tgt_tokenizer, *, chunk: int = ENCODE_CHUNK
               ) -> "EncodedPairs":
        """Encode ``pairs`` (``Tokenizer.encode_batch`` on each side), ``chunk`` sentences at a time."""
        sources, targets = [], []
        for start in range(0, len(pairs), chunk):
            part = pairs[start : start + chunk]
            sources.append(Side.of(src_tokenizer.encode_batch([p.source for p in part])))
            targets.append(Side.of(tgt_tokenizer.encode_batch([p.target for p in part])))
        return cls(Side.join(sources), Side.join(targets))

    @classmethod
    def of(cls, items: Sequence[Item]) -> "EncodedPairs":
        """From ``(index, source ids, target ids)`` items; their own indices are not kept (positions are)."""
        return cls(Side.of([s for _, s, _ in items]), Side.of([t for _, _, t in items]))

    def __len__(self) -> int:
        return len(self.source.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> Item: ...
    @overload
    def __getitem__(self, i: slice) -> list[Item]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"pair {i} of {len(self)}")
        return i, self.source.row(i), self.target.row(i)

    def __iter__(self) -> Iterator[Item]:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> np.ndarray:
        """(N,) int64: per pair, the longer padded sequence the model sees, source + EOS or BOS + target."""
        return np.maximum(self.source.lengths(), self.target.lengths()) + 1

    def select(self, rows: np.ndarray) -> "EncodedPairs":
        """The pairs at ``rows`` (int indices), renumbered from 0 in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return EncodedPairs(self.source.select(rows), self.target.select(rows))

    @property
    def nbytes(self) -> int:
        """The bytes of the arrays."""
        return sum(a.nbytes for side in (self.source, self.target) for a in (side.ids, side.offsets))
