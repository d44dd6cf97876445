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
* **steps** (IG): 32 Gauss–Legendre points (Captum's default rule); ``steps`` sets more.
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


def _reduce(attributions: Tensor, reduction: Reduction) -> Tensor:
    """(..., S, D) → (..., S)."""
    if reduction == "norm":
        return attributions.norm(dim=-1)
    if reduction == "sum":
        return attributions.sum(dim=-1)
    raise ValueError(f"unknown reduction {reduction!r}; expected 'norm' or 'sum'")


def _per_target(log_probs: LogProbs, b: int):
    """Captum's forward function: (N, S, D) embeddings → (N, T) log-probabilities; row n's target is chosen by
    Captum's ``target`` list, so T copies of a sentence explain its T target tokens in one call."""

    def forward(embeddings: Tensor) -> Tensor:
        return log_probs(embeddings, b)

    return forward


def gradient_x_input_rows(
    log_probs: LogProbs, embeddings: Tensor, b: int, rows: int, attribute: Tensor
) -> Tensor:
    """Gradient × input of sentence b's first ``rows`` target tokens: embeddings (S, D), attribute (S,) bool
    → (rows, S, D), zero at positions not attributed."""
    from captum.attr import InputXGradient  # imported here: Captum is needed only for these methods

    e = embeddings.detach().float()
    inputs = e.unsqueeze(0).expand(rows, -1, -1).clone().requires_grad_()  # (rows, S, D)
    attributions = InputXGradient(_per_target(log_probs, b)).attribute(inputs, target=list(range(rows)))
    return attributions * attribute[None, :, None]  # (rows, S, D)


def integrated_gradients_rows(
    log_probs: LogProbs,
    embeddings: Tensor,
    b: int,
    rows: int,
    attribute: Tensor,
    *,
    baseline: Tensor | None = None,
    steps: int = 32,
    internal_batch_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Integrated Gradients of sentence b's first ``rows`` target tokens.

    Args:
        embeddings: (S, D) the sentence's source token embeddings.
        attribute: (S,) bool, the positions attributed; the others keep their embedding in the baseline.
        baseline: (S, D) the attributed positions' baseline; None = zeros (the ``<pad>`` embedding).
        steps: points of the path integral (Gauss–Legendre).
        internal_batch_size: most rows per forward pass (None = rows × steps at once).

    Returns:
        attributions (rows, S, D), and Captum's convergence delta (rows,): the sum of a row's attributions
        minus f_t(e) − f_t(e'), which is 0 for an exact integral.
    """
    from captum.attr import IntegratedGradients

    if steps < 1:
        raise ValueError(f"Integrated Gradients needs at least 1 step, got {steps}")
    e = embeddings.detach().float()
    base = torch.zeros_like(e) if baseline is None else baseline.detach().float()
    base = torch.where(attribute[:, None], base, e)  # (S, D): special tokens stay themselves
    inputs = e.unsqueeze(0).expand(rows, -1, -1).clone().requires_grad_()  # (rows, S, D)
    baselines = base.unsqueeze(0).expand(rows, -1, -1).clone()  # (rows, S, D)
    attributions, delta = IntegratedGradients(_per_target(log_probs, b)).attribute(
        inputs, baselines=baselines, target=list(range(rows)), n_steps=steps,
        internal_batch_size=internal_batch_size, return_convergence_delta=True,
    )
    return attributions, delta


def _gradient_explanation(
    name: str, trace: Trace, reduction: Reduction, attribute: Tensor | None, rows_of
) -> Explanation:
    if trace.embeddings is None or trace.log_probs is None:
        raise ValueError(f"{name} needs the trace's embeddings and log_probs")
    attribute = trace.words if attribute is None else attribute & trace.src_valid  # (B, S)
    B, T = trace.tgt_valid.shape
    S = trace.src_valid.size(1)
    scores = torch.zeros(B, 1, T, S)
    for b in range(B):
        rows = int(trace.tgt_valid[b].sum())  # targets are right-padded: the real rows come first
        if rows:
            attributions = rows_of(trace.log_probs, trace.embeddings[b], b, rows, attribute[b])
            scores[b, 0, :rows] = _reduce(attributions.detach().float(), reduction).cpu()
    scores = zero_invalid(scores, trace.src_valid.cpu(), trace.tgt_valid.cpu())  # (B, 1, T, S)
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
    return _gradient_explanation("grad_x_input", trace, reduction, attribute, gradient_x_input_rows)


def integrated_gradients(
    trace: Trace,
    *,
    reduction: Reduction = "norm",
    attribute: Tensor | None = None,
    baseline: Tensor | None = None,
    steps: int = 32,
    internal_batch_size: int | None = None,
) -> Explanation:
    """Integrated Gradients of every target token's log-probability, per source token (one "layer":
    embeddings). ``baseline``: (B, S, D) for the attributed positions; None = zeros (see the module's
    docstring)."""

    def rows_of(log_probs, embeddings, b, rows, attribute_b):
        return integrated_gradients_rows(
            log_probs, embeddings, b, rows, attribute_b, baseline=None if baseline is None else baseline[b],
            steps=steps, internal_batch_size=internal_batch_size,
        )[0]

    return _gradient_explanation("integrated_gradients", trace, reduction, attribute, rows_of)
