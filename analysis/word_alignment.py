"""Word alignments from token maps: subwords aggregated into words, links extracted, links counted.

A map scores target rows against source columns (attention weights, norms, attributions: any method of
``analysis.explain``); a gold set links words. Plain tensors in and out:

1. ``word_maps``: a source word's score is the **sum** over its tokens' columns (the share of the row that
   falls on any of its pieces), a target word's the **mean** over its tokens' rows (each piece's row is
   one reading of the same word). Tokens of no word (index ``-1``: EOS, padding, a lone ``▁``) are left out,
   so a word never links to EOS, as in fairseq's ``utils.extract_hard_alignment``.
2. ``extract``: the links of each way in ``EXTRACTIONS``: the arg-max of each target word's row (forward,
   the usual reading of attention) or of each source word's column (reverse), and their symmetrisations
   (``analysis.symmetrise``); or every link whose share of its row (and column) reaches a threshold.
   ``read_through`` then gives a word without a token of its own (one token spells it and the word before)
   the links of the word it is read through.
3. ``link_counts``: |A ∩ S|, |A ∩ P|, |A| and |S| per map, whose sums over a corpus give precision, recall
   and AER (``analysis.aer``, Och & Ney 2003), and ``agreement_counts`` for the share of aligned target words
   whose arg-max is a gold link.

Shape legend: B sentences, M maps of a sentence (layers, or layers × heads folded), T target tokens, S source
tokens, Tw target words, Sw source words. Links are (source word, target word), 0-based; link tensors are
boolean (B, M, Tw, Sw) with True = linked.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from analysis.symmetrise import grow_diag_final_and

NO_WORD = -1
THRESHOLD = 0.1  # share of a word's row (and column) that a thresholded link needs


def _membership(words: Tensor, count: int) -> Tensor:
    """(B, N) word index of each token (``NO_WORD``: none) → (B, N, count) float, 1 where token n is in
    word w."""
    if words.dtype != torch.int64:
        raise ValueError(f"word indices must be int64, got {words.dtype}")
    if words.numel() and (int(words.min()) < NO_WORD or int(words.max()) >= count):
        raise ValueError(f"word indices must lie in [{NO_WORD}, {count}), got {int(words.min())} .. "
                         f"{int(words.max())}")
    return F.one_hot(words + 1, count + 1)[..., 1:].float()  # (B, N, count); NO_WORD is column 0, dropped


def word_valid(words: Tensor, count: int) -> Tensor:
    """(B, N) word index of each token → (B, count) bool: the words that own at least one token."""
    return _membership(words, count).sum(dim=1) > 0


def word_maps(scores: Tensor, src_words: Tensor, tgt_words: Tensor, num_src: int, num_tgt: int) -> Tensor:
    """Token maps aggregated into word maps: sum over a source word's tokens, mean over a target word's.

    Args:
        scores: (B, ..., T, S) any scores, one map per leading index (layers, heads).
        src_words: (B, S) int64, each source token's word in [0, num_src), or ``NO_WORD``.
        tgt_words: (B, T) int64, each target token's word in [0, num_tgt), or ``NO_WORD``; give rows without a
            reading (padding, Shift-Att's EOS row) ``NO_WORD``.
        num_src, num_tgt: Sw and Tw, the most words of a sentence of the batch on each side.

    Returns:
        (B, ..., Tw, Sw) float32; rows of words without a token and columns of such words are 0.
    """
    B, T, S = scores.shape[0], *scores.shape[-2:]
    if tuple(src_words.shape) != (B, S) or tuple(tgt_words.shape) != (B, T):
        raise ValueError(f"src_words {tuple(src_words.shape)} and tgt_words {tuple(tgt_words.shape)} must be "
                         f"(B, S) = {(B, S)} and (B, T) = {(B, T)} for scores of shape {tuple(scores.shape)}")
    to_source = _membership(src_words, num_src)  # (B, S, Sw)
    of_target = _membership(tgt_words, num_tgt)  # (B, T, Tw)
    to_target = of_target / of_target.sum(dim=1, keepdim=True).clamp_min(1.0)  # (B, T, Tw): a mean per word
    flat = scores.detach().float().reshape(B, -1, T, S)  # (B, M, T, S)
    words = to_target.transpose(1, 2).unsqueeze(1) @ flat @ to_source.unsqueeze(1)  # (B, M, Tw, Sw)
    return words.reshape(*scores.shape[:-2], num_tgt, num_src)  # (B, ..., Tw, Sw)


def _cells(maps: Tensor, src_valid: Tensor, tgt_valid: Tensor) -> Tensor:
    """(B, 1, Tw, Sw) bool: cells whose two words both exist; checks the shapes."""
    B, _, Tw, Sw = maps.shape
    if tuple(src_valid.shape) != (B, Sw) or tuple(tgt_valid.shape) != (B, Tw):
        raise ValueError(f"src_valid {tuple(src_valid.shape)} and tgt_valid {tuple(tgt_valid.shape)} must be "
                         f"(B, Sw) = {(B, Sw)} and (B, Tw) = {(B, Tw)} for word maps {tuple(maps.shape)}")
    return (tgt_valid[:, :, None] & src_valid[:, None, :]).unsqueeze(1)


def argmax_links(maps: Tensor, src_valid: Tensor, tgt_valid: Tensor) -> Tensor:
    """Forward links: each valid target word to the valid source word of its row's highest score (the first
    of ties); scores may have either sign.

    Args:
        maps: (B, M, Tw, Sw) word maps.
        src_valid, tgt_valid: (B, Sw) and (B, Tw) bool, True = a word with a reading (``word_valid``).

    Returns:
        (B, M, Tw, Sw) bool, at most one link per row.
    """
    cells = _cells(maps, src_valid, tgt_valid)
    scores = maps.float().masked_fill(~src_valid[:, None, None, :], float("-inf"))
    best = F.one_hot(scores.argmax(dim=-1), maps.size(-1)).bool()  # (B, M, Tw, Sw)
    return best & cells


def threshold_links(
    maps: Tensor, src_valid: Tensor, tgt_valid: Tensor, threshold: float = THRESHOLD
) -> Tensor:
    """Forward links: every cell holding at least ``threshold`` of its row's positive scores (negative scores
    count as 0, so a row without a positive score links nothing).

    Returns:
        (B, M, Tw, Sw) bool.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    cells = _cells(maps, src_valid, tgt_valid)
    positive = maps.float().clamp_min(0.0) * cells  # (B, M, Tw, Sw)
    share = positive / positive.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    return (share >= threshold) & (positive > 0)


def reverse(extract: Callable[..., Tensor], maps: Tensor, src_valid: Tensor, tgt_valid: Tensor,
            **options) -> Tensor:
    """An extraction read the other way: over each source word's column instead of each target word's row."""
    return extract(maps.transpose(-1, -2), tgt_valid, src_valid, **options).transpose(-1, -2)


def grow_diag_final_and_links(forward: Tensor, backward: Tensor) -> Tensor:
    """``analysis.symmetrise.grow_diag_final_and`` of each map's forward and reverse links, (B, M, Tw, Sw)
    bool each. A loop over the maps in Python: seconds for a corpus of hundreds of sentences."""
    B, M = forward.shape[:2]
    grown = torch.zeros_like(forward)
    for b in range(B):
        for m in range(M):
            links = grow_diag_final_and(_link_set(forward[b, m]), _link_set(backward[b, m]))
            for source, target in links:
                grown[b, m, target, source] = True
    return grown


def _link_set(links: Tensor) -> set[tuple[int, int]]:
    """(Tw, Sw) bool → {(source, target)}."""
    return {(source, target) for target, source in links.nonzero().tolist()}


@dataclass(frozen=True)
class Extraction:
    short: str  # a column heading
    description: str


# Each way of reading links off word maps, made from the forward and reverse arg-max and threshold. SimAlign's
# "Argmax" (Jalili Sabet et al. 2020) is the intersection of the two arg-maxes; awesome-align's "softmax"
# extraction (Dou & Neubig 2021, section 2.2) keeps the links above a threshold of the row's and of the
# column's distribution, here a share of the method's own (non-negative) scores, as these maps are no
# similarities to put through a softmax.
EXTRACTIONS: dict[str, Extraction] = {
    "argmax": Extraction("forward", "each target word to the source word of its highest score"),
    "argmax_reverse": Extraction("reverse", "each source word to the target word of its highest score"),
    "argmax_intersection": Extraction("both", "the links of both directions (SimAlign's Argmax)"),
    "argmax_union": Extraction("either", "the links of either direction"),
    "argmax_grow_diag_final_and": Extraction("gdfa", "the intersection grown towards the union "
                                                     "(grow-diag-final-and, Koehn et al. 2005)"),
    "threshold": Extraction("share", "every source word with at least the threshold's share of a target "
                                     "word's row"),
    "threshold_both": Extraction("share both", "links with the threshold's share of their row and of their "
                                               "column (as awesome-align extracts)"),
}


def extract(maps: Tensor, src_valid: Tensor, tgt_valid: Tensor, names, *, threshold: float = THRESHOLD
            ) -> dict[str, Tensor]:
    """name -> (B, M, Tw, Sw) bool links of each extraction in ``names`` (keys of ``EXTRACTIONS``) of the
    word maps (B, M, Tw, Sw); the directions are computed once, whichever names need them."""
    unknown = [name for name in names if name not in EXTRACTIONS]
    if unknown:
        raise ValueError(f"unknown extraction {unknown[0]!r}; expected one of {', '.join(EXTRACTIONS)}")
    made: dict[str, Tensor] = {}

    def links(name: str) -> Tensor:
        if name not in made:
            made[name] = _make(name, links, maps, src_valid, tgt_valid, threshold)
        return made[name]

    return {name: links(name) for name in names}


def _make(name, links, maps, src_valid, tgt_valid, threshold) -> Tensor:
    if name == "argmax":
        return argmax_links(maps, src_valid, tgt_valid)
    if name == "argmax_reverse":
        return reverse(argmax_links, maps, src_valid, tgt_valid)
    if name == "argmax_intersection":
        return links("argmax") & links("argmax_reverse")
    if name == "argmax_union":
        return links("argmax") | links("argmax_reverse")
    if name == "argmax_grow_diag_final_and":
        return grow_diag_final_and_links(links("argmax"), links("argmax_reverse"))
    if name == "threshold":
        return threshold_links(maps, src_valid, tgt_valid, threshold)
    assert name == "threshold_both", name
    return links("threshold") & reverse(threshold_links, maps, src_valid, tgt_valid, threshold=threshold)


def read_through(links: Tensor, src_readers: Tensor, tgt_readers: Tensor) -> Tensor:
    """Each word linked as the word it is read through: ``out[..., t, s] = links[..., R_t[t], R_s[s]]``,
    False where either reader is ``NO_WORD``. A word with a token of its own is its own reader, so its
    links are unchanged (``data.words.word_readers`` makes the readers).

    Args:
        links: (B, M, Tw, Sw) bool.
        src_readers: (B, Sw) int64, each source word's reader among the source words, or ``NO_WORD``.
        tgt_readers: (B, Tw) int64, the same for the target words.
    """
    B, M, Tw, Sw = links.shape
    if src_readers.shape != (B, Sw) or tgt_readers.shape != (B, Tw):
        raise ValueError(f"readers {tuple(src_readers.shape)} and {tuple(tgt_readers.shape)} must be "
                         f"(B, Sw) and (B, Tw) of links {tuple(links.shape)}")
    rows = tgt_readers.clamp(min=0)[:, None, :, None].expand(B, M, Tw, Sw)
    by_row = links.gather(2, rows)  # (B, M, Tw, Sw): row t is row R_t[t]
    columns = src_readers.clamp(min=0)[:, None, None, :].expand(B, M, Tw, Sw)
    read = by_row.gather(3, columns)  # column s is column R_s[s]
    known = (tgt_readers != NO_WORD)[:, None, :, None] & (src_readers != NO_WORD)[:, None, None, :]
    return read & known


def link_counts(links: Tensor, sure: Tensor, possible: Tensor) -> Tensor:
    """The counts AER is made of, per map, summed over the batch's sentences.

    Args:
        links: (B, M, Tw, Sw) bool, the proposed links A.
        sure: (B, Tw, Sw) bool, the sure gold links S.
        possible: (B, Tw, Sw) bool, the possible-only gold links (P is ``sure | possible``).

    Returns:
        (4, M) int64: |A ∩ S|, |A ∩ P|, |A|, |S| (the same |S| for every map).
    """
    if links.shape[:1] + links.shape[2:] != sure.shape or sure.shape != possible.shape:
        raise ValueError(f"links {tuple(links.shape)}, sure {tuple(sure.shape)} and possible "
                         f"{tuple(possible.shape)} must be (B, M, Tw, Sw), (B, Tw, Sw) and (B, Tw, Sw)")
    sure, allowed = sure.unsqueeze(1), (sure | possible).unsqueeze(1)  # (B, 1, Tw, Sw)
    a_and_s = (links & sure).sum(dim=(0, 2, 3))  # (M,)
    a_and_p = (links & allowed).sum(dim=(0, 2, 3))
    a = links.sum(dim=(0, 2, 3))
    s = sure.sum().expand_as(a)
    return torch.stack([a_and_s, a_and_p, a, s])  # (4, M)


def agreement_counts(links: Tensor, sure: Tensor, possible: Tensor) -> Tensor:
    """Of the target words with a sure gold link, how many have a proposed link that is gold (sure or
    possible): for the forward arg-max, the share whose arg-max is right (``analysis.heads``' agreement).

    Returns:
        (2, M) int64: hits per map, and the target words with a sure link (the same for every map).
    """
    aligned = sure.any(dim=-1).unsqueeze(1)  # (B, 1, Tw)
    hit = (links & (sure | possible).unsqueeze(1)).any(dim=-1) & aligned  # (B, M, Tw)
    hits = hit.sum(dim=(0, 2))  # (M,)
    return torch.stack([hits, aligned.sum().expand_as(hits)])  # (2, M)


def aer_of_counts(counts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Precision, recall and AER (float64, each of the counts' trailing shape) of ``link_counts``' counts
    (4, ...), as ``analysis.aer.LinkCounts.score`` computes them: precision 0 where nothing was proposed,
    recall 0 where there is no sure link.

    Raises:
        ValueError: a map proposed nothing against a gold set without sure links: AER is undefined.
    """
    a_and_s, a_and_p, a, s = counts.double()
    if bool((a + s == 0).any()):
        raise ValueError("no proposed links and no sure gold links: AER is undefined")
    precision = torch.where(a > 0, a_and_p / a.clamp_min(1), 0.0)
    recall = torch.where(s > 0, a_and_s / s.clamp_min(1), 0.0)
    return precision, recall, 1.0 - (a_and_s + a_and_p) / (a + s)
