"""Explanations of teacher-forced translations: hand a ``ForcedPass``'s trace to ``analysis.explain``, read
its decoder outputs through the logit lens, and score every method against gold alignments over a corpus.

Shape legend: B batch, L layers, H heads, S source length, T target length, D model dim, V vocabulary size.

Method names arrive checked (``analysis.explain.registry.check_methods``, where a person gave them: the CLI,
the route, the logger's options).
"""

import dataclasses
import time
from collections.abc import Sequence

import torch

from analysis.explain.logit_lens import FinalNorm, LogitLens, logit_lens
from analysis.explain.registry import METHODS, explain
from analysis.explain.scores import AlignmentCounts, AlignmentScores, count_alignment
from analysis.explain.trace import Explanation, layer_names
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.alignment import check_alignable
from evaluation.forced import ForcedPass, forced_pass
from evaluation.translate import pair_batches
from model import Transformer


@torch.no_grad()
def lens_of(model: Transformer, seen: ForcedPass, top_k: int = 3) -> LogitLens:
    """The logit lens of a pass's decoder outputs, following the tokens it produced."""
    norm = model.decoder_norm
    final_norm = FinalNorm(norm.weight, norm.bias, norm.eps) if isinstance(norm, torch.nn.LayerNorm) else None
    weight = model.output_weight
    produced = seen.batch.tgt_out.to(weight.device)  # (B, T)
    return logit_lens(
        list(seen.hidden), weight, produced, final_norm=final_norm, output_bias=model.output_bias, top_k=top_k
    )


def explain_pass(
    seen: ForcedPass, methods: Sequence[str], *, ig_steps: int | None = None
) -> dict[str, Explanation]:
    """name -> Explanation of the pass for each of ``methods`` (names of ``METHODS``, checked where they were
    given); ``ig_steps``: Integrated Gradients' points (its default if None). The gradient methods need a pass
    made outside ``torch.inference_mode``."""
    return {name: explain(name, seen.trace, ig_steps=ig_steps) for name in methods}


def explanation_alignment(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    *,
    methods: Sequence[str] = tuple(METHODS),
    ig_steps: int | None = None,
    batch_size: int = 32,
    progress=None,
    option: str = "alignment scores",
    full_context: int | None = None,
) -> dict[str, AlignmentScores]:
    """AER and agreement of every method against the pairs' gold links, per layer and per head, under forced
    decoding of the references.

    Returns method -> its scores, with ``seconds`` its own time after the shared forward pass. ``progress``
    is called with the number of sentences done after each batch; ``option`` names the caller in the error
    about data without gold links; ``full_context``: the layer read with the whole target (``forced_pass``).
    """
    check_alignable(pairs, src_tokenizer, tgt_tokenizer, option)
    counts: dict[str, AlignmentCounts] = {}
    layers: dict[str, tuple[str, ...]] = {}
    seconds = dict.fromkeys(methods, 0.0)
    for batch in pair_batches(pairs, src_tokenizer, tgt_tokenizer, batch_size):
        trace = forced_pass(model, batch, full_context=full_context).trace
        gold = [set(pairs[i].alignment) for i in batch.index.tolist()]
        for name in methods:
            start = time.perf_counter()
            explanation = explain(name, trace, ig_steps=ig_steps)
            batch_counts = count_alignment(explanation, gold)
            seconds[name] += time.perf_counter() - start
            counts[name] = batch_counts if name not in counts else counts[name] + batch_counts
            layers[name] = explanation.layers
        if progress is not None:
            progress(len(batch.index))
    return {name: dataclasses.replace(counts[name].scores(layers[name]), seconds=seconds[name])
            for name in methods}


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
