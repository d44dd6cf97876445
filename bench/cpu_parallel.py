"""Training speed on a CPU: one process using every core, against DDP with one single-threaded process per
core.

    python bench/cpu_parallel.py --data-path ../shared/corpora/multi30k       # the Multi30k recipe
    python bench/cpu_parallel.py --config configs/default.yaml                # the toy run
    python bench/cpu_parallel.py --config configs/tiny.yaml --steps 10 --processes 2 -- --data.max_tokens 512

Both setups run ``train.py`` with the config (validation, decoding and attention logging off) for a fixed
number of updates; the first ``--warmup`` updates are not timed, and neither are start-up, data preparation
and tokenizer training. One DDP update takes one batch from every process, so the setups are compared on
target tokens (and batches) per second, not on updates.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L

REPO = Path(__file__).resolve().parents[1]
TIMING_DIR = "BENCH_TIMING_DIR"  # where each training process writes its figures
WARMUP_STEPS = "BENCH_WARMUP_STEPS"


class UpdateTimer(L.Callback):
    """Times the updates after the first ``$BENCH_WARMUP_STEPS`` and writes ``rank<R>.json`` to
    ``$BENCH_TIMING_DIR``."""

    def __init__(self) -> None:
        self.warmup = int(os.environ.get(WARMUP_STEPS, "0"))
        self.start: float | None = None
        self.end = 0.0
        self.batches = 0
        self.target_tokens = 0
        self.first_step = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start is None and trainer.global_step >= self.warmup:
            self.start, self.first_step = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.start is not None:
            self.end = time.perf_counter()
            self.batches += 1
            self.target_tokens += int((batch.tgt_out != pl_module.config.pad_id).sum())

    def on_train_end(self, trainer, pl_module) -> None:
        folder = os.environ.get(TIMING_DIR)
        if folder is None or self.start is None:
            return
        figures = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "updates": trainer.global_step - self.first_step,
            "batches": self.batches,
            "target_tokens": self.target_tokens,
            "seconds": self.end - self.start,
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
        }
        Path(folder, f"rank{trainer.global_rank}.json").write_text(json.dumps(figures))


@dataclass(frozen=True)
class Setup:
    name: str
    processes: int
    threads: int  # torch threads per process


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def setups(processes: int, cores: int) -> list[Setup]:
    return [Setup("one process", 1, cores), Setup("DDP", processes, 1)]


def train_command(setup: Setup, args: argparse.Namespace, out_dir: Path) -> list[str]:
    """The train.py command line of one setup."""
    command = [sys.executable, str(REPO / "train.py"), "--config", str(args.config.resolve())]
    if args.data_path is not None:
        command += ["--data.path", str(Path(args.data_path).resolve())]
    command += [
        "--trainer.accelerator", "cpu", "--trainer.devices", str(setup.processes),
        "--trainer.max_steps", str(args.warmup + args.steps), "--trainer.max_epochs", "-1",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0",
        "--trainer.enable_progress_bar", "false",
        "--model.decode_every_n_epochs", "0", "--attention.every_n_epochs", "0",
        "--trainer.logger.init_args.save_dir", str(out_dir / "runs"),
        "--trainer.default_root_dir", str(out_dir),
        "--trainer.callbacks+=bench.cpu_parallel.UpdateTimer",
    ]
    if setup.processes > 1:
        command += ["--trainer.strategy", "ddp"]
    return command + list(args.extra)


def measure(setup: Setup, args: argparse.Namespace, out_dir: Path) -> dict:
    """Run one setup; its figures summed over its processes (the slowest process's time)."""
    out_dir.mkdir(parents=True)
    env = {
        **os.environ, "OMP_NUM_THREADS": str(setup.threads), "PYTHONPATH": str(REPO),
        TIMING_DIR: str(out_dir), WARMUP_STEPS: str(args.warmup),
    }
    command = train_command(setup, args, out_dir)
    done = subprocess.run(command, check=False, cwd=out_dir, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"error: {setup.name} failed (exit {done.returncode}):\n{' '.join(command)}\n{tail}")
    ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("rank*.json"))]
    if len(ranks) != setup.processes:
        raise SystemExit(f"error: {setup.name}: {len(ranks)} of {setup.processes} processes reported figures")
    return combine(setup, ranks)


def combine(setup: Setup, ranks: list[dict]) -> dict:
    """One row from the figures of every process of a setup."""
    seconds = max(r["seconds"] for r in ranks)
    batches = sum(r["batches"] for r in ranks)
    tokens = sum(r["target_tokens"] for r in ranks)
    updates = ranks[0]["updates"]
    return {
        "setup": setup.name, "processes": setup.processes, "threads": setup.threads, "updates": updates,
        "batches": batches, "target_tokens": tokens, "seconds": seconds,
        "updates_per_s": updates / seconds, "batches_per_s": batches / seconds,
        "target_tokens_per_s": tokens / seconds,
    }


def table(rows: list[dict]) -> str:
    """A Markdown table; the ratio is each row's target tokens/s over the first row's."""
    lines = [
        (
            "| setup | processes x threads | updates | batches | target tokens | seconds | updates/s "
            "| batches/s | target tokens/s | ratio |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = rows[0]["target_tokens_per_s"]
    for row in rows:
        lines.append(
            f"| {row['setup']} | {row['processes']} x {row['threads']} | {row['updates']} | {row['batches']} "
            f"| {row['target_tokens']} | {row['seconds']:.2f} | {row['updates_per_s']:.2f} "
            f"| {row['batches_per_s']:.2f} | {row['target_tokens_per_s']:.0f} "
            f"| {row['target_tokens_per_s'] / base:.2f}x |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "multi30k.yaml",
                        help="train.py config (default: configs/multi30k.yaml)")
    parser.add_argument("--data-path", help="corpus folder (--data.path); needed for configs/multi30k.yaml")
    parser.add_argument("--processes", type=int, default=available_cores(),
                        help="DDP processes, one thread each (default: the cores this process may use)")
    parser.add_argument("--threads", type=int, default=available_cores(),
                        help="torch threads of the single process (default: the cores this process may use)")
    parser.add_argument("--steps", type=int, default=30, help="timed updates per setup (default: 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates first (default: 5)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    args.extra = extra
    if not args.config.is_file():
        parser.error(f"--config {args.config}: no such file")
    if args.data_path is not None and not Path(args.data_path).is_dir():
        parser.error(f"--data-path {args.data_path}: no such folder")
    if args.data_path is None and args.config.name == "multi30k.yaml" and not any(
        a.startswith("--data.path") for a in extra
    ):
        parser.error(
            "configs/multi30k.yaml needs --data-path (or --config configs/default.yaml for the toy data)"
        )
    for name in ("processes", "threads", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cpu_parallel_") as tmp:
        for number, setup in enumerate(setups(args.processes, args.threads)):
            print(f"{setup.name}: {setup.processes} process(es) x {setup.threads} thread(s), "
                  f"{args.warmup} + {args.steps} updates ...", file=sys.stderr)
            rows.append(measure(setup, args, Path(tmp) / f"setup{number}"))
    print(f"{args.config.name}, {available_cores()} cores available, torch threads as in the table")
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
