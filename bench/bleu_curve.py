"""Plot what a run's validation BLEU and loss were after each number of updates: how many updates a recipe
needs before its BLEU means something, whatever the machine's speed.

    python bench/bleu_curve.py runs/tatoeba_zh_en/version_0 docs/bleu_curve_zh_en.png

Reads the run's TensorBoard events (``val/bleu``, ``val/loss``) and prints each validation's figures, one
line each, as the figure shows them.
"""

import sys
from pathlib import Path

from matplotlib.figure import Figure

if __package__ in (None, ""):  # `python bench/bleu_curve.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.curves import parse_arguments, read_scalars, refuse, save_figure
from viz.fonts import use_script_fonts

BLEU, LOSS = "val/bleu", "val/loss"


def points(events, tag: str) -> list[tuple[int, float]]:
    """(updates, value) of each logged value: Lightning records a validation at the step of the last update
    before it, counted from 0, so the updates made are that step + 1 (what the progress lines print)."""
    return [(p.step + 1, p.value) for p in events.Scalars(tag)]


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(__doc__, argv)
    events, available = read_scalars(args.run_dir)
    missing = [tag for tag in (BLEU, LOSS) if tag not in available]
    if missing:
        refuse(f"{args.run_dir} has no {', '.join(missing)} (a run logs them at its validations that decode)")
    bleu, loss = points(events, BLEU), points(events, LOSS)
    for step, value in bleu:
        print(f"updates {step:,}: validation BLEU {value:.2f}")

    use_script_fonts()
    figure = Figure(figsize=(5.5, 3.2), dpi=110)
    ax = figure.add_subplot()
    ax.plot(*zip(*bleu, strict=True), marker="o", markersize=3, color="C0", label="validation BLEU")
    ax.set_xlabel("updates")
    ax.set_ylabel("validation BLEU", color="C0")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    right = ax.twinx()
    right.plot(*zip(*loss, strict=True), marker="s", markersize=3, color="C1", label="validation loss")
    right.set_ylabel("validation loss per token", color="C1")
    ax.set_title(f"{Path(args.run_dir).parent.name}: validation BLEU and loss by updates", fontsize=10)
    figure.tight_layout()
    save_figure(figure, args.output)


if __name__ == "__main__":
    main()
