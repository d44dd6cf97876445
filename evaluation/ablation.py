"""Head ablation: what each attention head is worth, which heads a model can do without, which align words.

Silencing a head multiplies its output by 0 before the heads are merged (``model.HeadMask``). A head's
importance is the increase of the teacher-forced loss when it alone is silenced, the measure of Michel et al.
2019 ("Are Sixteen Heads Really Better than One?", §3); the change in BLEU and exact match of greedy
translations is reported beside it. Pruning silences the heads of lowest importance all together.

Many ablations share one forward pass: a batch of B sentences is repeated C times and every copy gets its own
per-sentence head mask, so copy i (rows i*B .. (i+1)*B - 1) runs with the heads of ablation i silenced.

Shape legend: B batch, C ablations in one pass, S source length, T target length, V target vocabulary size,
L layers, H heads, N sentences.

Layers and heads are counted from 0 in code and from 1 in everything shown to people (tables, figures, JSON).
"""

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from analysis.axes import KIND_LABELS, KINDS  # KINDS is also the order of HeadMask's fields
from analysis.heads import alignment_agreement, alignment_error_rate
from analysis.metrics import TranslationScores, score_translations
from data.batching import Batch
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.translate import length_sorted_batches
from model import HeadMask, Transformer, TransformerConfig

GOLD_DATASETS = "toy, copy, reverse"


class AnalysisError(Exception):
    """A head analysis that cannot run on this model or data; the message is one line."""


class Head(NamedTuple):
    """One attention head: its kind ("encoder", "decoder" or "cross"), layer and index, both from 0."""

    kind: str
    layer: int
    head: int

    def as_dict(self) -> dict:
        return {"kind": self.kind, "layer": self.layer + 1, "head": self.head + 1}

    def __str__(self) -> str:
        return f"{self.kind} layer {self.layer + 1} head {self.head + 1}"


def layer_counts(config: TransformerConfig) -> dict[str, int]:
    """Number of layers of each attention kind."""
    return {
        "encoder": config.num_encoder_layers,
        "decoder": config.num_decoder_layers,
        "cross": config.num_decoder_layers,
    }


def all_heads(config: TransformerConfig) -> list[Head]:
    """Every head of the model, kind by kind, layer by layer."""
    layers = layer_counts(config)
    return [Head(kind, i, j) for kind in KINDS for i in range(layers[kind]) for j in range(config.num_heads)]


def head_mask(config: TransformerConfig, silenced: Collection[Head] = (), *, device=None) -> HeadMask:
    """(L, H) multipliers of every kind: 0 for the ``silenced`` heads, 1 for the others."""
    layers = layer_counts(config)
    masks = {kind: torch.ones(layers[kind], config.num_heads, device=device) for kind in KINDS}
    for head in silenced:
        if head.kind not in masks or not (
            0 <= head.layer < layers[head.kind] and 0 <= head.head < config.num_heads
        ):
            raise ValueError(
                f"{head!r} is not a head of this model ({layers} layers, {config.num_heads} heads)"
            )
        masks[head.kind][head.layer, head.head] = 0.0
    return HeadMask(**masks)


def stacked_head_mask(
    config: TransformerConfig, ablations: Sequence[Collection[Head]], batch_size: int, *, device=None
) -> HeadMask:
    """Per-sentence masks for a batch of ``batch_size`` sentences repeated (``Tensor.repeat``) per ablation.

    Returns (C*B, L, H) masks of every kind; rows i*B .. (i+1)*B - 1 silence the heads of ``ablations[i]``.
    """
    masks = [head_mask(config, silenced, device=device) for silenced in ablations]
    return HeadMask(
        *(torch.stack([m[k] for m in masks]).repeat_interleave(batch_size, dim=0) for k in range(len(KINDS)))
    )  # each (C*B, L, H)


def _passes(count: int, batch_size: int, max_rows: int) -> Iterable[range]:
    """Groups of ablation indices sharing a pass: as many as ``max_rows`` sentence copies hold, at least 1."""
    per_pass = max(1, max_rows // batch_size)
    for start in range(0, count, per_pass):
        yield range(start, min(start + per_pass, count))


@torch.no_grad()
def ablation_losses(
    model: Transformer,
    batches: Iterable[Batch],
    ablations: Sequence[Collection[Head]],
    *,
    max_rows: int = 256,
    progress: Callable[[int], object] | None = None,
) -> list[float]:
    """Teacher-forced negative log-likelihood per target token (EOS counts, no label smoothing) per ablation.

    Args:
        batches: the evaluation data; every batch runs under every ablation.
        ablations: per ablation, the heads silenced together; an empty one measures the intact model.
        max_rows: most sentence copies in one forward pass; a batch of B sentences runs max(1, max_rows // B)
            ablations at once.
        progress: called with the number of sentences of each finished batch.

    Returns:
        one NLL (nats per token) per ablation, averaged over all target tokens of all batches.
    """
    c, device = model.config, model.device
    totals = torch.zeros(len(ablations), dtype=torch.float64)
    tokens = 0
    for batch in batches:
        src, tgt_in, tgt_out = batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)
        b = src.size(0)
        for group in _passes(len(ablations), b, max_rows):
            n = len(group)
            masks = stacked_head_mask(c, [ablations[i] for i in group], b, device=device)
            targets = tgt_out.repeat(n, 1)  # (n*B, T)
            keep = targets != c.pad_id  # no vocabulary projection for padding, as in training
            logits = model(src.repeat(n, 1), tgt_in.repeat(n, 1), head_mask=masks, keep=keep)  # (N, V)
            nll = F.cross_entropy(logits.float(), targets[keep], reduction="none")  # (N,)
            # Every ablation of the group scores the same tokens, in consecutive blocks of equal size.
            totals[group.start : group.stop] += nll.view(n, -1).sum(dim=1).double().cpu()
        tokens += int((tgt_out != c.pad_id).sum())
        if progress is not None:
            progress(b)
    if tokens == 0:
        raise AnalysisError("no target tokens to measure the loss on")
    return (totals / tokens).tolist()


@torch.no_grad()
def ablation_translations(
    model: Transformer,
    batches: Iterable[Batch],
    ablations: Sequence[Collection[Head]],
    *,
    max_rows: int = 256,
    max_len: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> list[list[list[int]]]:
    """Greedy translations of every batch under every ablation, batched like :func:`ablation_losses`.

    Each sentence decodes alike in any batch (its own length limit, its own head mask), so the result is that
    of decoding it alone with the ablation's (L, H) mask.

    Returns:
        ``[ablation][sentence]`` token ids without EOS and padding, sentences in ``Batch.index`` order.
    """
    c, device = model.config, model.device
    found: list[dict[int, list[int]]] = [{} for _ in ablations]
    for batch in batches:
        src, b = batch.src.to(device), batch.src.size(0)
        for group in _passes(len(ablations), b, max_rows):
            n = len(group)
            masks = stacked_head_mask(c, [ablations[i] for i in group], b, device=device)
            tokens = model.generate(src.repeat(n, 1), max_len=max_len, head_mask=masks)  # (n*B, L')
            for i, rows in zip(group, tokens.view(n, b, -1)):
                for index, ids in zip(batch.index.tolist(), model.generated_ids(rows)):
                    found[i][index] = ids
        if progress is not None:
            progress(b)
    return [[by_index[i] for i in range(len(by_index))] for by_index in found]


def _batches(
    pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, batch_size: int
) -> list[Batch]:
    sources = src_tokenizer.encode_batch([p.source for p in pairs])
    targets = tgt_tokenizer.encode_batch([p.target for p in pairs])
    return list(length_sorted_batches(sources, targets, batch_size))


@dataclass
class HeadImportance:
    """Every head's single-head ablation figures, and the intact model's for comparison.

    ``scores`` and ``baseline_scores`` are None when no sentences were decoded (loss only).
    """

    heads: list[Head]
    baseline_loss: float
    losses: list[float]  # per head, NLL per target token with that head silenced
    num_loss_sentences: int
    baseline_scores: TranslationScores | None = None
    scores: list[TranslationScores] | None = None  # per head, on the first num_decoded_sentences pairs

    @property
    def num_decoded_sentences(self) -> int:
        return 0 if self.baseline_scores is None else self.baseline_scores.num_sentences

    def delta_loss(self) -> list[float]:
        """Each head's importance: how much the loss grows when it is silenced (negative: the model gains)."""
        return [loss - self.baseline_loss for loss in self.losses]

    def ranking(self) -> list[Head]:
        """The heads from least to most important (ties keep model order)."""
        order = sorted(range(len(self.heads)), key=self.delta_loss().__getitem__)
        return [self.heads[i] for i in order]

    def matrix(self, kind: str, values: Sequence[float]) -> Tensor:
        """One value per head (in ``heads`` order) as the (L, H) matrix of one kind."""
        chosen = [(h, v) for h, v in zip(self.heads, values) if h.kind == kind]
        layers, width = 1 + max(h.layer for h, _ in chosen), 1 + max(h.head for h, _ in chosen)
        out = torch.full((layers, width), float("nan"))
        for head, value in chosen:
            out[head.layer, head.head] = value
        return out

    def rows(self) -> list[dict]:
        """One dict per head: rank, loss and (when decoded) BLEU, chrF and exact match, with their changes."""
        rank = {head: r for r, head in enumerate(reversed(self.ranking()), start=1)}  # 1 = most important
        out = []
        for i, (head, loss, delta) in enumerate(zip(self.heads, self.losses, self.delta_loss())):
            row = {**head.as_dict(), "rank": rank[head], "nll_per_token": loss, "delta_nll": delta}
            if self.scores is not None and self.baseline_scores is not None:
                s, base = self.scores[i], self.baseline_scores
                row |= {
                    "bleu": s.bleu,
                    "delta_bleu": s.bleu - base.bleu,
                    "exact_match": s.exact_match,
                    "delta_exact_match": s.exact_match - base.exact_match,
                    "chrf": s.chrf,
                    "delta_chrf": s.chrf - base.chrf,
                }
            out.append(row)
        return out

    def as_dict(self) -> dict:
        baseline = {"nll_per_token": self.baseline_loss, "loss_sentences": self.num_loss_sentences}
        if self.baseline_scores is not None:
            baseline |= {
                "bleu": self.baseline_scores.bleu,
                "chrf": self.baseline_scores.chrf,
                "exact_match": self.baseline_scores.exact_match,
                "decoded_sentences": self.num_decoded_sentences,
                "decoding": "greedy",
                "signature": self.baseline_scores.signature,
            }
        return {
            "importance": (
                "delta_nll: increase of the teacher-forced NLL per target token when the head alone is "
                "silenced (Michel et al. 2019); rank 1 = most important head; layers and heads count from 1"
            ),
            "baseline": baseline,
            "heads": self.rows(),
            "delta_nll": {kind: self.matrix(kind, self.delta_loss()).tolist() for kind in KINDS},
            "ranking": [h.as_dict() for h in self.ranking()],
        }

    def table(self) -> str:
        """A plain-text table, kind by kind: layer, head, rank, Δloss, ΔBLEU, ΔEM."""
        decoded = self.scores is not None
        loss, sentences = self.baseline_loss, self.num_loss_sentences
        lines = [f"head importance: NLL per target token {loss:.4f} over {sentences} sentences"]
        if decoded:
            base = self.baseline_scores
            lines[0] += (
                f"; BLEU {base.bleu:.2f}, exact match {100 * base.exact_match:.1f}% over "
                f"{self.num_decoded_sentences} sentences (greedy)"
            )
        lines.append("rank 1 = most important; Δ = with the head silenced minus intact")
        header = f"  {'layer':>5} {'head':>4} {'rank':>4} {'Δloss':>9}" + (
            f" {'ΔBLEU':>7} {'ΔEM':>7}" if decoded else ""
        )
        for kind in KINDS:
            lines += ["", KIND_LABELS[kind], header]
            for row in self.rows():
                if row["kind"] != kind:
                    continue
                line = f"  {row['layer']:>5} {row['head']:>4} {row['rank']:>4} {row['delta_nll']:>+9.4f}"
                if decoded:
                    line += f" {row['delta_bleu']:>+7.2f} {100 * row['delta_exact_match']:>+6.1f}%"
                lines.append(line)
        return "\n".join(lines)


def measure_head_importance(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    *,
    decode_sentences: int | None = None,
    batch_size: int = 64,
    max_rows: int = 256,
    max_len: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> HeadImportance:
    """Silence every head on its own; measure the loss on ``pairs`` and, optionally, greedy translations.

    The loss costs about (1 + number of heads) teacher-forced passes over ``pairs``, the translation scores
    (1 + number of heads) greedy decodings of the first ``decode_sentences`` pairs (None: no decoding), both
    batched ``max_rows // batch_size`` ablations to a pass. ``progress`` is called with sentence counts.
    """
    if not pairs:
        raise AnalysisError("no sentences to measure head importance on")
    heads = all_heads(model.config)
    ablations: list[Collection[Head]] = [(), *[(h,) for h in heads]]  # the intact model first
    losses = ablation_losses(
        model,
        _batches(pairs, src_tokenizer, tgt_tokenizer, batch_size),
        ablations,
        max_rows=max_rows,
        progress=progress,
    )
    importance = HeadImportance(heads, losses[0], losses[1:], len(pairs))
    if decode_sentences:
        decoded = pairs[:decode_sentences]
        translations = ablation_translations(
            model,
            _batches(decoded, src_tokenizer, tgt_tokenizer, batch_size),
            ablations,
            max_rows=max_rows,
            max_len=max_len,
            progress=progress,
        )
        references = [p.target for p in decoded]
        scores = [
            score_translations([tgt_tokenizer.decode(ids) for ids in hyps], references)
            for hyps in translations
        ]
        importance.baseline_scores, importance.scores = scores[0], scores[1:]
    return importance


# -- pruning -------------------------------------------------------------------------------------------------


def pruned_loss(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    silenced: Collection[Head],
    *,
    batch_size: int = 64,
) -> float:
    """Teacher-forced NLL per target token on ``pairs`` with the ``silenced`` heads silenced together."""
    batches = _batches(pairs, src_tokenizer, tgt_tokenizer, batch_size)
    return ablation_losses(model, batches, [tuple(silenced)], max_rows=batch_size)[0]


def parse_prune_count(text: str) -> int | float:
    """``--prune-heads``: a whole number of heads, or a fraction in (0, 1) of all heads."""
    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number of heads or a fraction in (0, 1), got {text!r}") from None
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ValueError(f"a fraction of heads must be in (0, 1), got {text}")
    if value < 0:
        raise ValueError(f"the number of heads must be at least 0, got {value}")
    return value


def prune_count(value: float, total: int) -> int:
    """How many of ``total`` heads ``--prune-heads value`` means; a fraction rounds to the nearest head."""
    if isinstance(value, float):
        return round(value * total)
    if value > total:
        raise AnalysisError(f"--prune-heads {value}: the model has only {total} heads")
    return value


# -- alignment -----------------------------------------------------------------------------------------------


def check_alignable(pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> None:
    """Raise ``AnalysisError`` unless all pairs have gold links and every word is one token.

    The gold links index words, so token positions must be word positions.
    """
    if not pairs or any(p.alignment is None for p in pairs):
        raise AnalysisError(f"--alignment needs data with gold word alignments ({GOLD_DATASETS})")
    for side, tokenizer, texts in (
        ("source", src_tokenizer, [p.source for p in pairs]),
        ("target", tgt_tokenizer, [p.target for p in pairs]),
    ):
        for number, (text, ids) in enumerate(zip(texts, tokenizer.encode_batch(texts)), start=1):
            if len(ids) != len(text.split()):
                raise AnalysisError(
                    f"--alignment needs one token per word (the gold links index words), but {side} "
                    f"sentence {number} has {len(text.split())} words and {len(ids)} tokens "
                    f"({tokenizer.kind} tokenizer)"
                )


@dataclass
class AlignmentReport:
    """How well cross-attention arg-max alignments match the gold links, per head and for the head average."""

    aer: Tensor  # (L, H)
    agreement: Tensor  # (L, H)
    best: Head  # the head of lowest AER among those not excluded
    average_aer: float  # of the maps averaged over every head that is not excluded
    average_agreement: float
    excluded: list[Head]  # silenced heads, left out of the best head and the average

    def as_dict(self) -> dict:
        return {
            "best_head": {
                **self.best.as_dict(),
                "aer": float(self.aer[self.best.layer, self.best.head]),
                "agreement": float(self.agreement[self.best.layer, self.best.head]),
            },
            "head_average": {"aer": self.average_aer, "agreement": self.average_agreement},
            "aer": self.aer.tolist(),
            "agreement": self.agreement.tolist(),
            "excluded_heads": [h.as_dict() for h in self.excluded],
        }


@torch.no_grad()
def cross_attention_alignment(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    *,
    batch_size: int = 64,
    silenced: Collection[Head] = (),
) -> AlignmentReport:
    """Alignment error rate and agreement of every cross-attention head, teacher-forced on the references.

    Target word j is decoder query j (the position that predicts it) and source word i is key i, so the
    arg-max of a head's row j is its alignment of word j (analysis.heads). ``silenced`` heads run silenced, as
    in pruning, and are left out of the best head and of the head average. Every sentence's maps are held at
    once, N × L × H × T × S floats: fine for the short sentences of the toy tasks.
    """
    check_alignable(pairs, src_tokenizer, tgt_tokenizer)
    c, device = model.config, model.device
    mask = head_mask(c, silenced, device=device)
    keep = mask.cross.bool().cpu()  # (L, H)
    if not keep.any():
        raise AnalysisError("--alignment: every cross-attention head is silenced")
    batches = _batches(pairs, src_tokenizer, tgt_tokenizer, batch_size)
    n, s_max = len(pairs), max(b.src.size(1) for b in batches)
    t_max = max(b.tgt_in.size(1) for b in batches)
    L, H = keep.shape
    maps = torch.zeros(n, L, H, t_max, s_max)  # every sentence's cross-attention, padded to the longest
    src_valid = torch.zeros(n, s_max, dtype=torch.bool)
    tgt_valid = torch.zeros(n, t_max, dtype=torch.bool)
    for batch in batches:
        _, attention = model(
            batch.src.to(device), batch.tgt_in.to(device), return_attention=True, head_mask=mask
        )
        t, s = batch.tgt_in.shape[1], batch.src.shape[1]
        maps[batch.index, :, :, :t, :s] = torch.stack(attention.cross, dim=1).float().cpu()  # (B, L, H, T, S)
        src_valid[batch.index, :s] = batch.src != c.pad_id
        tgt_valid[batch.index, :t] = batch.tgt_out != c.pad_id
    gold = [set(p.alignment) for p in pairs]
    folded = maps.view(n, L * H, t_max, s_max)  # layers folded into heads
    aer = alignment_error_rate(folded, gold, tgt_valid, src_valid).view(L, H)
    agreement = alignment_agreement(folded, gold, tgt_valid, src_valid).view(L, H)
    average = folded[:, keep.flatten()].mean(dim=1, keepdim=True)  # (N, 1, T, S): one "head"
    best = int(aer.masked_fill(~keep, float("inf")).flatten().argmin())
    return AlignmentReport(
        aer=aer,
        agreement=agreement,
        best=Head("cross", best // H, best % H),
        average_aer=float(alignment_error_rate(average, gold, tgt_valid, src_valid)),
        average_agreement=float(alignment_agreement(average, gold, tgt_valid, src_valid)),
        excluded=sorted(h for h in silenced if h.kind == "cross"),
    )


# -- files ---------------------------------------------------------------------------------------------------


def importance_paths(directory: Path, name: str) -> dict[str, Path]:
    """Where :func:`write_importance` writes: "json" and one heatmap per kind."""
    return {
        "json": directory / f"head_importance_{name}.json",
        **{kind: directory / f"head_importance_{name}_{kind}.png" for kind in KINDS},
    }


def write_importance(
    importance: HeadImportance, paths: dict[str, Path], *, about: dict | None = None
) -> None:
    """Write the JSON (with ``about``: what was measured on what) and the layers × heads Δloss heatmaps.

    The three heatmaps share one colour scale, centred on 0 (red: the loss grows without the head), so that
    heads of different kinds compare at a glance.
    """
    from analysis.plots import layer_head_matrix  # matplotlib only when needed

    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    paths["json"].write_text(
        json.dumps({**(about or {}), **importance.as_dict()}, indent=1) + "\n", encoding="utf-8"
    )
    deltas = importance.delta_loss()
    limit = max(max(abs(d) for d in deltas), 1e-6)
    fmt = ".3f" if limit < 10 else ".1f"
    for kind in KINDS:
        title = f"{KIND_LABELS[kind]}: Δloss"  # the figure may be narrow: 2 heads make it 3 inches wide
        figure = layer_head_matrix(
            importance.matrix(kind, deltas), title, vmin=-limit, vmax=limit, fmt=fmt, cmap="RdBu_r"
        )
        figure.savefig(paths[kind], dpi=120)
