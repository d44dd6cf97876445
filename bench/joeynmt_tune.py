"""JoeyNMT at its best for the hour: its ``cpu-hour`` recipe tuned on Multi30k's validation set, then the pick
side by side with this project's recipe for the same hour, both scored on test2016 (docs/joeynmt.md).

    python bench/joeynmt_tune.py tune                 # the variants, two at a time, one thread each
    python bench/joeynmt_tune.py final                # the best of tune's table beside this project's recipe
    python bench/joeynmt_tune.py final --variant 4x4  # ... or a variant named
    MINUTES=3 SENTENCES=100 python bench/joeynmt_tune.py tune      # smoke runs: the figures mean nothing

``tune`` trains each variant of ``VARIANTS`` (``--variants``, default ``DEFAULT_VARIANTS``) for ``--minutes``
(60, or ``$MINUTES``) with ``bench/joeynmt_baseline.py --recipe cpu-hour``, two at a time, each on one CPU
thread (``OMP_NUM_THREADS=1``), decodes the validation set (Multi30k ``val``, 1014 sentences, or its first
``--sentences``/``$SENTENCES``) with JoeyNMT's beam search (beam 5, alpha 1.0) and writes ``tuning.md`` and
``tuning.json``: the variants by validation BLEU, the best one marked. Four variants, two at a time: two
hours.

JoeyNMT's schedule counts updates, not minutes, so each variant's decay is sized by its expected pace
(updates per minute, ``VARIANTS``). ``--pace-from`` takes the paces measured on this machine by a short
``tune`` of the same variants, two at a time as the hour runs them:

    MINUTES=3 SENTENCES=20 python bench/joeynmt_tune.py tune --out results_joeynmt_pace        # ~15 min
    python bench/joeynmt_tune.py tune --pace-from results_joeynmt_pace/tuning.json
    python bench/joeynmt_tune.py final --pace-from results_joeynmt_pace/tuning.json

``final`` runs two pairs, each for the same ``--minutes``, one thread each:

1. the chosen JoeyNMT variant beside ``python train.py --config configs/multi30k.yaml --trainer.precision
   32-true`` (JoeyNMT computes in fp32 only: equal precision);
2. this project's recipe in ``bf16-mixed`` (what ``auto`` picks on a CPU with AMX or AVX512-BF16; a second,
   labelled row) beside JoeyNMT's documented GPU recipe (``--recipe documented``), so that each run has one
   neighbour, as in the first pair (``--skip-documented``: the bf16 run alone).

Each side is scored on test2016 with beam 5 by the same sacreBLEU (this project: ``evaluate.py --beam-size 5
--length-penalty 1.0``, the recipe's decoding). JoeyNMT's chosen run is also scored by JoeyNMT's own ``test``
mode (``--cross-check`` of the baseline). ``final.md`` and ``final.json`` hold the table; the last lines
printed are the table. A budget under 60 minutes scales the warm-up with it (300 updates an hour), so that a
smoke run also reaches the decay.
"""

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.joeynmt_baseline import RECIPES, VENV, parse_result

REPO = Path(__file__).resolve().parent.parent
HOUR_WARMUP = RECIPES["cpu-hour"].warmup


@dataclass(frozen=True)
class Variant:
    """One tuning run: the ``cpu-hour`` recipe with ``knobs`` (baseline option names) changed."""

    why: str
    knobs: dict


# Each variant changes one thing of the cpu-hour recipe (3+3 layers, d_ff 512, dropout 0.1, peak 1e-3 after
# 300 warm-up updates, 2048-token batches). A variant that changes the pace has its own expected
# ``updates_per_minute`` (the recipe's 23, scaled by the smoke runs for b4096 and by the arithmetic per update
# for the deeper models), which sizes its decay unless --pace-from gives a measured one (docs/joeynmt.md).
VARIANTS = {
    "base": Variant("the cpu-hour recipe as it is", {}),
    "lr2e-3": Variant("a higher peak: the exponential decay leaves little time at the peak",
                      {"lr": 2e-3}),
    "4x4": Variant("one more layer on each side: fewer updates, more capacity",
                   {"layers": 4, "updates_per_minute": 20.0}),
    "b4096": Variant("the shipped batch of 4096 tokens: half the updates, less noise each",
                     {"batch_tokens": 4096, "updates_per_minute": 14.0}),
    "dropout0.15": Variant("this project's dropout: more regularisation over ~15 epochs", {"dropout": 0.15}),
    "6x6": Variant("the shipped depth at d_ff 512", {"layers": 6, "updates_per_minute": 15.0}),
    "lr5e-4": Variant("a lower peak", {"lr": 5e-4}),
}  # fmt: skip
DEFAULT_VARIANTS = ("base", "lr2e-3", "4x4", "b4096")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=("tune", "final"))
    p.add_argument("--corpora", type=Path, default=REPO.parent / "shared" / "corpora",
                   help="the folder that holds multi30k/")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("results_joeynmt_tune"), help="where runs and tables go")
    p.add_argument("--minutes", type=int, default=int(os.environ.get("MINUTES", "60")),
                   help="each run's training budget ($MINUTES, default 60)")  # fmt: skip
    sentences = os.environ.get("SENTENCES")
    p.add_argument("--sentences", type=int, default=int(sentences) if sentences else None,
                   help="decode only the first N sentences of each split ($SENTENCES; smoke runs)")
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=tuple(VARIANTS),
                   help=f"tune: the variants to run (default: {' '.join(DEFAULT_VARIANTS)})")
    p.add_argument("--variant", choices=tuple(VARIANTS),
                   help="final: the JoeyNMT variant (default: tune's best)")
    p.add_argument("--skip-documented", action="store_true",
                   help="final: run the bf16 row alone, without JoeyNMT's documented recipe beside it")
    p.add_argument("--pace-from", type=Path,
                   help="a tuning.json of short runs on this machine: each variant's measured updates per "
                        "minute size its decay, in place of VARIANTS' estimates")  # fmt: skip
    p.add_argument("--venv", type=Path, default=VENV, help="JoeyNMT's virtual environment (made if missing)")
    args = p.parse_args(argv)
    if not 1 <= args.minutes <= 1439:
        p.error(f"--minutes must be a whole number of minutes from 1 to 1439, got {args.minutes}")
    if args.sentences is not None and args.sentences <= 0:
        p.error(f"--sentences must be positive, got {args.sentences}")
    return args


# -- commands ------------------------------------------------------------------------------------------------


def measured_pace(tuning: list[dict]) -> dict[str, float]:
    """Updates per minute of each variant in the rows of a ``tuning.json`` (runs of any length)."""
    return {r["variant"]: round(r["updates"] / r["train_minutes"], 1)
            for r in tuning if r["train_minutes"] > 0}  # fmt: skip


def variant_options(name: str, minutes: int, pace: dict[str, float] | None = None) -> list[str]:
    """``bench/joeynmt_baseline.py`` options of variant ``name`` for a budget of ``minutes``: its knobs, its
    measured ``pace`` (updates per minute) where there is one, and a warm-up scaled with a budget under an
    hour (``HOUR_WARMUP`` updates an hour)."""
    knobs = dict(VARIANTS[name].knobs)
    if pace and name in pace:
        knobs["updates_per_minute"] = pace[name]
    if minutes < 60 and "warmup" not in knobs:
        knobs["warmup"] = max(round(HOUR_WARMUP * minutes / 60), 1)
    return [part for key, value in knobs.items() for part in (f"--{key.replace('_', '-')}", str(value))]


def joeynmt_command(args: argparse.Namespace, out: Path, split: str, recipe: str = "cpu-hour",
                    variant: str | None = None, cross_check: bool = False) -> list[str]:  # fmt: skip
    command = [sys.executable, str(REPO / "bench" / "joeynmt_baseline.py"), "--recipe", recipe,
               "--data", str(args.corpora / "multi30k"), "--minutes", str(args.minutes), "--threads", "1",
               "--split", split, "--out", str(out), "--venv", str(args.venv)]  # fmt: skip
    if variant is not None:
        command += variant_options(variant, args.minutes, args.pace)
    if args.sentences is not None:
        command += ["--sentences", str(args.sentences)]
    return command + (["--cross-check"] if cross_check else [])


def ours_train_command(args: argparse.Namespace, out: Path, precision: str) -> list[str]:
    max_time = f"00:{args.minutes // 60:02d}:{args.minutes % 60:02d}:00"
    return [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "multi30k.yaml"),
            "--data.path", str(args.corpora / "multi30k"), "--trainer.max_time", max_time,
            "--trainer.precision", precision,
            "--trainer.logger.init_args.save_dir", str(out / "runs")]  # fmt: skip


def ours_evaluate_command(args: argparse.Namespace, out: Path) -> list[str]:
    """``evaluate.py`` of the run's ``last.ckpt`` on test2016 (or its first ``--sentences``, as a TSV),
    with the recipe's decoding: beam 5, length penalty 1.0."""
    command = [sys.executable, str(REPO / "evaluate.py"), str(last_checkpoint(out)),
               "--beam-size", "5", "--length-penalty", "1.0", "--quiet"]  # fmt: skip
    if args.sentences is None:
        return command + ["--test-split", "test2016"]
    data = args.corpora / "multi30k"
    de, en = ((data / f"test2016.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("de", "en"))
    tsv = out / "test2016_subset.tsv"
    tsv.write_text("".join(f"{s}\t{r}\n" for s, r in list(zip(de, en, strict=True))[: args.sentences]),
                   encoding="utf-8")  # fmt: skip
    return command + ["--tsv", str(tsv)]


def run_side_by_side(jobs: list[tuple[str, list[str], Path]]) -> None:
    """Run ``(name, command, log)`` jobs two at a time, each with one CPU thread; a failed job is named."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for i in range(0, len(jobs), 2):
        running = []
        for name, command, log in jobs[i : i + 2]:
            log.parent.mkdir(parents=True, exist_ok=True)
            print(f"start {name}: {' '.join(command)}", flush=True)
            running.append((name, log, subprocess.Popen(command, env=env, stdout=log.open("w"),
                                                        stderr=subprocess.STDOUT)))  # fmt: skip
        for name, log, proc in running:
            if proc.wait() != 0:
                raise RuntimeError(f"{name} failed (exit {proc.returncode}); see {log}")
            print(f"done {name}", flush=True)


# -- tables --------------------------------------------------------------------------------------------------


def tuning_rows(results: dict[str, dict]) -> list[dict]:
    """One row per variant's result (``bench/joeynmt_baseline.py``'s JSON), best validation BLEU first."""
    rows = []
    for name, r in results.items():
        s = r["settings"]
        rows.append({
            "variant": name, "why": VARIANTS[name].why if name in VARIANTS else "", "layers": s["layers"],
            "d_ff": s["d_ff"], "dropout": s["dropout"], "peak_lr": s["lr"], "warmup": s["warmup"],
            "batch_tokens": s["batch_tokens"], "expected_updates": r.get("expected_updates"),
            "updates": r["updates"], "last_logged_lr": r.get("last_logged_lr"), "bleu": r["bleu"],
            "chrf": r["chrf"], "sentences": r["sentences"], "split": r["test_split"],
            "train_minutes": r["train_minutes"],
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


def ours_row(label: str, precision: str, out: Path) -> dict:
    """A final row of this project's run in ``out``: the evaluation's JSON line (its decoding time from its
    sentences per second), and the updates recorded in the run's ``last.ckpt``."""
    import torch

    result = json.loads((out / "test2016.json").read_text(encoding="utf-8").strip().splitlines()[-1])
    checkpoint = torch.load(last_checkpoint(out), map_location="cpu", weights_only=True)
    return {"label": label, "precision": precision, "updates": checkpoint["global_step"],
            "bleu": result["bleu"], "chrf": result["chrf"], "sentences": result["num_sentences"],
            "decode_minutes": result["num_sentences"] / result["sentences_per_second"] / 60}  # fmt: skip


def last_checkpoint(out: Path) -> Path:
    """The ``last.ckpt`` of the newest run ``train.py`` saved under ``<out>/runs``."""
    runs = sorted((out / "runs" / "multi30k").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not runs:
        raise RuntimeError(f"no run of train.py in {out / 'runs' / 'multi30k'}; see {out / 'train.log'}")
    return runs[-1] / "checkpoints" / "last.ckpt"


def joey_row(label: str, result: dict) -> dict:
    return {"label": label, "precision": "32-true (fp32)", "updates": result["updates"],
            "bleu": result["bleu"], "chrf": result["chrf"], "sentences": result["sentences"],
            "decode_minutes": result["decode_minutes"]}  # fmt: skip


# -- steps ---------------------------------------------------------------------------------------------------


def tune(args: argparse.Namespace) -> list[dict]:
    out = args.out / "tune"
    jobs = [(f"JoeyNMT {name}", joeynmt_command(args, out / name, "val", variant=name), out / f"{name}.log")
            for name in args.variants]  # fmt: skip
    run_side_by_side(jobs)
    results = {name: parse_result((out / f"{name}.log").read_text(encoding="utf-8"))
               for name in args.variants}  # fmt: skip
    rows = tuning_rows(results)
    lines = tuning_table(rows)
    (args.out / "tuning.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    (args.out / "tuning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"tuning on the validation set, {args.minutes} min each, one thread each, two at a time:")
    print("\n".join(lines), flush=True)
    return rows


def final(args: argparse.Namespace) -> list[dict]:
    variant = args.variant
    if variant is None:
        tuning = args.out / "tuning.json"
        if not tuning.is_file():
            sys.exit(f"error: no {tuning}: run the tune step first, or name a variant with --variant")
        variant = json.loads(tuning.read_text(encoding="utf-8"))[0]["variant"]
    out = args.out / "final"
    joey, joey_doc = out / "joeynmt-cpu-hour", out / "joeynmt-documented"
    ours32, ours_bf16 = out / "ours-32-true", out / "ours-bf16-mixed"
    chosen = joeynmt_command(args, joey, "test2016", variant=variant, cross_check=True)
    pairs = [[("JoeyNMT " + variant, chosen, out / "joeynmt-cpu-hour.log"),
              ("this project, 32-true", ours_train_command(args, ours32, "32-true"), ours32 / "train.log")]]
    second = [("this project, bf16-mixed", ours_train_command(args, ours_bf16, "bf16-mixed"),
               ours_bf16 / "train.log")]  # fmt: skip
    if not args.skip_documented:
        second.append(("JoeyNMT documented", joeynmt_command(args, joey_doc, "test2016", recipe="documented"),
                       out / "joeynmt-documented.log"))  # fmt: skip
    pairs.append(second)
    for pair in pairs:
        run_side_by_side(pair)
        for run in (ours32, ours_bf16):  # this project's decoding, once its training is over
            if (run / "train.log").is_file() and not (run / "test2016.json").is_file():
                done = subprocess.run(ours_evaluate_command(args, run), check=False, capture_output=True,
                                      text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(f"evaluate.py failed on {run}: {done.stderr.strip()[-2000:]}")
                (run / "test2016.json").write_text(done.stdout, encoding="utf-8")

    joey_result = parse_result((out / "joeynmt-cpu-hour.log").read_text(encoding="utf-8"))
    rows = [joey_row(f"JoeyNMT 2.3.0, cpu-hour recipe, variant {variant} (tuned on val)", joey_result),
            ours_row("this project, configs/multi30k.yaml", "32-true", ours32),
            ours_row("this project, configs/multi30k.yaml (second row: bf16)", "bf16-mixed", ours_bf16)]
    if not args.skip_documented:
        rows.append(joey_row("JoeyNMT's documented GPU recipe (IWSLT14), untuned for a CPU hour",
                             parse_result((out / "joeynmt-documented.log").read_text(encoding="utf-8"))))
    lines = final_table(rows) + [""] + cross_check_lines(joey_result["cross_check"])
    (args.out / "final.json").write_text(json.dumps({"rows": rows, "cross_check": joey_result["cross_check"]},
                                                    indent=2) + "\n", encoding="utf-8")  # fmt: skip
    (args.out / "final.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{args.minutes} min each, one thread each, side by side in pairs:")
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
    subprocess.run([sys.executable, str(REPO / "bench" / "joeynmt_baseline.py"), "--venv", str(args.venv),
                    "--venv-only"], check=True)  # fmt: skip
    (tune if args.step == "tune" else final)(args)


if __name__ == "__main__":
    main()
