"""Plot how well the best cross-attention head agrees with the gold word alignment over a run's training.

    python bench/alignment_curve.py runs/toy/version_0 docs/alignment_curve.png

Reads the run's TensorBoard events (``heads/best_alignment``, ``heads/best_aer``, ``val/exact_match``).
"""

import sys
from pathlib import Path

from matplotlib.figure import Figure

if __package__ in (None, ""):  # `python bench/alignment_curve.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.curves import parse_arguments, read_scalars, refuse, save_figure
from viz.fonts import use_script_fonts


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(__doc__, argv)
    events, available = read_scalars(args.run_dir)
    wanted = {
        "heads/best_alignment": "best cross head: agreement with gold alignment",
        "heads/best_aer": "best cross head: alignment error rate",
        "val/exact_match": "validation exact match",
    }
    missing = [tag for tag in wanted if tag not in available]
    if missing:
        refuse(f"{args.run_dir} has no {', '.join(missing)} (a run on the toy data logs them)")

    use_script_fonts()  # as every figure of the project: CJK glyphs from an installed CJK font
    figure = Figure(figsize=(5.5, 3.2), dpi=110)
    ax = figure.add_subplot()
    for tag, label in wanted.items():
        points = events.Scalars(tag)
        ax.plot([p.step for p in points], [p.value for p in points], marker="o", markersize=3, label=label)
    ax.set_xlabel("training step")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    ax.set_title("The alignment head emerges", fontsize=10)
    figure.tight_layout()
    save_figure(figure, args.output)


if __name__ == "__main__":
    main()
