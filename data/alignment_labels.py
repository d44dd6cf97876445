"""Guided alignment's labels: word links of the training pairs, as distributions over the model's tokens.

Shape legend: B batch, T target length (tokens + EOS), S source length (tokens + EOS).

Guided alignment (Garg et al. 2019) trains one cross-attention head to attend, at each target token, to the
source words that token's word is linked to. The links come from an aligner, one Pharaoh line a training pair
(``i-j`` links source word ``i`` to target word ``j``, counted from 0 as eflomal and fast_align write them):
from a file (:func:`read_alignment_labels`), or made here by eflomal on the training pairs
(:func:`eflomal_links`). The words are a side's space-separated words (or its listed words, ``Pair.words``),
and each token belongs to the word whose characters it spells (``data.words``), so every piece of a target
word takes the word's links, spread over every piece of the source words they name. Collating turns them into
a (B, T, S) label tensor whose rows are those distributions, or zeros where a token has no link (EOS never
has one): the rows the loss ignores.
"""

import hashlib
import importlib.util
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import torch
from torch import Tensor

from data.batching import Batch, collate
from data.corpora import CorpusError, PathLike, read_lines
from data.encoded import EncodedPairs, Side
from data.gold import Link, format_links, parse_links
from data.pairs import Pair, word_spans
from data.special import SPECIALS
from data.words import NO_WORD, token_words

EFLOMAL = "eflomal"  # --data.alignment_labels eflomal: made here, by eflomal
AlignedItem = tuple[int, Sequence[int], Sequence[int], Sequence[int]]  # an Item and its flat token links


def read_alignment_labels(path: PathLike, pairs: Sequence[Pair]) -> list[set[Link]]:
    """The word links of each of ``pairs`` from a file of one Pharaoh line a pair, counted from 0 (a blank
    line: a pair without links). Links an aligner marks possible (``ipj``) are links too.

    Raises:
        CorpusError: the file is unreadable, has another number of lines than there are pairs, or a line
            holds a malformed link or one past the end of its pair (the message names the file and line).
    """
    lines = read_lines(path, keep_blank_ends=True)
    if len(lines) != len(pairs):
        shorter = min(len(lines), len(pairs))
        raise CorpusError(
            path, shorter + 1,
            f"{'ends' if len(lines) < len(pairs) else 'goes on'} after {shorter} lines of links, but there "
            f"are {len(pairs)} training pairs; give one line a pair, in the training files' order",
        )
    links = []
    for number, (pair, line) in enumerate(zip(pairs, lines, strict=True), start=1):
        try:
            sure, possible = parse_links(line, one_based=False)
        except ValueError as e:
            raise CorpusError(path, number, f"{e} (links count words from 0)") from None
        sizes = len(pair.words("source")), len(pair.words("target"))
        for source, target in sorted(sure | possible):
            if source >= sizes[0] or target >= sizes[1]:
                raise CorpusError(
                    path, number,
                    f"link {source}-{target} is past the end of its pair, which has {sizes[0]} source and "
                    f"{sizes[1]} target words (links count from 0)",
                )
        links.append(sure | possible)
    return links


def eflomal_links(pairs: Sequence[Pair]) -> list[set[Link]]:
    """eflomal's links of each of ``pairs`` (Östling & Tiedemann 2016; ``pip install eflomal``), forward only:
    each target word linked to at most one source word, as a row of attention is one distribution over the
    source. Words are compared lowercased. eflomal seeds its sampler from the system: a rerun differs a
    little, hence the cache (:func:`eflomal_cache_name`)."""
    import eflomal  # optional: only this option needs it (checked when the data module is made)

    sources = [" ".join(pair.words("source")).lower() + "\n" for pair in pairs]
    targets = [" ".join(pair.words("target")).lower() + "\n" for pair in pairs]
    with tempfile.TemporaryDirectory() as folder:
        forward = Path(folder) / "forward"
        eflomal.Aligner().align(sources, targets, links_filename_fwd=str(forward))
        lines = forward.read_text(encoding="utf-8").splitlines()
    if len(lines) != len(pairs):
        raise RuntimeError(f"eflomal wrote {len(lines)} lines of links for {len(pairs)} pairs")
    return [parse_links(line, one_based=False)[0] for line in lines]


def eflomal_cache_name(pairs: Sequence[Pair]) -> str:
    """The file name of eflomal's links of exactly these pairs' words: a digest of them, so that a cache is
    reused only for the pairs it was made of."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(f"{' '.join(pair.words('source'))}\t{' '.join(pair.words('target'))}\n".encode())
    return f"alignment_eflomal_{digest.hexdigest()[:16]}.txt"


def write_links_file(path: PathLike, links: Sequence[set[Link]]) -> None:
    """One Pharaoh line (0-based) a pair, as :func:`read_alignment_labels` reads them back."""
    Path(path).write_text("".join(format_links(pair) + "\n" for pair in links), encoding="utf-8")


class TrainingLinks:
    """Guided alignment's word links of a run's training pairs (``alignment_labels``): read from a file whose
    lines are every training pair's, or eflomal's, made on the pairs left after the gold repeats are dropped
    (before length filtering) and cached beside the tokenizers, where a run whose ``tokenizer_dir`` holds
    them reuses them. ``log(message)`` is told which and how long it took."""

    def __init__(self, labels: str, tokenizer_dir: str | None, log: Callable[[str], Any]) -> None:
        if labels == EFLOMAL and importlib.util.find_spec("eflomal") is None:
            raise ValueError("alignment_labels=eflomal needs eflomal: pip install eflomal (or give a file)")
        self.labels, self.tokenizer_dir, self.log = labels, tokenizer_dir, log
        self.eflomal: tuple[str, list[set[Link]]] | None = None  # (cache file name, links) of eflomal's run

    def of(self, raw: Sequence[Pair], index: Sequence[int], kept: Sequence[int]) -> list[set[Link]]:
        """The word links of the training pairs ``kept`` (indices into ``raw``, all training pairs), where
        ``index`` are those not dropped as gold repeats."""
        if self.labels != EFLOMAL:
            every = read_alignment_labels(self.labels, raw)
            return [every[i] for i in kept]
        aligned = [raw[i] for i in index]
        name = eflomal_cache_name(aligned)
        if self.eflomal is None or self.eflomal[0] != name:
            cached = None if self.tokenizer_dir is None else Path(self.tokenizer_dir) / name
            if cached is not None and cached.is_file():
                self.log(f"Guided alignment: eflomal's links of the {len(aligned)} training pairs reused "
                         f"from {cached}.")
                self.eflomal = name, read_alignment_labels(cached, aligned)
            else:
                start = time.perf_counter()
                self.eflomal = name, eflomal_links(aligned)
                self.log(f"Guided alignment: eflomal aligned the {len(aligned)} training pairs in "
                         f"{time.perf_counter() - start:.0f} s; a run writes them beside its tokenizers, as "
                         f"{name}.")
        position = {pair: k for k, pair in enumerate(index)}
        return [self.eflomal[1][position[i]] for i in kept]

    def save(self, directory: PathLike) -> None:
        """Write eflomal's links, if made, into ``directory`` (beside the tokenizers), for a run to reuse."""
        if self.eflomal is not None:
            write_links_file(Path(directory) / self.eflomal[0], self.eflomal[1])


def token_words_of(pair: Pair, side: str, tokenizer) -> tuple[list[int], list[int]]:
    """The token ids of one side of a training pair, as training encodes its text, and the word each token
    belongs to (``data.words.NO_WORD`` for none)."""
    text = getattr(pair, side)
    ids, spans = tokenizer.encode_spans(text)
    return ids, token_words(spans, word_spans(text, pair.words(side)))


def token_links(
    links: set[Link], source_words: Sequence[int], target_words: Sequence[int]
) -> list[tuple[int, int]]:
    """Word links as token links ``(target token, source token)``: every token of a target word takes the
    word's links, each to every token of the linked source word.

    Args:
        links: ``(source word, target word)``, 0-based.
        source_words, target_words: per token of each side, its word (``NO_WORD`` for none).
    """
    source_tokens: dict[int, list[int]] = {}
    for token, word in enumerate(source_words):
        if word != NO_WORD:
            source_tokens.setdefault(word, []).append(token)
    linked: dict[int, list[int]] = {}
    for source, target in sorted(links):
        linked.setdefault(target, []).extend(source_tokens.get(source, ()))
    return [
        (token, source_token)
        for token, word in enumerate(target_words)
        if word != NO_WORD
        for source_token in linked.get(word, ())
    ]


def encode_token_links(
    pairs: Sequence[Pair], links: Sequence[set[Link]], encoded: EncodedPairs, src_tokenizer, tgt_tokenizer
) -> Side:
    """The token links of each pair, flat (``[t0, s0, t1, s1, ...]``, as ``Side`` holds ids), for
    :class:`AlignedPairs`.

    Raises:
        ValueError: a side's tokens with character offsets differ from the encoded ones (a tokenizer whose
            offsets and ids disagree; never seen with this project's tokenizers).
    """
    rows = []
    for index, (pair, pair_links) in enumerate(zip(pairs, links, strict=True)):
        _, source_ids, target_ids = encoded[index]
        source = token_words_of(pair, "source", src_tokenizer)
        target = token_words_of(pair, "target", tgt_tokenizer)
        if source[0] != source_ids or target[0] != target_ids:
            raise ValueError(f"training pair {index + 1}: its tokens with offsets differ from its encoding")
        rows.append([i for link in token_links(pair_links, source[1], target[1]) for i in link])
    return Side.of(rows)


class AlignedPairs(Sequence[AlignedItem]):
    """Encoded pairs with their token links: ``pairs[i] == (i, source ids, target ids, flat links)``, what
    :func:`collate_aligned` takes; the token-bucket sampler reads ``lengths()`` as of ``EncodedPairs``."""

    def __init__(self, pairs: EncodedPairs, links: Side) -> None:
        if len(links.offsets) - 1 != len(pairs):
            raise ValueError(f"{len(links.offsets) - 1} rows of links for {len(pairs)} pairs")
        self.pairs, self.links = pairs, links

    def __len__(self) -> int:
        return len(self.pairs)

    @overload
    def __getitem__(self, i: int) -> AlignedItem: ...
    @overload
    def __getitem__(self, i: slice) -> list[AlignedItem]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        index, source, target = self.pairs[i]
        return index, source, target, self.links.row(index)

    def __iter__(self) -> Iterator[AlignedItem]:
        return (self[i] for i in range(len(self)))

    def lengths(self):
        return self.pairs.lengths()


def alignment_targets(links: Sequence[Sequence[int]], target_length: int, source_length: int) -> Tensor:
    """(B, T, S) float32 labels: row ``(b, t)`` spreads 1 evenly over the source tokens linked to target
    token ``t`` of pair ``b``, or is zero where it has none. ``links``: per pair, flat ``[t0, s0, ...]``."""
    labels = torch.zeros(len(links), target_length, source_length)  # (B, T, S)
    flat = [torch.tensor(row, dtype=torch.int64).view(-1, 2) for row in links]  # (L_b, 2) each
    rows = torch.cat([torch.full((len(f),), b, dtype=torch.int64) for b, f in enumerate(flat)])  # (L,)
    pairs = torch.cat(flat)  # (L, 2): target token, source token
    labels[rows, pairs[:, 0], pairs[:, 1]] = 1.0
    return labels / labels.sum(dim=-1, keepdim=True).clamp(min=1.0)  # (B, T, S)


def collate_aligned(
    items: Sequence[AlignedItem],
    *,
    pad_id: int = SPECIALS.pad_id,
    bos_id: int = SPECIALS.bos_id,
    eos_id: int = SPECIALS.eos_id,
) -> Batch:
    """:func:`data.batching.collate` of the items' ids, with their links as ``Batch.alignment`` (B, T, S):
    built here, on the CPU, so that the training step asks the device nothing."""
    batch = collate([item[:3] for item in items], pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)
    labels = alignment_targets([item[3] for item in items], batch.tgt_out.size(1), batch.src.size(1))
    return batch._replace(alignment=labels)

