"""Plot how well the best cross-attention head agrees with the gold word alignment over a run's training.

    python bench/alignment_curve.py runs/toy/version_0 docs/alignment_curve.png

Reads the run's TensorBoard events (``heads/best_alignment``, ``heads/best_aer``, ``val/exact_match``).
"""

import argparse
import sys
from pathlib import Path

from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

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
    wanted = {
        "heads/best_alignment": "best cross head: agreement with gold alignment",
        "heads/best_aer": "best cross head: alignment error rate",
        "val/exact_match": "validation exact match",
    }
    missing = [tag for tag in wanted if tag not in available]
    if missing:
        sys.exit(f"error: {args.run_dir} has no {', '.join(missing)} (a run on the toy data logs them)")

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
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
