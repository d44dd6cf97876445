"""JoeyNMT at its best for the hour: its ``cpu-hour`` recipe tuned on Multi30k's validation set, then the pick
scored on test2016 (docs/peers.md).

    python bench/peers/joeynmt_tune.py tune                          # the variants, two at a time
    python bench/peers/joeynmt_tune.py tune --variants base lr2e-3   # ... or a pair at a time
    python bench/peers/joeynmt_tune.py tune --decay-clock time       # each decay over the hour's seconds
    python bench/peers/joeynmt_tune.py final                         # the best of tune's table, on test2016
    python bench/peers/joeynmt_tune.py final --variant 4x4           # ... or a variant named
    MINUTES=3 SENTENCES=100 python bench/peers/joeynmt_tune.py tune  # smoke runs: the figures mean nothing

``tune`` trains each variant of ``VARIANTS`` (``--variants``, default ``DEFAULT_VARIANTS``) for ``--minutes``
(60, or ``$MINUTES``) with ``bench/peers/joeynmt_baseline.py --recipe cpu-hour``, two at a time, each on one
CPU thread (``OMP_NUM_THREADS=1``), decodes the validation set (Multi30k ``val``, 1014 sentences, or its first
``--sentences``/``$SENTENCES``) with JoeyNMT's beam search (beam 5, alpha 1.0) and writes ``tuning.md`` and
``tuning.json``: the variants by validation BLEU, the best one marked. The rows of an earlier ``tune`` in the
same ``--out`` with the same budget and sentences stay in the table unless their variant runs again, so the
four default variants can run as two pairs (two hours, in one call or two).

JoeyNMT's schedule counts updates, not minutes, so each variant's decay is sized by its expected pace
(updates per minute, ``VARIANTS``), unless ``--decay-clock time`` counts it in the budget's seconds instead
(``joeynmt_venv.clock_decay_rate``: 1% of the peak as the hour ends, whatever the pace; the tunings of
docs/peers.md counted updates). ``--pace-from`` takes the paces measured on this machine by a short ``tune``
of the same variants, two at a time as the hour runs them:

    MINUTES=5 SENTENCES=20 python bench/peers/joeynmt_tune.py tune --out results_joeynmt_pace        # ~15 min
    python bench/peers/joeynmt_tune.py tune --pace-from results_joeynmt_pace/tuning.json

``final`` decodes test2016 with the pick's own weights, those of its tuning run (chosen on the validation set,
then scored once on the test set; no second training), with JoeyNMT's beam search, scores it with the same
sacreBLEU as ``evaluate.py``, and cross-checks the scoring with JoeyNMT's own ``test`` mode
(``bench/peers/joeynmt_baseline.py --decode-only --cross-check``). ``final.md`` and ``final.json`` hold the
row and the cross-check. This project's rows beside it come from ``bench/multi30k_levers.py`` (the recipe in
fp32, JoeyNMT's only precision on a CPU: ``--levers fp32``; in bf16-mixed: the seeds' mean).
"""

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.common import add_tuning_args, check_tuning_minutes, run_side_by_side, write_tuning
from bench.peers.joeynmt_baseline import DECAY_CLOCKS, RECIPES, VENV, parse_result

REPO = Path(__file__).resolve().parents[2]
HOUR_WARMUP = RECIPES["cpu-hour"].warmup


@dataclass(frozen=True)
class Variant:
    """One tuning run: the ``cpu-hour`` recipe with ``knobs`` (baseline option names) changed."""

    why: str
    knobs: dict


# Each variant changes one thing of the cpu-hour recipe (3+3 layers, d_ff 512, dropout 0.1, peak 1e-3 after
# 300 warm-up updates, 2048-token batches). A variant that changes the pace has its own expected
# ``updates_per_minute`` (as measured in the 5-minute pace runs on the 2-core AMD EPYC, as the recipe's 40),
# which sizes its decay unless --pace-from gives one measured on the machine of the hour (docs/peers.md).
VARIANTS = {
    "base": Variant("the cpu-hour recipe as it is", {}),
    "lr2e-3": Variant("a higher peak: the exponential decay leaves little time at the peak",
                      {"lr": 2e-3}),
    "4x4": Variant("one more layer on each side: fewer updates, more capacity",
                   {"layers": 4, "updates_per_minute": 34.0}),
    "b4096": Variant("the shipped batch of 4096 tokens: half the updates, less noise each",
                     {"batch_tokens": 4096, "updates_per_minute": 20.0}),
    "dropout0.15": Variant("this project's dropout: more regularisation over ~15 epochs", {"dropout": 0.15}),
    "6x6": Variant("the shipped depth at d_ff 512", {"layers": 6, "updates_per_minute": 26.0}),
    "lr5e-4": Variant("a lower peak", {"lr": 5e-4}),
    # toward more updates, the lever that helped this project most, and less padding: the paces of their first
    # hours (6076 and 3017 updates), which their 5-minute pace runs had put a fifth lower
    "b1024": Variant("batches of 1024 tokens: twice the updates, each noisier",
                     {"batch_tokens": 1024, "updates_per_minute": 101.3}),
    "blocks": Variant("its padding reduced in its own terms: a training file sorted by length in blocks of "
                      "2000 pairs, read in order", {"length_blocks": 2000, "updates_per_minute": 50.3}),
}  # fmt: skip
DEFAULT_VARIANTS = ("base", "lr2e-3", "4x4", "b4096")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tuning_args(p, ("tune", "final"), Path("results_joeynmt_tune"))
    sentences = os.environ.get("SENTENCES")
    p.add_argument("--sentences", type=int, default=int(sentences) if sentences else None,
                   help="decode only the first N sentences of each split ($SENTENCES; smoke runs)")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=tuple(VARIANTS),
                   help=f"tune: the variants to run (default: {' '.join(DEFAULT_VARIANTS)})")
    p.add_argument("--variant", choices=tuple(VARIANTS),
                   help="final: the tuned variant to score on test2016 (default: tune's best)")
    p.add_argument("--pace-from", type=Path,
                   help="a tuning.json of short runs on this machine: each variant's measured updates per "
                        "minute size its decay, in place of VARIANTS' estimates")  # fmt: skip
    p.add_argument("--decay-clock", choices=DECAY_CLOCKS, default="updates",
                   help="tune: each decay counted in updates at the expected pace (the tunings of "
                        "docs/peers.md), or in the budget's seconds, whatever the pace")  # fmt: skip
    p.add_argument("--venv", type=Path, default=VENV, help="JoeyNMT's virtual environment (made if missing)")
    args = p.parse_args(argv)
    check_tuning_minutes(p, args)
    if args.sentences is not None and args.sentences <= 0:
        p.error(f"--sentences must be positive, got {args.sentences}")
    return args


# -- commands ------------------------------------------------------------------------------------------------


def measured_pace(tuning: list[dict]) -> dict[str, float]:
    """Updates per minute of each variant in the rows of a ``tuning.json`` (runs of any length)."""
    return {r["variant"]: round(r["updates"] / r["train_minutes"], 1)
            for r in tuning if r["train_minutes"] > 0}  # fmt: skip


def variant_options(name: str, minutes: int, pace: dict[str, float] | None = None) -> list[str]:
    """``joeynmt_baseline.py`` options of variant ``name`` for a budget of ``minutes``: its knobs, its
    measured ``pace`` (updates per minute) where there is one, and a warm-up scaled with a budget under an
    hour (``HOUR_WARMUP`` updates an hour)."""
    knobs = dict(VARIANTS[name].knobs)
    if pace and name in pace:
        knobs["updates_per_minute"] = pace[name]
    if minutes < 60 and "warmup" not in knobs:
        knobs["warmup"] = max(round(HOUR_WARMUP * minutes / 60), 1)
    return [part for key, value in knobs.items() for part in (f"--{key.replace('_', '-')}", str(value))]


def joeynmt_command(args: argparse.Namespace, out: Path, variant: str) -> list[str]:
    """``joeynmt_baseline.py``'s tuning run of ``variant``: trained for the budget, scored on val."""
    command = [*baseline_command(args, out, "val"), "--recipe", "cpu-hour", "--minutes", str(args.minutes),
               "--decay-clock", args.decay_clock]  # fmt: skip
    return command + variant_options(variant, args.minutes, args.pace)


def baseline_command(args: argparse.Namespace, out: Path, split: str) -> list[str]:
    command = [sys.executable, str(REPO / "bench" / "peers" / "joeynmt_baseline.py"), "--data",
               str(args.corpora / "multi30k"), "--threads", "1", "--split", split, "--out", str(out),
               "--venv", str(args.venv)]  # fmt: skip
    return command + ([] if args.sentences is None else ["--sentences", str(args.sentences)])


# -- tables --------------------------------------------------------------------------------------------------


def tuning_rows(results: dict[str, dict]) -> list[dict]:
    """One row per variant's result (``joeynmt_baseline.py``'s JSON), best validation BLEU first."""
    rows = []
    for name, r in results.items():
        s = r["settings"]
        rows.append({
            "variant": name, "why": VARIANTS[name].why if name in VARIANTS else "", "layers": s["layers"],
            "d_ff": s["d_ff"], "dropout": s["dropout"], "peak_lr": s["lr"], "warmup": s["warmup"],
            "batch_tokens": s["batch_tokens"], "expected_updates": r.get("expected_updates"),
            "updates": r["updates"], "last_logged_lr": r.get("last_logged_lr"), "bleu": r["bleu"],
            "chrf": r["chrf"], "sentences": r["sentences"], "split": r["test_split"],
            "budget_minutes": r.get("budget_minutes"), "train_minutes": r["train_minutes"],
        })  # fmt: skip
    return sorted(rows, key=lambda row: -row["bleu"])


def tuning_table(rows: list[dict]) -> list[str]:
    """Markdown lines of ``tuning_rows``, the first (best) one marked as the pick."""
    if not rows:
        raise ValueError("no tuning results to tabulate")
    split = f"{rows[0]['split']} ({rows[0]['sentences']} sentences), beam 5"
    lines = [(f"| variant | layers | d_ff | dropout | peak lr | warm-up | batch tokens | updates expected | "
              f"updates made | last logged lr | {split}: BLEU | chrF |"),
             "|---" * 12 + "|"]  # fmt: skip
    for i, r in enumerate(rows):
        name = f"**{r['variant']}** (pick)" if i == 0 else r["variant"]
        lr = "" if r["last_logged_lr"] is None else f"{r['last_logged_lr']:.2e}"
        lines.append(f"| {name} | {r['layers']} | {r['d_ff']} | {r['dropout']:g} | {r['peak_lr']:g} | "
                     f"{r['warmup']} | {r['batch_tokens']} | {r['expected_updates'] or ''} | "
                     f"{r['updates']} | {lr} | {r['bleu']:.1f} | {r['chrf']:.1f} |")  # fmt: skip
    return lines


def final_table(rows: list[dict]) -> list[str]:
    """Markdown lines of the final rows: ``{"label", "precision", "updates", "bleu", "chrf", "sentences",
    "decode_minutes"}`` each."""
    lines = [("| test2016, beam 5, the same sacreBLEU | precision | updates in the budget | BLEU | chrF | "
              "sentences | decoding (min) |"), "|---" * 7 + "|"]  # fmt: skip
    for r in rows:
        decode = "" if r.get("decode_minutes") is None else f"{r['decode_minutes']:.1f}"
        lines.append(f"| {r['label']} | {r['precision']} | {r['updates']} | {r['bleu']:.1f} | "
                     f"{r['chrf']:.1f} | {r['sentences']} | {decode} |")  # fmt: skip
    return lines


def cross_check_lines(check: dict) -> list[str]:
    """What JoeyNMT's ``test`` mode scored, beside this project's scoring of the same translations."""
    return [
        (f"JoeyNMT test mode BLEU: {check['joeynmt_test_bleu']:.2f} ({check['sentences']} sentences; its "
         "references are Moses-tokenized then detokenized)"),
        (f"this project's sacreBLEU of the same translations: {check['project_bleu']:.2f} against the raw "
         f"references, {check['project_bleu_on_joeynmt_references']:.2f} against JoeyNMT's"),
        (f"references changed by the Moses round trip: {check['references_changed_by_moses']}; "
         "translations that differ between test and translate mode: "
         f"{check['translations_differing_from_translate_mode']}"),
    ]


def joey_row(label: str, result: dict) -> dict:
    return {"label": label, "precision": "32-true (fp32)", "updates": result["updates"],
            "bleu": result["bleu"], "chrf": result["chrf"], "sentences": result["sentences"],
            "decode_minutes": result["decode_minutes"]}  # fmt: skip


# -- steps ---------------------------------------------------------------------------------------------------


def earlier_rows(tuning: Path, rows: list[dict]) -> list[dict]:
    """The rows of an earlier ``tune`` in ``tuning`` (its ``tuning.json``) to keep beside ``rows``: those of
    variants not run again, with the same budget and the same validation sentences."""
    if not tuning.is_file():
        return []
    run = {r["variant"] for r in rows}
    same = {(r["budget_minutes"], r["split"], r["sentences"]) for r in rows}
    return [r for r in json.loads(tuning.read_text(encoding="utf-8"))
            if r["variant"] not in run and (r.get("budget_minutes"), r["split"], r["sentences"]) in same]


def tune(args: argparse.Namespace) -> list[dict]:
    out = args.out / "tune"
    jobs = [(f"JoeyNMT {name}", joeynmt_command(args, out / name, name), out / f"{name}.log")
            for name in args.variants]  # fmt: skip
    run_side_by_side(jobs)
    results = {name: parse_result((out / f"{name}.log").read_text(encoding="utf-8"))
               for name in args.variants}  # fmt: skip
    rows = tuning_rows(results)
    kept = earlier_rows(args.out / "tuning.json", rows)
    if kept:
        names = " ".join(r["variant"] for r in kept)
        print(f"kept from the earlier tuning in {args.out}: {names}", flush=True)
    rows = sorted(rows + kept, key=lambda row: -row["bleu"])
    lines = tuning_table(rows)
    heading = f"tuning on the validation set, {args.minutes} min each, one thread each, two at a time:"
    write_tuning(args.out, rows, lines, heading)
    return rows


def final(args: argparse.Namespace) -> list[dict]:
    variant = args.variant
    tuning = args.out / "tuning.json"
    if variant is None:
        if not tuning.is_file():
            sys.exit(f"error: no {tuning}: run the tune step first, or name a variant with --variant")
        variant = json.loads(tuning.read_text(encoding="utf-8"))[0]["variant"]
    run = args.out / "tune" / variant
    if not (run / "result.json").is_file():
        sys.exit(f"error: no tuning run of {variant} in {run}: run `tune --variants {variant}` first")
    command = [*baseline_command(args, run, "test2016"), "--decode-only", "--cross-check"]
    log = args.out / "final.log"
    run_side_by_side([(f"JoeyNMT {variant} on test2016", command, log)])
    result = parse_result(log.read_text(encoding="utf-8"))
    rows = [joey_row(f"JoeyNMT 2.3.0, cpu-hour recipe, variant {variant} (picked on val)", result)]
    lines = final_table(rows) + [""] + cross_check_lines(result["cross_check"])
    (args.out / "final.json").write_text(json.dumps({"rows": rows, "cross_check": result["cross_check"]},
                                                    indent=2) + "\n", encoding="utf-8")  # fmt: skip
    (args.out / "final.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    minutes = result.get("budget_minutes", args.minutes)
    print(f"the pick of the {minutes:g}-minute runs on val, scored once on the test set:")
    print("\n".join(lines), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not (args.corpora / "multi30k" / "train.de").is_file():
        print(f"skipped: no Multi30k in {args.corpora / 'multi30k'} (pass --corpora)", flush=True)
        return
    args.pace = None
    if args.pace_from is not None:
        args.pace = measured_pace(json.loads(args.pace_from.read_text(encoding="utf-8")))
        print(f"updates per minute measured in {args.pace_from}: {args.pace}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # The environment first, so that installing it does not eat into a run's budget.
    baseline = REPO / "bench" / "peers" / "joeynmt_baseline.py"
    subprocess.run([sys.executable, str(baseline), "--venv", str(args.venv), "--venv-only"], check=True)
    (tune if args.step == "tune" else final)(args)


if __name__ == "__main__":
    main()
