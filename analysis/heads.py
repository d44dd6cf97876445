"""Per-head statistics of attention maps: how spread out, how far, how positional, how aligned.

Shape legend:
    B   batch
    H   heads (any size: 1 for a head average, L*H for layers folded into heads)
    L   layers
    Tq  query positions (S for the encoder, T for the decoder and cross-attention)
    Tk  key positions (S for the encoder and cross-attention, T for the decoder)
    S   source length, T target length

Every function takes attention weights of shape (B, H, Tq, Tk) whose rows sum to 1 over keys, and optional
boolean validity masks with the project's polarity: True = real token. A statistic is averaged over the valid
queries of the whole batch and returned per head, shape (H,). Positions are indices into the (right-)padded
tensors, so query q and key k of the same sentence are the q-th and k-th tokens.
"""

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from analysis.axes import ATTENTION_KINDS, Kind


@dataclass(frozen=True)
class Statistic:
    """One head statistic as people read it: its name in tags and answers, a short column heading, one line
    saying what it measures, which way is better (None: neither, it describes a head), and whether its values
    are shares in [0, 1] (pictures then use a fixed colour scale)."""

    name: str
    short: str
    description: str
    lower_is_better: bool | None
    bounded: bool


# Every statistic this module computes, in reading order: how spread out, how far, how positional, how
# aligned. The only list of them: logging, pictures and the ATTENTION tab (which is served it) read it here.
STATISTICS: tuple[Statistic, ...] = (
    Statistic("entropy", "entropy", "mean entropy of the head's attention rows, in nats: low = focused on "
              "few tokens", None, False),
    Statistic("distance", "distance", "mean distance in tokens between a query and the keys it attends to",
              None, False),
    Statistic("diagonal", "diagonal", "share of attention on the query's own position", None, True),
    Statistic("previous", "previous", "share of attention on the position just before the query's", None,
              True),
    Statistic("next", "next", "share of attention on the position just after the query's", None, True),
    Statistic("agreement", "agreement", "share of target words whose strongest attention falls on a "
              "gold-aligned source word (higher is better)", False, True),
    Statistic("aer", "AER", "alignment error rate of the head's strongest links against the gold alignment "
              "(lower is better)", True, True),
)
STATISTIC = {statistic.name: statistic for statistic in STATISTICS}  # name -> Statistic

# Which masks go with which attention kind: (query mask, key mask) named by side.
KIND_SIDES = {kind.name: (kind.rows, kind.cols) for kind in ATTENTION_KINDS}


def _check(weights: Tensor, query_valid: Tensor | None, key_valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """Validate shapes and return (query_valid (B, Tq), key_valid (B, Tk)), all True where not given."""
    if weights.dim() != 4:
        raise ValueError(f"attention weights must be (B, H, Tq, Tk), got shape {tuple(weights.shape)}")
    B, _, Tq, Tk = weights.shape
    if query_valid is None:
        query_valid = torch.ones(B, Tq, dtype=torch.bool, device=weights.device)
    if key_valid is None:
        key_valid = torch.ones(B, Tk, dtype=torch.bool, device=weights.device)
    for name, mask, length in (("query_valid", query_valid, Tq), ("key_valid", key_valid, Tk)):
        if mask.dtype != torch.bool:
            raise ValueError(f"{name} must be a boolean mask (True = real token), got dtype {mask.dtype}")
        if tuple(mask.shape) != (B, length):
            raise ValueError(
                f"{name} must have shape (B, {length}) = {(B, length)} for weights of shape "
                f"{tuple(weights.shape)}, got {tuple(mask.shape)}"
            )
    return query_valid, key_valid


def _query_total(per_row: Tensor, query_valid: Tensor) -> tuple[Tensor, Tensor]:
    """A per-row statistic (B, H, Tq) summed over the valid queries of the batch -> (H,), and their count."""
    keep = query_valid.unsqueeze(1)  # (B, 1, Tq)
    return (per_row * keep).sum(dim=(0, 2)), query_valid.sum()


def _mean_over_queries(total: tuple[Tensor, Tensor]) -> Tensor:
    """The mean of a :func:`_query_total` -> (H,)."""
    summed, count = total
    if count == 0:
        raise ValueError("query_valid marks no query as valid; the statistic is undefined")
    return summed / count


def _clean(weights: Tensor, key_valid: Tensor) -> Tensor:
    """Detached float32 weights with padded keys set to exactly 0 (they should already be)."""
    return weights.detach().float().masked_fill(~key_valid[:, None, None, :], 0.0)  # (B, H, Tq, Tk)


def entropy(weights: Tensor, query_valid: Tensor | None = None, key_valid: Tensor | None = None) -> Tensor:
    """Mean Shannon entropy (nats) of the attention rows, per head.

    0 for a head that puts all weight on one key, log(n) for one spread evenly over n keys (0·log 0 = 0).

    Args:
        weights: (B, H, Tq, Tk) attention weights, rows summing to 1.
        query_valid: (B, Tq) bool, True = real query; padded queries are ignored. None = all real.
        key_valid: (B, Tk) bool, True = real key; padded keys are excluded. None = all real.

    Returns:
        (H,) float32.
    """
    return _mean_over_queries(_entropy_total(weights, query_valid, key_valid))


def _entropy_total(weights: Tensor, query_valid: Tensor | None, key_valid: Tensor | None):
    query_valid, key_valid = _check(weights, query_valid, key_valid)
    w = _clean(weights, key_valid)
    per_row = -torch.special.xlogy(w, w).sum(dim=-1)  # (B, H, Tq); xlogy(0, 0) = 0
    return _query_total(per_row, query_valid)


def mean_distance(
    weights: Tensor, query_valid: Tensor | None = None, key_valid: Tensor | None = None
) -> Tensor:
    """Mean attention distance Σ_k w_qk·|q − k| (in positions), per head.

    Args:
        weights: (B, H, Tq, Tk) attention weights, rows summing to 1.
        query_valid: (B, Tq) bool, True = real query. None = all real.
        key_valid: (B, Tk) bool, True = real key. None = all real.

    Returns:
        (H,) float32.
    """
    return _mean_over_queries(_distance_total(weights, query_valid, key_valid))


def _distance_total(weights: Tensor, query_valid: Tensor | None, key_valid: Tensor | None):
    query_valid, key_valid = _check(weights, query_valid, key_valid)
    w = _clean(weights, key_valid)
    Tq, Tk = w.shape[-2:]
    q = torch.arange(Tq, device=w.device).unsqueeze(1)  # (Tq, 1)
    k = torch.arange(Tk, device=w.device).unsqueeze(0)  # (1, Tk)
    distance = (q - k).abs().float()  # (Tq, Tk)
    per_row = (w * distance).sum(dim=-1)  # (B, H, Tq)
    return _query_total(per_row, query_valid)


def offset_share(
    weights: Tensor, offset: int, query_valid: Tensor | None = None, key_valid: Tensor | None = None
) -> Tensor:
    """Mean weight a query puts on key position q + offset, per head.

    offset 0 is the diagonal (attend to self), −1 the previous token, +1 the next. Only queries whose key
    q + offset exists and is valid count.

    Args:
        weights: (B, H, Tq, Tk) attention weights, rows summing to 1.
        offset: key position minus query position.
        query_valid: (B, Tq) bool, True = real query. None = all real.
        key_valid: (B, Tk) bool, True = real key. None = all real.

    Returns:
        (H,) float32.
    """
    _check(weights, query_valid, key_valid)
    Tq, Tk = weights.shape[-2:]
    if not -Tq < offset < Tk:
        raise ValueError(f"offset {offset} leaves no (query, key) pair for Tq={Tq}, Tk={Tk}")
    summed, count = _offset_total(weights, query_valid, key_valid, offset=offset)
    if count == 0:
        raise ValueError(f"no valid query has a valid key at offset {offset}; the share is undefined")
    return summed / count


def _offset_total(weights: Tensor, query_valid: Tensor | None, key_valid: Tensor | None, *, offset: int):
    query_valid, key_valid = _check(weights, query_valid, key_valid)
    w = _clean(weights, key_valid)
    # Diagonal element i is (query i, key i + offset) for offset >= 0 and (query i − offset, key i) otherwise.
    on_offset = torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)  # (B, H, n); n = 0: no such pair
    n = on_offset.shape[-1]
    first_query, first_key = max(-offset, 0), max(offset, 0)
    pair_valid = (
        query_valid[:, first_query : first_query + n] & key_valid[:, first_key : first_key + n]
    )  # (B, n)
    return (on_offset * pair_valid.unsqueeze(1)).sum(dim=(0, 2)), pair_valid.sum()


def gold_matrix(gold: list[set[tuple[int, int]]], T: int, S: int) -> Tensor:
    """Gold alignment links as a boolean matrix.

    Args:
        gold: per sentence, a set of (source position, target position) links.
        T: target length of the padded batch.
        S: source length of the padded batch.

    Returns:
        (B, T, S) bool, True where target position t is linked to source position s.
    """
    links = torch.zeros(len(gold), T, S, dtype=torch.bool)
    for b, sentence in enumerate(gold):
        for s, t in sentence:
            if not (0 <= s < S and 0 <= t < T):
                raise ValueError(
                    f"gold link (src={s}, tgt={t}) of sentence {b} is outside the attention map "
                    f"(S={S}, T={T})"
                )
            links[b, t, s] = True
    return links


def alignment_counts(
    cross_weights: Tensor,
    gold: list[set[tuple[int, int]]],
    tgt_valid: Tensor | None,
    src_valid: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Corpus counts for the arg-max-induced alignment A against gold links G.

    ``cross_weights`` may be any scores of a target × source matrix, of either sign (attributions, norms): a
    row's alignment is its largest score among the valid source positions. Counts of several batches add up
    to those of the whole corpus, so AER and agreement of a corpus can be computed batch by batch.

    Returns:
        hits (H,) = |A ∩ G|, aligned () = |A| = number of aligned target positions, links () = |G|.
    """
    tgt_valid, src_valid = _check(cross_weights, tgt_valid, src_valid)
    B, _, T, S = cross_weights.shape
    if len(gold) != B:
        raise ValueError(f"gold has {len(gold)} sentences but the attention batch has B={B}")
    links = gold_matrix(gold, T, S).to(cross_weights.device)  # (B, T, S)
    outside = links & ~(tgt_valid.unsqueeze(-1) & src_valid.unsqueeze(-2))
    if outside.any():
        b, t, s = outside.nonzero()[0].tolist()
        raise ValueError(f"gold link (src={s}, tgt={t}) of sentence {b} points at a padded position")
    aligned = links.any(dim=-1)  # (B, T)
    if not aligned.any():
        raise ValueError("gold has no links; alignment statistics are undefined")
    # Padded keys get -inf, not 0, so that a row of negative scores never picks one.
    scores = cross_weights.detach().float().masked_fill(~src_valid[:, None, None, :], float("-inf"))
    predicted = scores.argmax(dim=-1)  # (B, H, T)
    is_gold = links.unsqueeze(1).expand(-1, predicted.shape[1], -1, -1)  # (B, H, T, S)
    hit = is_gold.gather(-1, predicted.unsqueeze(-1)).squeeze(-1)  # (B, H, T)
    hits = (hit & aligned.unsqueeze(1)).sum(dim=(0, 2)).float()  # (H,)
    return hits, aligned.sum().float(), links.sum().float()


def alignment_agreement(
    cross_weights: Tensor,
    gold: list[set[tuple[int, int]]],
    tgt_valid: Tensor | None = None,
    src_valid: Tensor | None = None,
) -> Tensor:
    """Share of aligned target positions whose arg-max source position is one of their gold source positions.

    A target position is aligned when it has at least one gold link. Pass weights averaged over heads
    as (B, 1, T, S) to score the head average.

    Args:
        cross_weights: (B, H, T, S) cross-attention weights, rows summing to 1.
        gold: per sentence, a set of (source position, target position) links.
        tgt_valid: (B, T) bool, True = real target token. None = all real.
        src_valid: (B, S) bool, True = real source token. None = all real.

    Returns:
        (H,) float32 in [0, 1].
    """
    hits, aligned, _ = alignment_counts(cross_weights, gold, tgt_valid, src_valid)
    return hits / aligned


def alignment_error_rate(
    cross_weights: Tensor,
    gold: list[set[tuple[int, int]]],
    tgt_valid: Tensor | None = None,
    src_valid: Tensor | None = None,
) -> Tensor:
    """Corpus alignment error rate of the arg-max-induced alignment, per head.

    A has one link (arg-max source, t) per aligned target position t; the gold links are all taken as sure
    (S = P), so AER = 1 − 2|A ∩ S| / (|A| + |S|) (Och & Ney 2003, section 5), with counts summed over the
    corpus before the ratio. A target position with several gold links can therefore never reach 0.

    Args:
        cross_weights: (B, H, T, S) cross-attention weights, rows summing to 1.
        gold: per sentence, a set of (source position, target position) links.
        tgt_valid: (B, T) bool, True = real target token. None = all real.
        src_valid: (B, S) bool, True = real source token. None = all real.

    Returns:
        (H,) float32 in [0, 1].
    """
    hits, aligned, links = alignment_counts(cross_weights, gold, tgt_valid, src_valid)
    return 1.0 - 2.0 * hits / (aligned + links)


# Statistic name -> function of (weights, query_valid, key_valid) -> (sum (H,), count ()): the statistic is
# sum / count, and sums and counts of several batches add up to those of the whole corpus.
_TOTALS = {
    "entropy": _entropy_total,
    "distance": _distance_total,
    "diagonal": partial(_offset_total, offset=0),
    "previous": partial(_offset_total, offset=-1),
    "next": partial(_offset_total, offset=+1),
}


def _kind_statistics(kind: Kind) -> tuple[str, ...]:
    """Which statistics of ``_TOTALS`` mean something for a kind: across languages (queries and keys from
    different sides) only the diagonal (monotone alignment) has a positional reading, and a causal kind never
    sees the next token (its share is always 0)."""
    names = ("entropy", "distance", "diagonal")
    if kind.rows == kind.cols:
        names += ("previous",) if kind.causal else ("previous", "next")
    return names


_KIND_STATISTICS = {kind.name: _kind_statistics(kind) for kind in ATTENTION_KINDS}  # kind -> statistic names
_ALIGNS = {kind.name: kind.aligns for kind in ATTENTION_KINDS}  # kind -> scored against gold alignments


Totals = dict[str, dict[str, tuple[Tensor, Tensor]]]  # kind -> statistic -> (sum (L, H), count ())


def summary_totals(
    maps: dict[str, list[Tensor]],
    *,
    src_valid: Tensor | None = None,
    tgt_valid: Tensor | None = None,
    gold: list[set[tuple[int, int]]] | None = None,
) -> Totals:
    """The sums and counts behind :func:`summarize`'s statistics, for one batch. Those of several batches
    added with :func:`add_totals` and divided by :func:`totals_summary` give what :func:`summarize` gives for
    all the sentences at once, so that a corpus is summarised in batches of bounded memory."""
    masks = {"source": src_valid, "target": tgt_valid}
    totals = {}
    for kind, layers in maps.items():
        if kind not in KIND_SIDES:
            raise ValueError(f"unknown attention kind {kind!r}; expected one of {sorted(KIND_SIDES)}")
        if not layers:
            raise ValueError(f"maps[{kind!r}] has no layers")
        shapes = {tuple(layer.shape) for layer in layers}
        if len(shapes) != 1:
            raise ValueError(f"layers of maps[{kind!r}] differ in shape: {sorted(shapes)}")
        if layers[0].dim() != 4:
            raise ValueError(f"maps[{kind!r}] layers must be (B, H, Tq, Tk), got {tuple(layers[0].shape)}")
        L = len(layers)
        B, H, Tq, Tk = layers[0].shape
        # Fold layers into heads so each statistic is computed once for all layers.
        folded = torch.stack(layers, dim=1).reshape(B, L * H, Tq, Tk)  # (B, L*H, Tq, Tk)
        query_side, key_side = KIND_SIDES[kind]
        query_valid, key_valid = masks[query_side], masks[key_side]
        sums = {
            name: _TOTALS[name](folded, query_valid=query_valid, key_valid=key_valid)
            for name in _KIND_STATISTICS[kind]
        }
        if _ALIGNS[kind] and gold is not None:
            hits, aligned, links = alignment_counts(folded, gold, query_valid, key_valid)
            sums["agreement"] = hits, aligned
            sums["aer"] = aligned + links - 2.0 * hits, aligned + links  # AER = 1 - 2|A∩G| / (|A| + |G|)
        totals[kind] = {n: (v.reshape(L, H), count) for n, (v, count) in sums.items()}  # (L, H)
    return totals


def add_totals(first: Totals, second: Totals) -> Totals:
    """The totals of two batches together (each kind and statistic in both)."""
    return {
        kind: {name: (total[0] + second[kind][name][0], total[1] + second[kind][name][1])
               for name, total in named.items()}
        for kind, named in first.items()
    }


def totals_summary(totals: Totals) -> dict[str, dict[str, Tensor]]:
    """Each statistic from its totals: kind -> statistic name -> (L, H) float32."""
    summary = {}
    for kind, named in totals.items():
        for name, (summed, count) in named.items():
            if count == 0:
                raise ValueError(f"{kind} {name}: no valid query to average over; the statistic is undefined")
        summary[kind] = {name: (summed / count).float() for name, (summed, count) in named.items()}
    return summary


def summarize(
    maps: dict[str, list[Tensor]],
    *,
    src_valid: Tensor | None = None,
    tgt_valid: Tensor | None = None,
    gold: list[set[tuple[int, int]]] | None = None,
) -> dict[str, dict[str, Tensor]]:
    """Every statistic for every attention kind, stacked as layers × heads matrices.

    Args:
        maps: any of "encoder" -> per layer (B, H, S, S), "decoder" -> per layer (B, H, T, T),
            "cross" -> per layer (B, H, T, S).
        src_valid: (B, S) bool, True = real source token. None = all real.
        tgt_valid: (B, T) bool, True = real target token. None = all real.
        gold: per sentence, a set of (source position, target position) links; adds "agreement" and "aer"
            for the cross-attention.

    Returns:
        kind -> statistic name -> (L, H) float32. Self-attention kinds have "entropy", "distance",
        "diagonal", "previous" and (encoder only) "next"; cross has "entropy", "distance", "diagonal",
        and "agreement", "aer" when gold is given.
    """
    return totals_summary(summary_totals(maps, src_valid=src_valid, tgt_valid=tgt_valid, gold=gold))
