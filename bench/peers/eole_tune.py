"""eole at its best for the hour: its recipe (``bench/peers/eole_baseline.py``) tuned on Multi30k's validation
set toward what the diagnosis hour left open (docs/peers.md), the pick's test2016 the row.

    python bench/peers/eole_tune.py tune --variants biases beta0.98    # two one-hour runs side by side
    python bench/peers/eole_tune.py tune --variants lr2e-3 dropout0.1  # the next pair; the table keeps both
    python bench/peers/eole_tune.py table                              # the table of the runs in --out
    MINUTES=3 python bench/peers/eole_tune.py tune --variants base biases --out results_eole_smoke

``tune`` trains each variant of ``VARIANTS`` for ``--minutes`` (60, or ``$MINUTES``) with
``eole_baseline.py``, two at a time, each on one CPU thread, into ``<out>/tune/<variant>``, then writes the
table. ``table`` writes it from the runs already there. eole's baseline decodes val and test2016 with the
weights at the end of its budget (beam 5, this project's length penalty); ``tuning.md`` and ``tuning.json``
rank the variants by validation BLEU, mark the best one, the pick, and give the pick's test2016 score alone:
the other variants' test2016 scores are in their ``result.json``, not used. A run joins the table only if
its budget is ``--minutes`` and its recorded changes are its variant's (``recipe_changes``), so a folder
renamed or made by hand cannot pass for another variant.
"""

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers import common, eole_baseline
from bench.peers.common import REPO


@dataclass(frozen=True)
class Variant:
    """One tuning run: eole's recipe as in the diagnosis hour with ``options`` (``eole_baseline.py``'s)."""

    why: str
    options: tuple[str, ...] = ()


# Each variant changes one of the differences the diagnosis hour left (docs/peers.md: "eole's diagnosis
# hour"), or two that each helped.
VARIANTS = {
    "base": Variant("the recipe as in the diagnosis hour"),
    "biases": Variant("biases in attention and feed-forward layers, as this project's model has",
                      ("--biases",)),
    "beta0.98": Variant("AdamW's beta2 at 0.98, as this project's: a shorter memory of squared gradients",
                        ("--adam-beta2", "0.98")),
    "lr2e-3": Variant("a higher peak", ("--lr", "2e-3")),
    "dropout0.1": Variant("less dropout, the recipe's own 0.1", ("--dropout", "0.1")),
    "biases+beta0.98": Variant("both of the first pair's changes", ("--biases", "--adam-beta2", "0.98")),
    "beta0.98+lr2e-3": Variant("the first pair's pick with a higher peak: a shorter second-moment memory "
                               "may carry a larger step", ("--adam-beta2", "0.98", "--lr", "2e-3")),
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_tuning_args(p, ("tune", "table"), Path("results_eole_tune"))
    p.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=["biases", "beta0.98"],
                   help="tune: the variants to run, two at a time (default: biases beta0.98)")  # fmt: skip
    p.add_argument("--venv", type=Path, default=eole_baseline.VENV, help="eole's virtual environment")
    args = p.parse_args(argv)
    common.check_tuning_minutes(p, args)
    return args


def variant_command(args: argparse.Namespace, name: str) -> list[str]:
    """``eole_baseline.py``'s run of variant ``name``: trained for the budget, decoded on val and test2016."""
    return [sys.executable, str(REPO / "bench" / "peers" / "eole_baseline.py"), "--data",
            str(args.corpora / "multi30k"), "--minutes", str(args.minutes), "--threads", "1",
            "--out", str(args.out / "tune" / name), "--venv", str(args.venv), "--overwrite",
            *VARIANTS[name].options]  # fmt: skip


def tuned_changes(changes: list[str]) -> list[str]:
    return [c for c in changes if c.startswith("tuned:")]


def variant_changes(name: str) -> list[str]:
    """The ``tuned:`` lines a run of variant ``name`` records."""
    return tuned_changes(eole_baseline.recipe_changes(eole_baseline.parse_args(list(VARIANTS[name].options))))


def tuning_rows(results: dict[str, dict]) -> list[dict]:
    """One row per variant's result (``eole_baseline.py``'s JSON), best validation BLEU first."""
    rows = []
    for name, r in results.items():
        rates = r.get("learning_rates") or [[None, None]]
        rows.append({
            "variant": name, "why": VARIANTS[name].why, "tuned": tuned_changes(r["recipe_changes"]),
            "updates": r["updates"], "target_tokens_per_second": r.get("target_tokens_per_second"),
            "last_logged_lr": rates[-1][1], "val_bleu": r["val_bleu"], "val_chrf": r["val_chrf"],
            "test_split": r["test_split"], "bleu": r["bleu"], "chrf": r["chrf"],
            "budget_minutes": r["budget_minutes"], "train_minutes": r["train_minutes"],
        })  # fmt: skip
    return sorted(rows, key=lambda row: -row["val_bleu"])


def tuning_table(rows: list[dict]) -> list[str]:
    """Markdown lines of ``tuning_rows``: the first (best on val) marked as the pick, then its test score."""
    if not rows:
        raise ValueError("no tuning results to tabulate")
    lines = [("| variant | changed from the diagnosis hour | updates | target tokens/s | last logged lr | "
              "val BLEU | val chrF |"), "|---" * 7 + "|"]  # fmt: skip
    for i, r in enumerate(rows):
        name = f"**{r['variant']}** (pick)" if i == 0 else r["variant"]
        changed = "; ".join(c.removeprefix("tuned: ") for c in r["tuned"]) or "nothing"
        speed = "" if r["target_tokens_per_second"] is None else f"{r['target_tokens_per_second']:,}"
        lr = "" if r["last_logged_lr"] is None else f"{r['last_logged_lr']:.1e}"
        lines.append(f"| {name} | {changed} | {r['updates']} | {speed} | {lr} | {r['val_bleu']:.1f} | "
                     f"{r['val_chrf']:.1f} |")  # fmt: skip
    pick = rows[0]
    lines += ["", (f"the pick, {pick['variant']}, on {pick['test_split']} (beam 5, the same weights): BLEU "
                   f"{pick['bleu']:.1f}, chrF {pick['chrf']:.1f}")]  # fmt: skip
    return lines


def finished_runs(args: argparse.Namespace) -> dict[str, dict]:
    """The results in ``<out>/tune/<variant>/result.json`` of this budget whose recorded changes are their
    variant's; a folder that does not fit is named and left out."""
    results = {}
    for name in VARIANTS:
        path = args.out / "tune" / name / "result.json"
        if not path.is_file():
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        log = path.with_name("train.out")
        if log.is_file():  # what eole reported, read by today's training_progress (older runs lack a field)
            result = {**result, **eole_baseline.training_progress(log.read_text(encoding="utf-8"))}
        if result.get("budget_minutes") != args.minutes:
            print(f"left out {path}: a budget of {result.get('budget_minutes')} min, not {args.minutes}")
        elif tuned_changes(result.get("recipe_changes", [])) != variant_changes(name):
            print(f"left out {path}: its recorded changes are not those of the variant {name}")
        else:
            results[name] = result
    return results


def table(args: argparse.Namespace) -> list[dict]:
    results = finished_runs(args)
    if not results:
        tuned = args.out / "tune"
        sys.exit(f"error: no finished {args.minutes}-minute run in {tuned}: run the tune step first")
    rows = tuning_rows(results)
    lines = tuning_table(rows)
    heading = f"eole tuned on the validation set, {args.minutes} min each, one thread each, two at a time:"
    common.write_tuning(args.out, rows, lines, heading)
    return rows


def tune(args: argparse.Namespace) -> list[dict]:
    jobs = [(f"eole {name}", variant_command(args, name), args.out / "tune" / f"{name}.log")
            for name in args.variants]  # fmt: skip
    common.run_side_by_side(jobs)
    return table(args)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.step == "tune":
        if not (args.corpora / "multi30k" / "train.de").is_file():
            print(f"skipped: no Multi30k in {args.corpora / 'multi30k'} (pass --corpora)", flush=True)
            return
        # The environment first, so that installing it does not eat into a run's budget.
        baseline = variant_command(args, "base")[:2]
        subprocess.run([*baseline, "--venv", str(args.venv), "--venv-only"], check=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (tune if args.step == "tune" else table)(args)


if __name__ == "__main__":
    main()
