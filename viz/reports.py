"""The figures of evaluate.py's reports, drawn from the numbers ``evaluation/`` computed, beside the JSON it
wrote: head importance's layers × heads heatmaps; explain's scores, sentences and logit lenses.

Built on ``viz.plots`` and ``viz.explain_figures`` (Agg canvas, no pyplot). Shape legend: L layers, H heads.
"""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from analysis.axes import KIND_LABELS, KINDS
from analysis.word_alignment import EXTRACTIONS
from evaluation.explanation_report import AlignmentMethodsReport, ExplainedSentence
from evaluation.importance import HeadImportance
from evaluation.inputs import write_whole
from viz.explain_figures import logit_lens_figure, methods_figure, scores_figure
from viz.plots import layer_head_matrix


def draw_head_importance(importance: HeadImportance, paths: dict[str, Path]) -> list[Path]:
    """One layers × heads Δloss heatmap per kind, at ``paths[kind]`` (``importance_paths`` names them).

    The three heatmaps share one colour scale, centred on 0 (red: the loss grows without the head), so that
    heads of different kinds compare at a glance.
    """
    deltas = importance.delta_loss()
    limit = max(max(abs(d) for d in deltas), 1e-6)
    fmt = ".3f" if limit < 10 else ".1f"
    for kind in KINDS:
        title = f"{KIND_LABELS[kind]}: Δloss"  # the figure may be narrow: 2 heads make it 3 inches wide
        figure = layer_head_matrix(
            importance.matrix(kind, deltas), title, vmin=-limit, vmax=limit, fmt=fmt, cmap="RdBu_r"
        )
        _save(figure, paths[kind], dpi=120)
    return [paths[kind] for kind in KINDS]


def draw_alignment_methods(report: AlignmentMethodsReport) -> list[Path]:
    """Every figure of an ``evaluate.py explain`` report (the files ``evaluation.explanation_report`` lists):
    the methods × layers AER and agreement, each method's AER per head, on a gold set the best AER of each
    extraction, and each pictured sentence under every method and through the logit lens."""
    scores = report.scores
    methods = list(scores)
    layers = sorted({row.layer for m in scores.values() for row in m.layers}, key=_layer_order)
    written = []
    for score in ("aer", "agreement"):
        values = np.full((len(methods), len(layers)), np.nan)  # (methods, layers)
        for i, name in enumerate(methods):
            for row in scores[name].layers:
                values[i, layers.index(row.layer)] = getattr(row, score)
        title = f"{'AER' if score == 'aer' else 'agreement'} by method and layer"
        written.append(_save(scores_figure(values, methods, layers, title), report.path(f"_{score}.png")))
    if report.extractions is not None:
        names = list(next(iter(report.extractions.values())))
        values = np.array([[report.extractions[m][e] for e in names] for m in methods])  # (methods, extr.)
        labels = [EXTRACTIONS[e].short for e in names]
        title = "best AER by method and extraction (over layers and heads)"
        figure = scores_figure(values, methods, labels, title)
        written.append(_save(figure, report.path("_extractions.png")))
    for name, method in scores.items():
        if method.heads is not None:
            figure = layer_head_matrix(method.heads.aer, f"{name}: AER per head", vmin=0.0, vmax=1.0,
                                       cmap="viridis_r")
            written.append(_save(figure, report.path(f"_heads_{name}.png")))
    for number, sentence in enumerate(report.sentences, start=1):
        written.append(_save(sentence_methods_figure(sentence), report.path(f"_sentence{number}.png")))
        written.append(_save(sentence_lens_figure(sentence), report.path(f"_sentence{number}_lens.png")))
    return written


def sentence_methods_figure(sentence: ExplainedSentence) -> Figure:
    """The sentence under every method (over its words where it was explained over words), its gold links
    circled."""
    labels = {name: name for name in sentence.explanations}
    source, target = sentence.axes
    return methods_figure(sentence.explanations, labels, source, target,
                          gold=set(sentence.pair.alignment or ()), title=sentence.pair.source)


def sentence_lens_figure(sentence: ExplainedSentence) -> Figure:
    """The sentence's logit lens: each layer's top reading over the probability of the token produced."""
    top_1 = [[readings[0] for readings in layer] for layer in sentence.top_tokens]  # (L, T)
    return logit_lens_figure(sentence.lens.produced_prob[0].numpy(), top_1, sentence.target,
                             sentence.layer_labels, f"logit lens: {sentence.pair.target}")


def _layer_order(label: str) -> tuple[int, str]:
    """"embeddings" first, then layers by number."""
    number = label.rsplit(" ", 1)[-1]
    return (int(number) if number.isdigit() else 0, label)


def _save(figure: Figure, path: Path, **options) -> Path:
    """``figure`` written whole at ``path`` or not at all; a failed write names ``path``."""
    suffix = path.suffix[1:] or "png"  # the staged file's name ends otherwise
    return write_whole(path, lambda staged: figure.savefig(staged, format=suffix, **options))
