"""Every explanation method behind one call: ``explain(name, trace, ig_steps=...)`` → ``Explanation``.

Views and scores take an ``Explanation`` and never ask which method made it. The list of names is defined
here once; evaluation, logging and the ATTENTION tab read it from ``METHODS``, and where they treat a method
apart they read one of its properties (``Method.weights``, ``takes_steps``, ``costly``), never its name.
"""

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from analysis.explain.attention import cross_attention
from analysis.explain.attributions import gradient_x_input, integrated_gradients
from analysis.explain.rollout import rollout_attention
from analysis.explain.shift_att import shifted_attention
from analysis.explain.trace import Explanation, Trace
from analysis.explain.value_norms import value_weighted_attention


@dataclass(frozen=True)
class Method:
    function: Callable[..., Explanation]  # (trace, **options) -> Explanation
    label: str  # shown to people
    _: KW_ONLY
    weights: bool = False  # its maps are the cross-attention weights themselves, as the model computed them
    gradients: bool = False  # needs the trace's embeddings and log_probs (a backward pass per sentence)
    takes_steps: bool = False  # takes ``ig_steps``, the points of a path integral: its cost grows with them
    costly: bool = False  # too slow to score at every validation unless chosen (``viz.logger``)


METHODS: dict[str, Method] = {
    "attention": Method(cross_attention, "cross-attention", weights=True),
    "shift_att": Method(shifted_attention, "shifted attention (Shift-Att)"),
    "value_norms": Method(value_weighted_attention, "value-weighted attention ‖αvW_O‖"),
    "rollout": Method(rollout_attention, "encoder rollout × cross-attention"),
    "grad_x_input": Method(gradient_x_input, "gradient × input", gradients=True),
    # ig_steps backward passes: most of the explanations' time; gradient × input tracked it within 0.04 AER
    # at every validation of a small run.
    "integrated_gradients": Method(integrated_gradients, "Integrated Gradients", gradients=True,
                                   takes_steps=True, costly=True),
}
WEIGHTS = next(name for name, method in METHODS.items() if method.weights)  # the cross weights' own method


def check_methods(names) -> list[str]:
    """The names, checked: a ValueError names the unknown one and lists the known.

    Called once, where a person gave the names (the logger's options; ``evaluate.py explain --methods`` offers
    only these names as its choices); nothing below checks them again.
    """
    names = list(names)
    for name in names:
        if name not in METHODS:
            raise ValueError(f"unknown explanation method {name!r}; expected one of {', '.join(METHODS)}")
    return names


def explain(name: str, trace: Trace, *, ig_steps: int | None = None) -> Explanation:
    """The explanation ``name`` (a key of ``METHODS``, checked by ``check_methods``) of the traced batch.

    ``ig_steps``: the points of the path integral of a method that ``takes_steps`` (its own default if None);
    the other methods take no option.
    """
    options = {"ig_steps": ig_steps} if METHODS[name].takes_steps and ig_steps is not None else {}
    return METHODS[name].function(trace, **options)
