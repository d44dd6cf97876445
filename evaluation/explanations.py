"""Explanations of teacher-forced translations: run the model once per batch, hand its tensors to
``analysis.explain``, and score every method against gold alignments over a corpus.

Shape legend: B batch, L layers, H heads, S source length, T target length, D model dim, V vocabulary size.

The model is read, never changed: what the methods need comes from its explicit return values (attention maps,
per-layer decoder outputs), ``MultiHeadAttention.project_values`` and ``encode(token_embeddings=...)``.
"""

import dataclasses
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from analysis.explain.logit_lens import FinalNorm, LogitLens, logit_lens
from analysis.explain.registry import METHODS, explain
from analysis.explain.scores import AlignmentCounts, AlignmentScores, count_alignment
from analysis.explain.trace import Explanation, Trace, layer_names
from data.batching import collate
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.alignment import check_alignable
from evaluation.translate import pair_batches
from model import Transformer


def _log_probs(model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor):
    """The ``Trace.log_probs`` of a batch: the target log-probabilities of the given rows, given source
    embeddings."""

    def log_probs(embeddings: Tensor, rows: Tensor) -> Tensor:
        rows = rows.to(src.device)
        with torch.autocast(src.device.type, enabled=False):  # gradients in full precision, like the maps
            encoded = model.encode(src[rows], token_embeddings=embeddings)
            logits = model.decode(tgt_in[rows], encoded).logits  # (N, T, V)
        labels = tgt_out[rows].unsqueeze(-1)  # (N, T, 1)
        return logits.float().log_softmax(dim=-1).gather(-1, labels).squeeze(-1)  # (N, T)

    return log_probs


@torch.no_grad()
def trace_batch(
    model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, *, gradients: bool = True
) -> tuple[Trace, list[Tensor]]:
    """One teacher-forced pass of a padded batch (``data.batching.Batch``'s fields) in full precision.

    Returns the ``Trace`` (with the callable the gradient methods need if ``gradients``) and the decoder
    layers' outputs (per layer (B, T, D)) for the logit lens. The model must be in eval mode: explanations of
    a dropped-out pass would differ from run to run.
    """
    if model.training:
        raise ValueError("explanations need the model in eval mode (model.eval())")
    c, device = model.config, model.device
    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
    with torch.autocast(device.type, enabled=False):
        encoded = model.encode(src, need_weights=True)
        out = model.decode(tgt_in, encoded, need_weights=True, need_hidden=True)
        values = [layer.cross_attn.project_values(encoded.memory) for layer in model.decoder_layers]
    src_valid = src != c.pad_id
    trace = Trace(
        cross=out.cross_attention,
        encoder=encoded.attention,
        src_valid=src_valid,
        tgt_valid=tgt_out != c.pad_id,
        cross_values=values,
        cross_out_weights=[layer.cross_attn.out_proj.weight for layer in model.decoder_layers],
        src_words=src_valid & (src != c.eos_id) & (src != c.bos_id),
        embeddings=model.src_embed(src) if gradients else None,
        log_probs=_log_probs(model, src, tgt_in, tgt_out) if gradients else None,
    )
    return trace, list(out.hidden)


def lens_of(model: Transformer, hidden: list[Tensor], produced: Tensor, top_k: int = 3) -> LogitLens:
    """The logit lens of ``trace_batch``'s decoder outputs, following the tokens ``produced`` (B, T)."""
    norm = model.decoder_norm
    final_norm = FinalNorm(norm.weight, norm.bias, norm.eps) if isinstance(norm, torch.nn.LayerNorm) else None
    weight = model.tgt_embed.weight if model.output_proj is None else model.output_proj.weight
    return logit_lens(hidden, weight, produced.to(weight.device), final_norm=final_norm, top_k=top_k)


def explain_batch(trace: Trace, methods: Sequence[str], options: dict[str, dict] | None = None) -> dict:
    """name -> Explanation for each of ``methods``; ``options``: name -> keyword arguments of that method."""
    options = options or {}
    return {name: explain(name, trace, **options.get(name, {})) for name in methods}


def explanation_alignment(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    *,
    methods: Sequence[str] = tuple(METHODS),
    options: dict[str, dict] | None = None,
    batch_size: int = 32,
    progress=None,
    option: str = "alignment scores",
) -> dict[str, AlignmentScores]:
    """AER and agreement of every method against the pairs' gold links, per layer and per head, under forced
    decoding of the references.

    Returns method -> its scores, with ``seconds`` its own time after the shared forward pass. ``progress``
    is called with the number of sentences done after each batch; ``option`` names the caller in the error
    about data without gold links.
    """
    check_alignable(pairs, src_tokenizer, tgt_tokenizer, option)
    methods = list(methods)
    gradients = any(METHODS[name].gradients for name in methods)
    counts: dict[str, AlignmentCounts] = {}
    layers: dict[str, tuple[str, ...]] = {}
    seconds = dict.fromkeys(methods, 0.0)
    options = options or {}
    for batch in pair_batches(pairs, src_tokenizer, tgt_tokenizer, batch_size):
        trace, _ = trace_batch(model, batch.src, batch.tgt_in, batch.tgt_out, gradients=gradients)
        gold = [set(pairs[i].alignment) for i in batch.index.tolist()]
        for name in methods:
            start = time.perf_counter()
            explanation = explain(name, trace, **options.get(name, {}))
            batch_counts = count_alignment(explanation, gold)
            seconds[name] += time.perf_counter() - start
            counts[name] = batch_counts if name not in counts else counts[name] + batch_counts
            layers[name] = explanation.layers
        if progress is not None:
            progress(len(batch.index))
    return {name: dataclasses.replace(counts[name].scores(layers[name]), seconds=seconds[name])
            for name in methods}


def sentence_explanations(
    model: Transformer,
    src_ids: list[int],
    tgt_ids: list[int],
    *,
    methods: Sequence[str] = tuple(METHODS),
    options: dict[str, dict] | None = None,
    top_k: int = 3,
    finished: bool = True,
) -> tuple[dict[str, Explanation], LogitLens]:
    """Every method and the logit lens of one sentence pair (ids without BOS/EOS): the reference, or the
    model's own translation.

    Rows are the tokens produced: ``tgt_ids`` then EOS. ``finished=False`` marks a hypothesis cut by a length
    limit without EOS (as ``viz.maps.sentence_attention`` takes it): its rows are
    ``tgt_ids`` alone, the decoder reading BOS and every token but the last.
    """
    c = model.config
    capped = bool(tgt_ids) and not finished
    item = (0, src_ids, tgt_ids[:-1] if capped else tgt_ids)
    batch = collate([item], pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id)
    if capped:  # the last row produced the last generated token, not EOS
        batch.tgt_out[0, -1] = tgt_ids[-1]
    methods = list(methods)
    trace, hidden = trace_batch(
        model, batch.src, batch.tgt_in, batch.tgt_out, gradients=any(METHODS[m].gradients for m in methods)
    )
    return explain_batch(trace, methods, options), lens_of(model, hidden, batch.tgt_out, top_k)


def lens_record(lens: LogitLens, tokenizer: Tokenizer, sentence: int = 0, decimals: int = 4) -> dict:
    """One sentence's logit lens as JSON-ready lists: {"layers": [L labels], "top_tokens": L × T × k strings,
    "top_probs": L × T × k, "produced_prob": L × T, "produced_rank": L × T ints}; probabilities rounded to
    ``decimals``. Rows T are those of the lens (the tokens produced)."""
    top_ids = lens.top_ids[sentence].tolist()  # (L, T, k)
    return {
        "layers": list(layer_names(len(top_ids))),
        "top_tokens": [[tokenizer.tokens(ids) for ids in layer] for layer in top_ids],
        "top_probs": lens.top_probs[sentence].double().round(decimals=decimals).tolist(),
        "produced_prob": lens.produced_prob[sentence].double().round(decimals=decimals).tolist(),
        "produced_rank": lens.produced_rank[sentence].tolist(),
    }
