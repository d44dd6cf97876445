"""Looking inside the Transformer in numbers: per-head attention statistics, how maps are labelled, the
explanation methods; and the numbers training, evaluation and benchmarks share: translation scores and matmul
FLOP counts. The pictures drawn from them live in ``viz``.

Works on plain tensors, strings and lists of token strings; it imports neither the model nor the data code.
Import the module you need (``analysis.heads``, ``analysis.axes``, ``analysis.metrics``, ``analysis.flops``,
``analysis.explain``): this package imports nothing itself, so that light users (TensorBoard's ATTENTION tab)
do not pay for what they do not use.
"""
