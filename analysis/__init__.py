"""Looking inside the Transformer: per-head attention statistics, figures and an interactive head view.

Works on plain tensors and lists of token strings; it imports neither the model nor the data code.
"""

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
from analysis.plots import attention_grid, attention_heatmap, figure_to_array, layer_head_matrix

__all__ = [
    "alignment_agreement",
    "alignment_error_rate",
    "attention_grid",
    "attention_heatmap",
    "entropy",
    "figure_to_array",
    "gold_matrix",
    "head_view_data",
    "layer_head_matrix",
    "mean_distance",
    "offset_share",
    "render_head_view",
    "summarize",
    "write_head_view",
]
