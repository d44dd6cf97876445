"""Plot each explanation method's best-layer alignment error rate over a run's training: which view of the
model finds the gold alignment first?

    python bench/explanation_curve.py runs/toy/version_0 docs/explanation_curve.png

Reads the run's TensorBoard events (``explain/<method>/best_aer``, logged at each validation on data with gold
alignments, see ``viz.logger``).
"""

import argparse
import sys
from pathlib import Path

from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from analysis.explain.registry import METHODS
from viz.fonts import use_script_fonts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir")
    parser.add_argument("output")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    output = Path(args.output)
    if output.exists() and not args.overwrite:
        sys.exit(f"error: {output} exists; pass --overwrite to replace it")

    events = EventAccumulator(args.run_dir, size_guidance={"scalars": 0})
    events.Reload()
    available = set(events.Tags()["scalars"])
    tags = {name: f"explain/{name}/best_aer" for name in METHODS if f"explain/{name}/best_aer" in available}
    if not tags:
        sys.exit(f"error: {args.run_dir} has no explain/<method>/best_aer scalars (runs on gold-aligned "
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
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
