"""Gradient attributions of each target token's log-probability to the source token embeddings, with Captum.

Under teacher forcing of a target y, f_t(e) = log p(y_t | y_<t, x) is a function of the source token
embeddings e (S, D); both methods attribute it to each source token (Ding et al. 2019 align words with
such saliency):

* gradient × input: ∂f_t/∂e_j ⊙ e_j (Captum ``InputXGradient``);
* Integrated Gradients (Sundararajan et al. 2017): (e_j − e'_j) ⊙ ∫ ∂f_t/∂e_j along the straight path from
  a baseline e' to e (Captum ``IntegratedGradients``); the attributions sum to f_t(e) − f_t(e')
  (completeness).

Choices the papers leave open, and what is chosen here (each a parameter):

* **baseline** (IG): the zero vector for every attributed token, which is also the embedding of ``<pad>``
  (its row is initialised to zero and never trained), i.e. "no token here"; positions are not part of the
  embedding, so the baseline keeps the sentence's length and positions.
* **special tokens**: only the source *words* are attributed (``Trace.words``); EOS keeps its embedding in the
  baseline and gets 0, so a method cannot send every row to EOS the way attention often does (Ferrando &
  Costa-jussà 2021). ``attribute`` chooses other positions.
* **ig_steps** (IG): ``IG_STEPS`` Gauss–Legendre points (Captum's default rule); ``ig_steps`` sets others.
* **reduction** of a token's D attributions to one score: ``"norm"`` (the L2 norm, inseq's default
  aggregation: how much the token matters, either way), or ``"sum"`` (signed; with IG the rows then sum to
  f_t(e) − f_t(e')).

Shape legend: see ``analysis.explain``.
"""

from typing import Literal

import torch
from torch import Tensor

from analysis.explain.trace import Explanation, LogProbs, Trace, zero_invalid

Reduction = Literal["norm", "sum"]

# Integrated Gradients' points of the path integral, named once. Each point is a forward and backward pass per
# row, and Captum builds its Gauss-Legendre table from a steps x steps matrix (100000 steps: 74.5 GiB);
# 32 points integrate a polynomial of degree 63 exactly.
MAX_IG_STEPS = 32  # the most a user may ask (evaluate.py --ig-steps, the ATTENTION tab's ig_steps)
IG_STEPS = 32  # the scores evaluate.py reports, and this module's default
IG_STEPS_PREVIEW = 8  # during training (viz.logger) and for a typed sentence in the tab: the arg-max
# alignment the maps are read by settles with far fewer points than the integral does


def _reduce(attributions: Tensor, reduction: Reduction) -> Tensor:
    """(..., S, D) → (..., S)."""
    if reduction == "norm":
        return attributions.norm(dim=-1)
    if reduction == "sum":
        return attributions.sum(dim=-1)
    raise ValueError(f"unknown reduction {reduction!r}; expected 'norm' or 'sum'")


def gradient_x_input_rows(
    log_probs: LogProbs, inputs: Tensor, sentences: Tensor, targets: Tensor, attribute: Tensor
) -> Tensor:
    """Gradient × input of N (sentence, target position) rows in one backward pass.

    Args:
        log_probs: see ``Trace.log_probs``.
        inputs: (N, S, D) each row's source token embeddings (its sentence's).
        sentences: (N,) int64, each row's sentence in the traced batch.
        targets: (N,) int64, each row's target position, whose log-probability is attributed.
        attribute: (N, S) bool, the positions attributed; the others get 0.

    Returns:
        (N, S, D) attributions.
    """
    from captum.attr import InputXGradient  # imported here: Captum is needed only for these methods

    inputs = inputs.detach().float().clone().requires_grad_()  # (N, S, D)
    attributions = InputXGradient(log_probs).attribute(inputs, additional_forward_args=(sentences, targets))
    return attributions * attribute[:, :, None]  # (N, S, D)


def integrated_gradients_rows(
    log_probs: LogProbs,
    inputs: Tensor,
    sentences: Tensor,
    targets: Tensor,
    attribute: Tensor,
    *,
    baseline: Tensor | None = None,
    ig_steps: int = IG_STEPS,
    internal_batch_size: int | None = 512,
) -> tuple[Tensor, Tensor]:
    """Integrated Gradients of N (sentence, target position) rows.

    Args:
        inputs, sentences, targets, attribute: as for ``gradient_x_input_rows``; positions not attributed keep
            their embedding in the baseline.
        baseline: (N, S, D) the attributed positions' baseline; None = zeros (the ``<pad>`` embedding).
        ig_steps: points of the path integral (Gauss–Legendre).
        internal_batch_size: most rows per forward pass (of N × ig_steps in all); None = all at once.

    Returns:
        attributions (N, S, D), and Captum's convergence delta (N,): the sum of a row's attributions minus
        f_t(e) − f_t(e'), which is 0 for an exact integral.
    """
    from captum.attr import IntegratedGradients

    if ig_steps < 1:
        raise ValueError(f"Integrated Gradients needs at least 1 step, got {ig_steps}")
    e = inputs.detach().float()
    base = torch.zeros_like(e) if baseline is None else baseline.detach().float()
    base = torch.where(attribute[:, :, None], base, e)  # (N, S, D): positions not attributed stay themselves
    # Captum takes at least every row once per pass, and warns when asked for fewer: ask for what it does.
    batch = None if internal_batch_size is None else max(internal_batch_size, len(targets))
    attributions, delta = IntegratedGradients(log_probs).attribute(
        e.clone().requires_grad_(), baselines=base, additional_forward_args=(sentences, targets),
        n_steps=ig_steps, internal_batch_size=batch,
        return_convergence_delta=True,
    )
    return attributions, delta


# Each row runs the model again on its sentence under autograd, so a backward pass holds the activations of
# (S + T) tokens per row, and the logits of T: rows go through in passes of at most this many tokens (about
# 2 GB at d_model 256 and 8,000 subwords; the toy's short sentences: about 500 rows a pass). Real sentences
# (KFTT's: up to 141 words) held 18 GB for one batch of target rows at once.
MAX_ROW_TOKENS = 4_096


def rows_per_pass(target_length: int, source_length: int) -> int:
    """How many (sentence, target position) rows one backward pass takes, under ``MAX_ROW_TOKENS``."""
    return max(1, MAX_ROW_TOKENS // (target_length + source_length))


def attribution_rows(tgt_valid: Tensor) -> tuple[Tensor, Tensor]:
    """(sentences, targets), each (N,) int64: every real target position of the batch, one row each."""
    sentences, targets = tgt_valid.nonzero(as_tuple=True)
    return sentences, targets


def _gradient_explanation(
    name: str, trace: Trace, reduction: Reduction, attribute: Tensor | None, rows_of
) -> Explanation:
    if trace.embeddings is None or trace.log_probs is None:
        raise ValueError(f"{name} needs the trace's embeddings and log_probs")
    attribute = trace.words if attribute is None else attribute & trace.src_valid  # (B, S)
    B, T = trace.tgt_valid.shape
    scores = torch.zeros(B, 1, T, trace.src_valid.size(1), device=trace.embeddings.device)  # (B, 1, T, S)
    sentences, targets = attribution_rows(trace.tgt_valid)
    per_pass = rows_per_pass(T, trace.src_valid.size(1))
    for start in range(0, sentences.numel(), per_pass):
        s, t = sentences[start:start + per_pass], targets[start:start + per_pass]  # (n,) each
        attributions = rows_of(trace.embeddings[s], s, t, attribute[s])  # (n, S, D)
        scores[s, 0, t] = _reduce(attributions.detach().float(), reduction)  # (n, S)
    scores = zero_invalid(scores, trace.src_valid, trace.tgt_valid).cpu()  # (B, 1, T, S)
    return Explanation(
        name, scores, None, ("embeddings",), trace.src_valid.cpu(), trace.tgt_valid.cpu(),
        signed=reduction == "sum",
    )


def gradient_x_input(
    trace: Trace, *, reduction: Reduction = "norm", attribute: Tensor | None = None
) -> Explanation:
    """Gradient × input of every target token's log-probability, per source token (one "layer": embeddings).

    ``attribute``: (B, S) bool, the source positions attributed (default: the words, without EOS).
    """

    def rows_of(inputs, sentences, targets, attribute_rows):
        return gradient_x_input_rows(trace.log_probs, inputs, sentences, targets, attribute_rows)

    return _gradient_explanation("grad_x_input", trace, reduction, attribute, rows_of)


def integrated_gradients(
    trace: Trace,
    *,
    reduction: Reduction = "norm",
    attribute: Tensor | None = None,
    baseline: Tensor | None = None,
    ig_steps: int = IG_STEPS,
    internal_batch_size: int | None = 512,
) -> Explanation:
    """Integrated Gradients of every target token's log-probability, per source token (one "layer":
    embeddings). ``baseline``: (B, S, D) for the attributed positions; None = zeros (see the module's
    docstring). ``internal_batch_size`` bounds the rows (each at one of the ``ig_steps`` points) of one
    forward pass, and so the memory, as does ``MAX_ROW_TOKENS``; None: each pass takes a whole pass of rows
    (:func:`rows_per_pass`) at every point at once."""

    per_pass = rows_per_pass(*trace.tgt_valid.shape[1:], trace.src_valid.size(1))

    def rows_of(inputs, sentences, targets, attribute_rows):  # at most per_pass of the rows × steps a pass
        per_pass_rows = None if internal_batch_size is None else min(internal_batch_size, per_pass)
        return integrated_gradients_rows(
            trace.log_probs, inputs, sentences, targets, attribute_rows,
            baseline=None if baseline is None else baseline[sentences], ig_steps=ig_steps,
            internal_batch_size=per_pass_rows,
        )[0]

    return _gradient_explanation("integrated_gradients", trace, reduction, attribute, rows_of)
