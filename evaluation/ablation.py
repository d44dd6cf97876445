"""Batched head ablations: the teacher-forced loss and the greedy translations of a model with heads silenced.

Many ablations share one forward pass: a batch of B sentences is repeated C times and every copy gets its own
per-sentence head mask (evaluation.head_masks), so copy i (rows i*B .. (i+1)*B - 1) runs with the heads of
ablation i silenced. What the figures mean is built on top: head importance (evaluation.importance), pruning
(evaluation.pruning); cross-attention alignment (evaluation.alignment) reads the attention maps instead.

Shape legend: B batch, C ablations in one pass, S source length, T target length, V target vocabulary size.
"""

from collections.abc import Callable, Collection, Iterable, Sequence

import torch
import torch.nn.functional as F

from data.batching import Batch
from evaluation.head_masks import Head, stacked_head_mask
from model import Transformer
from model.packing import TokenIndex


class AnalysisError(Exception):
    """A head analysis that cannot run on this model or data; the message is one line."""


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
            rows_src, rows_tgt = src.repeat(n, 1), tgt_in.repeat(n, 1)  # (n*B, S), (n*B, T)
            index = TokenIndex.of(rows_src, rows_tgt, c.pad_id)  # no vocabulary projection for padding
            logits = model(rows_src, rows_tgt, head_mask=masks, tokens=index)  # (N, V)
            targets = index.labels(tgt_out.repeat(n, 1))  # (N,)
            nll = F.cross_entropy(logits.float(), targets, reduction="none")  # (N,)
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
