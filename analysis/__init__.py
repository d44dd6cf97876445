"""Looking inside the Transformer: per-head attention statistics, figures and an interactive head view; and
the numbers training, evaluation and benchmarks share: translation scores and matmul FLOP counts.

Works on plain tensors, strings and lists of token strings; it imports neither the model nor the data code.
Import the module you need (``analysis.heads``, ``analysis.plots``, ``analysis.headview``, ``analysis.axes``,
``analysis.metrics``, ``analysis.flops``, ``analysis.explain``): this package imports nothing itself, so that
light users (TensorBoard's ATTENTION tab) do not pay for matplotlib.
"""
