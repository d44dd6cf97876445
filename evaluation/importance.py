"""Head importance: how much each attention head is worth, measured by silencing it alone, and its JSON file.

A head's importance is the increase of the teacher-forced loss when it alone is silenced, the measure of
Michel et al. 2019 ("Are Sixteen Heads Really Better than One?", §3); the change in BLEU and exact match of
greedy translations is reported beside it.

Shape legend: L layers, H heads.

Layers and heads are counted from 0 in code and from 1 in everything shown to people (tables, figures, JSON).
"""

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from analysis.axes import KIND_LABELS, KINDS
from analysis.metrics import TranslationScores, score_translations
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.ablation import AnalysisError, ablation_losses, ablation_translations
from evaluation.head_masks import Head, all_heads
from evaluation.inputs import write_whole
from evaluation.translate import pair_batches
from model import Transformer


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
    bleu_tokenize: str | None = None,
) -> HeadImportance:
    """Silence every head on its own; measure the loss on ``pairs`` and, optionally, greedy translations.

    The loss costs about (1 + number of heads) teacher-forced passes over ``pairs``, the translation scores
    (1 + number of heads) greedy decodings of the first ``decode_sentences`` pairs (None: no decoding), both
    batched ``max_rows // batch_size`` ablations to a pass. ``progress`` is called with sentence counts.
    ``bleu_tokenize`` is sacreBLEU's tokenizer of their BLEU (``analysis.metrics.bleu_tokenizer`` of the
    target language: ``zh`` for Chinese), needed with ``decode_sentences``.
    """
    if not pairs:
        raise AnalysisError("no sentences to measure head importance on")
    if decode_sentences and bleu_tokenize is None:
        raise ValueError("decode_sentences needs bleu_tokenize, sacreBLEU's tokenizer of the target language")
    heads = all_heads(model.config)
    ablations: list[Collection[Head]] = [(), *[(h,) for h in heads]]  # the intact model first
    losses = ablation_losses(
        model,
        pair_batches(pairs, src_tokenizer, tgt_tokenizer, batch_size),
        ablations,
        max_rows=max_rows,
        progress=progress,
    )
    importance = HeadImportance(heads, losses[0], losses[1:], len(pairs))
    if decode_sentences:
        decoded = pairs[:decode_sentences]
        translations = ablation_translations(
            model,
            pair_batches(decoded, src_tokenizer, tgt_tokenizer, batch_size),
            ablations,
            max_rows=max_rows,
            max_len=max_len,
            progress=progress,
        )
        references = [p.target for p in decoded]
        scores = [
            score_translations(
                [tgt_tokenizer.decode(ids) for ids in hyps], references, tokenize=bleu_tokenize
            )
            for hyps in translations
        ]
        importance.baseline_scores, importance.scores = scores[0], scores[1:]
    return importance


# -- files ---------------------------------------------------------------------------------------------------


def importance_paths(directory: Path, name: str) -> dict[str, Path]:
    """Where the report's files go: "json" (:func:`write_importance`) and one heatmap per kind
    (``viz.reports.draw_head_importance``)."""
    return {
        "json": directory / f"head_importance_{name}.json",
        **{kind: directory / f"head_importance_{name}_{kind}.png" for kind in KINDS},
    }


def write_importance(
    importance: HeadImportance, paths: dict[str, Path], *, about: dict | None = None
) -> None:
    """Write the JSON (with ``about``: what was measured on what) to ``paths["json"]``; the heatmaps at the
    other paths are ``viz.reports.draw_head_importance``'s to draw."""
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({**(about or {}), **importance.as_dict()}, indent=1) + "\n"
    write_whole(paths["json"], lambda staged: staged.write_text(text, encoding="utf-8"))
