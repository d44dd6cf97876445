"""Looking inside the Transformer: per-head attention statistics, figures and an interactive head view; and
the numbers training, evaluation and benchmarks share: translation scores and matmul FLOP counts.

Works on plain tensors, strings and lists of token strings; it imports neither the model nor the data code.
"""

from analysis.flops import matmul_flops
from analysis.heads import (
    alignment_agreement,
    alignment_error_rate,
    entropy,
    gold_matrix,
    mean_distance,
    offset_share,
    summarize,
)
from analysis.headview import head_view_data, render_head_view, write_head_view
from analysis.metrics import TranslationScores, score_translations, sentence_chrf
from analysis.plots import attention_grid, attention_heatmap, figure_to_array, layer_head_matrix

__all__ = [
    "TranslationScores",
    "alignment_agreement",
    "alignment_error_rate",
    "attention_grid",
    "attention_heatmap",
    "entropy",
    "figure_to_array",
    "gold_matrix",
    "head_view_data",
    "layer_head_matrix",
    "matmul_flops",
    "mean_distance",
    "offset_share",
    "render_head_view",
    "score_translations",
    "sentence_chrf",
    "summarize",
    "write_head_view",
]
