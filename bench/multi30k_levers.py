"""Levers of the Multi30k recipe: each an hour of training, side by side, chosen on the validation set.

    python bench/multi30k_levers.py --levers steps ema                 # two levers, one thread each, one hour
    python bench/multi30k_levers.py --levers tokens1024 dropout0.1 --max-tokens 2048  # from 2048 tokens
    python bench/multi30k_levers.py --levers ema --threads 2 --test    # alone on both cores, then the tests
    python bench/multi30k_levers.py --levers steps ema --dry-run       # the commands, without running them
    python bench/multi30k_levers.py --levers seed1 seed2 --test        # the recipe twice, for its mean
    python bench/multi30k_levers.py --levers seed3 --beside marian --test  # ... beside Marian's hour
    python bench/multi30k_levers.py --levers fp32 --beside eole --test     # in fp32, beside eole's hour
    python bench/multi30k_levers.py --levers fp32 --beside joeynmt --test  # ... beside JoeyNMT's tuned recipe

A lever is ``configs/multi30k.yaml`` with one change (``LEVERS``). The levers named together train at the same
time, each process on ``--threads`` torch threads (default 1) for ``--minutes`` (default 60), as
``bench/peers/joeynmt.sh`` runs its two recipes. Then every run is scored on the validation set (1014
sentences, beam 5) in each way of using its weights (``VARIANTS``: the last weights, with length penalty 1.0,
and for the recipe's own training also 0.6 and 1.4; for ``steps``, the last 3, 5 or 10 checkpoints averaged;
for ``ema``, also the raw weights beside their average). ``--test`` then applies each run's best variant on
the validation set, once, to test2016, test2017 and mscoco2017. Scores go to ``<out>/scores.jsonl`` (one JSON
line per evaluation) and a table closes the run; ``--score-only`` scores the runs already in ``--out`` again.

``--beside PEER`` trains a peer's baseline (``PEERS``: eole's or Marian's recipe sized to the hour,
docs/peers.md, or JoeyNMT's cpu-hour recipe, docs/peers.md) at the same time, on ``--threads`` threads for
the same ``--minutes``, in ``<out>/<peer>``; its environment is made first if missing, off the clock.
The peer decodes test2016 itself (beam 5) and scores it as ``evaluate.py`` does; its row joins the table.
Which levers were tried, with their figures, is in docs/results.md.
"""

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
TEST_SPLITS = ("test2016", "test2017", "mscoco2017")

# Each lever: the train.py arguments that make it, added to `--config configs/multi30k.yaml`.
LEVERS: dict[str, tuple[str, ...]] = {
    "recipe": (),
    # Checkpoints every 200 updates within the hour (beside the epoch-end ones), for averaging the last K.
    "steps": (
        "--trainer.callbacks+=ModelCheckpoint",
        "--trainer.callbacks.monitor=step",
        "--trainer.callbacks.mode=max",
        "--trainer.callbacks.every_n_train_steps=200",
        "--trainer.callbacks.save_top_k=10",
        "--trainer.callbacks.filename=step{step}",
        "--trainer.callbacks.auto_insert_metric_name=false",
    ),
    # An exponential moving average of the weights, decay 0.999 at every update (Lightning's callback):
    # validation and the checkpoints' state_dict use the average, `current_model_state` keeps the raw weights.
    "ema": (
        "--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging",
        "--trainer.callbacks.decay=0.999",
    ),
    "tokens1024": ("--data.max_tokens=1024",),  # the recipe's since 2026-11-24 (it had 2048 before)
    "dropout0.1": ("--model.dropout=0.1",),  # less regularisation for a model underfit after the hour (lost)
    "vocab10k": ("--data.vocab_size=10000",),
    "vocab6k": ("--data.vocab_size=6000",),
    # The recipe with other seeds (it has 1234): the spread between identical runs, and the headline's mean.
    **{f"seed{k}": (f"--seed_everything={k}",) for k in (1, 2, 3)},
    # The recipe in fp32, as a peer that computes in fp32 only trains beside it: equal precision.
    "fp32": ("--trainer.precision=32-true",),
}

# Peers that can train beside the levers: their baseline scripts (bench/peers/common.py) and the options that
# choose their recipe for the hour, run with the same budget; JoeyNMT's is its cpu-hour recipe as tuned
# (bench/peers/joeynmt_tune.py picked it as it is: docs/peers.md).
PEERS = {
    "eole": ("bench/peers/eole_baseline.py",),
    # Marian's step decay sized to end near zero at update 4120, where its first hour here ended (its pace).
    "marian": ("bench/peers/marian_baseline.py", "--decay-until", "4120"),
    "joeynmt": ("bench/peers/joeynmt_baseline.py", "--recipe", "cpu-hour"),
}


@dataclass(frozen=True)
class Variant:
    """One way of scoring a run: which weights, and the length penalty of beam search."""

    name: str
    average_last: int = 1
    length_penalty: float = 1.0
    raw: bool = False  # the raw weights of an EMA run instead of their average

    def evaluate_args(self) -> list[str]:
        args = ["--beam-size", "5", "--length-penalty", str(self.length_penalty)]
        return args + (["--average-last", str(self.average_last)] if self.average_last > 1 else [])


LAST = (Variant("last"),)
LENGTH_PENALTIES = (Variant("last, lp 0.6", length_penalty=0.6), Variant("last, lp 1.4", length_penalty=1.4))
# Every run is scored with its last weights; the recipe's own training also with other length penalties and
# averages of its last checkpoints.
VARIANTS: dict[str, tuple[Variant, ...]] = {
    "recipe": LAST + LENGTH_PENALTIES,
    "steps": LAST
    + LENGTH_PENALTIES
    + tuple(Variant(f"average of last {k}", average_last=k) for k in (3, 5, 10)),
    "ema": LAST + (Variant("raw weights", raw=True),),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levers", nargs="+", required=True, choices=sorted(LEVERS), help="trained side by side")
    p.add_argument("--corpora", type=Path, default=REPO.parent / "shared" / "corpora",
                   help="the folder holding multi30k/")  # fmt: skip
    p.add_argument("--minutes", type=int, default=60, help="each run's training time (default 60)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    p.add_argument(
        "--max-tokens", type=int, help="the recipe's batch size to start from (default: the config's)"
    )
    p.add_argument("--beside", choices=sorted(PEERS), help="a peer's hour at the same time (docs/peers.md)")
    p.add_argument("--out", type=Path, default=Path("results_levers"), help="where runs and scores go")
    p.add_argument("--test", action="store_true", help="then score each run's best variant on the test sets")
    p.add_argument("--score-only", action="store_true", help="score the runs already in --out, no training")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    if len(set(args.levers)) != len(args.levers):
        p.error(f"--levers names a lever twice: {' '.join(args.levers)}")
    if not 1 <= args.minutes <= 1439:
        p.error(f"--minutes must be from 1 to 1439, got {args.minutes}")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if args.max_tokens is not None and args.max_tokens < 1:
        p.error(f"--max-tokens must be at least 1, got {args.max_tokens}")
    return args


def train_command(
    lever: str, data: Path, minutes: int, out: Path, max_tokens: int | None = None
) -> list[str]:
    """train.py for ``lever``: the recipe (with ``max_tokens`` if given; a lever's own batch size wins)."""
    start = [] if max_tokens is None else [f"--data.max_tokens={max_tokens}"]
    max_time = f"00:{minutes // 60:02d}:{minutes % 60:02d}:00"
    return [
        sys.executable, "train.py", "--config", "configs/multi30k.yaml", "--data.path", str(data),
        "--trainer.max_time", max_time, "--trainer.logger.init_args.save_dir", str(out / lever / "runs"),
        "--trainer.enable_progress_bar=false", *start, *LEVERS[lever],
    ]  # fmt: skip


def peer_command(peer: str, data: Path, minutes: int, threads: int, out: Path) -> list[str]:
    """The baseline of ``peer`` for the same budget and threads, writing to ``<out>/<peer>``."""
    script, *recipe = PEERS[peer]
    return [
        sys.executable, script, "--data", str(data), "--minutes", str(minutes),
        "--threads", str(threads), "--out", str(out / peer), *recipe,
    ]  # fmt: skip


def peer_row(peer: str, out: Path) -> dict:
    """The peer's test2016 result (``<out>/<peer>/result.json``) as a row of the table."""
    result = json.loads((out / peer / "result.json").read_text(encoding="utf-8"))
    return {"lever": peer, "variant": "its recipe, beam 5", "split": result["test_split"], **result}


def evaluate_command(checkpoint: Path, variant: Variant, split: str) -> list[str]:
    splits = ["--split", "val"] if split == "val" else ["--test-split", split]
    return [sys.executable, "evaluate.py", str(checkpoint), *splits, *variant.evaluate_args(), "--quiet"]


def last_checkpoint(out: Path, lever: str) -> Path:
    folder = out / lever / "runs" / "multi30k"
    runs = sorted(folder.glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not runs:
        raise SystemExit(f"error: no run of lever {lever} in {out / lever / 'runs'} (see {out / lever}.log)")
    return runs[-1] / "checkpoints" / "last.ckpt"


def raw_path(checkpoint: Path) -> Path:
    """Where ``raw_weights`` writes: beside the checkpoints folder, so ``--average-last`` never counts it."""
    return checkpoint.parents[1] / f"{checkpoint.stem}_raw.ckpt"


def raw_weights(checkpoint: Path) -> Path:
    """A copy of an EMA run's checkpoint whose ``state_dict`` is the raw weights: Lightning's
    ``EMAWeightAveraging`` saves the average as ``state_dict``, the raw weights as ``current_model_state``."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if "current_model_state" not in saved:
        raise SystemExit(f"error: {checkpoint} holds no raw weights (current_model_state): not an EMA run")
    saved["state_dict"] = saved.pop("current_model_state")
    saved.pop("averaging_state", None)
    torch.save(saved, raw_path(checkpoint))
    return raw_path(checkpoint)


def score(lever: str, weights: Path, variant: Variant, split: str, env: dict, dry_run: bool) -> dict | None:
    """Evaluate ``weights`` one way on ``split``; the evaluation's JSON with the lever and variant added."""
    command = evaluate_command(weights, variant, split)
    print(" ".join(command), flush=True)
    if dry_run:
        return None
    done = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last_line = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: {' '.join(command)} failed (exit {done.returncode}): {last_line}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {lever}, {variant.name}, {split}: BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}")
    return {"lever": lever, "variant": variant.name, "split": split, **result}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = args.corpora / "multi30k"
    if not (data / "train.de").is_file() and not args.dry_run:
        print(f"skipped: no Multi30k in {data} (give the corpora folder with --corpora)")
        return 0
    if args.out.exists() and not (args.dry_run or args.score_only):
        raise SystemExit(f"error: {args.out} exists (an earlier run?); move it away first")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}

    trainings = {}
    peer = None
    if args.beside and not args.score_only:
        command = peer_command(args.beside, data, args.minutes, args.threads, args.out)
        print(" ".join(command), flush=True)
        if not args.dry_run:  # its environment first, outside the hour
            subprocess.run([*command[:2], "--venv-only"], check=True, cwd=REPO)
            (args.out / args.beside).mkdir(parents=True)
            log = open(args.out / f"{args.beside}.log", "w")  # noqa: SIM115 (closed when the run ends)
            peer = (subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log), log)
    for lever in [] if args.score_only else args.levers:
        command = train_command(lever, data, args.minutes, args.out, args.max_tokens)
        print(" ".join(command), flush=True)
        if not args.dry_run:
            (args.out / lever).mkdir(parents=True)
            log = open(args.out / f"{lever}.log", "w")  # noqa: SIM115 (closed when the run ends)
            trainings[lever] = (subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log), log)
    for lever, (process, log) in trainings.items():
        if process.wait() != 0:
            if peer is not None:  # not left training for the rest of its hour
                peer[0].terminate()
            raise SystemExit(f"error: training lever {lever} failed (exit {process.returncode}): {log.name}")
        log.close()

    # Scoring: each lever's variants in turn, one process at a time on all of the threads the runs had (the
    # peer, if any, decodes on its own threads meanwhile).
    env["OMP_NUM_THREADS"] = str(args.threads * len(args.levers))
    scores = []
    for lever in args.levers:
        checkpoint = args.out / lever / "runs/multi30k/version_0/checkpoints/last.ckpt"
        if not args.dry_run:
            checkpoint = last_checkpoint(args.out, lever)
        scored = []  # (BLEU on val, variant, weights)
        for variant in VARIANTS.get(lever, LAST):
            weights = checkpoint
            if variant.raw:
                weights = raw_path(checkpoint) if args.dry_run else raw_weights(checkpoint)
            result = score(lever, weights, variant, "val", env, args.dry_run)
            if result is not None:
                scores.append(result)
                scored.append((result["bleu"], variant, weights))
        if args.test:  # the best variant on val, once on each test set (the first variant in a dry run)
            _, variant, weights = max(scored, key=lambda s: s[0]) if scored else (0, LAST[0], checkpoint)
            for split in TEST_SPLITS:
                result = score(lever, weights, variant, split, env, args.dry_run)
                scores += [result] if result is not None else []
    if args.dry_run:
        return 0
    failed = None  # the peer's failure, said after the levers' scores are written
    if peer is not None:
        process, log = peer
        if process.wait() != 0:
            failed = f"error: {args.beside}'s run failed (exit {process.returncode}): {log.name}"
        log.close()
    if args.beside and failed is None and (args.out / args.beside / "result.json").is_file():
        scores.append(peer_row(args.beside, args.out))
    with open(args.out / "scores.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in scores)
    print(f"\n{'lever':<12} {'variant':<22} {'split':<11} {'BLEU':>5} {'chrF':>5}")
    for r in scores:
        print(f"{r['lever']:<12} {r['variant']:<22} {r['split']:<11} {r['bleu']:5.1f} {r['chrf']:5.1f}")
    if failed is not None:
        print(failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
