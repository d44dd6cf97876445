"""Cross-attention alignment: how well each cross-attention head's arg-max matches gold word alignments.

Shape legend: N sentences, L layers, H heads, S source length, T target length.

Layers and heads are counted from 0 in code and from 1 in everything shown to people (tables, figures, JSON).
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analysis.heads import alignment_agreement, alignment_error_rate
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.ablation import AnalysisError
from evaluation.forced import forced_pass
from evaluation.head_masks import Head, head_mask
from evaluation.translate import pair_batches
from model import Transformer

GOLD_DATASETS = "toy, copy, reverse"


def check_alignable(
    pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, option: str = "--alignment"
) -> None:
    """Raise ``AnalysisError`` unless all pairs have gold links and every word is one token.

    The gold links index words, so token positions must be word positions. ``option`` names what asked.
    """
    if not pairs or any(p.alignment is None for p in pairs):
        # Explanation methods are also scored on a human gold set's words, which other pairs lack.
        gold = "; for other pairs, give a gold set: --gold-alignments LINKS --gold-sentences FILE" \
            if option == "explain" else ""
        raise AnalysisError(f"{option} needs data with gold word alignments ({GOLD_DATASETS}){gold}")
    _check_one_token_per_word(pairs, src_tokenizer, tgt_tokenizer, option)


def one_token_per_word(pairs: Sequence[Pair], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> bool:
    """Whether every word of ``pairs`` (``Pair.words``) is one token, so that links index token positions."""
    try:
        _check_one_token_per_word(pairs, src_tokenizer, tgt_tokenizer, "")
    except AnalysisError:
        return False
    return True


def _check_one_token_per_word(pairs, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, option: str) -> None:
    for side, tokenizer in (("source", src_tokenizer), ("target", tgt_tokenizer)):
        texts = [getattr(p, side) for p in pairs]
        for number, (pair, ids) in enumerate(zip(pairs, tokenizer.encode_batch(texts)), start=1):
            words = pair.words(side)  # listed where the side is written without spaces (the Han-script toy)
            if len(ids) != len(words):
                raise AnalysisError(
                    f"{option} needs one token per word (the gold links index words), but {side} "
                    f"sentence {number} has {len(words)} words and {len(ids)} tokens "
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
    batches = pair_batches(pairs, src_tokenizer, tgt_tokenizer, batch_size)
    n, s_max = len(pairs), max(b.src.size(1) for b in batches)
    t_max = max(b.tgt_in.size(1) for b in batches)
    L, H = keep.shape
    maps = torch.zeros(n, L, H, t_max, s_max)  # every sentence's cross-attention, padded to the longest
    src_valid = torch.zeros(n, s_max, dtype=torch.bool)
    tgt_valid = torch.zeros(n, t_max, dtype=torch.bool)
    for batch in batches:
        cross = forced_pass(model, batch, head_mask=mask).maps["cross"]
        t, s = batch.tgt_in.shape[1], batch.src.shape[1]
        maps[batch.index, :, :, :t, :s] = torch.stack(cross, dim=1).cpu()  # (B, L, H, T, S)
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
