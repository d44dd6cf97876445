"""Looking inside the Transformer: per-head attention statistics, figures and an interactive head view.

Works on plain tensors and lists of token strings; it imports neither the model nor the data code. Import
the module you need (``analysis.heads``, ``analysis.plots``, ``analysis.headview``, ``analysis.axes``): this
package imports nothing itself, so that light users (TensorBoard's ATTENTION tab) do not pay for matplotlib.
"""
