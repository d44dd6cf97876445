"""Where attention becomes a picture: every way this project shows a person what the heads do.

One module per picture, from the plainest (tensors in, a figure out) to the ATTENTION tab:

    plots.py            matplotlib figures (Agg, no pyplot): one map as a heatmap, a layers × heads grid of
                        maps, a layers × heads matrix of a statistic
    fonts.py            the font fallback every figure starts with, so that Chinese, Japanese and Korean
                        tokens are drawn with an installed CJK font (or one warning says how to install one)
    explain_figures.py  explanations drawn: one sentence under every method, the methods' scores by layer
    headview.py         one sentence's attention as a standalone HTML file, drawn by the tab's own lines.js
                        and heatmap.js (embedded in the file), so that the file and the tab cannot drift apart
    maps.py             every attention map of one sentence pair, run through the model and labelled with its
                        tokens: what the logger, the tab's "your sentence" and evaluate.py draw
    export.py           evaluate.py --attention-out: a sentence's maps as PNG files and a head view
    reports.py          evaluate.py's report figures, from the numbers evaluation/ computed: head
                        importance heatmaps, the explanation methods' scores, sentences and logit lenses
    logger.py           AttentionLogger, the training callback that writes the tab's summaries and the
                        IMAGES pictures at every N-th validation
    tab/                TensorBoard's ATTENTION tab: the summaries' format (metadata.py, summary.py), the
                        plugin's HTTP routes (plugin.py), its frontend (static/: plain ES modules, no build
                        step) and a launcher (python -m viz.tab)

How rows and columns are labelled (``analysis.axes``) and the head statistics (``analysis.heads``) are
computed below, on plain tensors; this package draws them.

Layering: this package sits on top of ``model``, ``data``, ``analysis``, ``training`` and ``evaluation``, and
nothing of theirs imports it (tests/test_imports.py): they compute, and this package draws what they return.
``plots``, ``explain_figures`` and ``headview`` draw what they are given and run nothing. This package
imports nothing itself, so that light users (the tab's HTTP routes) do not pay for matplotlib or Lightning.
"""
