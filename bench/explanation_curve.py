"""Plot each explanation method's best-layer alignment error rate over a run's training: which view of the
model finds the gold alignment first?

    python bench/explanation_curve.py runs/toy/version_0 docs/explanation_curve.png

Reads the run's TensorBoard events (``explain/<method>/best_aer``, logged at each validation on data with gold
alignments, see ``viz.logger``).
"""

import sys
from pathlib import Path

from matplotlib.figure import Figure

if __package__ in (None, ""):  # `python bench/explanation_curve.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.explain.registry import METHODS
from bench.curves import parse_arguments, read_scalars, refuse, save_figure
from viz.fonts import use_script_fonts


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(__doc__, argv)
    events, available = read_scalars(args.run_dir)
    tags = {name: f"explain/{name}/best_aer" for name in METHODS if f"explain/{name}/best_aer" in available}
    if not tags:
        refuse(f"{args.run_dir} has no explain/<method>/best_aer scalars (runs on gold-aligned "
               "data with --attention.explanation_sentences above 0 log them)")

    use_script_fonts()  # as every figure of the project: CJK glyphs from an installed CJK font
    figure = Figure(figsize=(7.5, 3.4), dpi=110)
    ax = figure.add_subplot()
    for name, tag in tags.items():
        points = events.Scalars(tag)
        ax.plot([p.step for p in points], [p.value for p in points], marker="o", markersize=3,
                label=METHODS[name].label)
    ax.set_xlabel("training step")
    ax.set_ylabel("AER of the best layer")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the curves, never over them
    ax.set_title("Which explanation finds the alignment first?", fontsize=10)
    figure.tight_layout()
    save_figure(figure, args.output)


if __name__ == "__main__":
    main()
