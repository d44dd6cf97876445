"""Peak resident memory of training runs, the precision each trained in, and their resident size after every
validation.

    python bench/memory.py                                        # the default run (python train.py)
    python bench/memory.py --runs 3                               # three default runs, side by side
    python bench/memory.py -- --config configs/multi30k.yaml --data.path ../shared/corpora/multi30k
    python bench/memory.py --out runs_memory -- --trainer.max_epochs 3   # what follows -- goes to train.py
    python bench/memory.py --kernel-cache 1024                    # oneDNN's and ideep's own kernel caches

Runs ``train.py`` with the options after ``--`` in ``--runs`` child processes at once (each run under its own
folder of ``--out``, a temporary folder by default; its output in ``train.log`` there) and prints, for each,
its peak resident size as ``/usr/bin/time -v`` reports it (the child's own ``ru_maxrss``), the precision the
run trained in (its ``precision:`` line: chosen by the hardware unless ``--trainer.precision`` says), and the
``memory/resident_mb`` that the run logged after each validation (``training.memory.HostMemory``): a run whose
memory stays flat shows about the same figure at every epoch.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# training.memory's, not imported from there: it imports Lightning, and a child's ru_maxrss counts what this
# process held when it was spawned (tests/bench/test_memory_bench.py holds them equal).
KERNEL_CACHES, KERNEL_CACHE = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"), 16
PRECISION_LINE = re.compile(r"^precision: (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    peak_gb: float  # the child's largest resident size (ru_maxrss), in GB (2^30 bytes)
    minutes: float
    precision: str  # as the run logged it ("32-true", "bf16-mixed", ...), or "unknown"
    resident_gb: list[float]  # after each validation


def resident_per_validation(save_dir: Path) -> list[tuple[int, float]]:
    """(step, MB) of every ``memory/resident_mb`` the newest run under ``save_dir`` logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = sorted(save_dir.glob("*/version_*"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return []
    events = EventAccumulator(str(runs[-1]), size_guidance={"scalars": 0})
    events.Reload()
    if "memory/resident_mb" not in events.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in events.Scalars("memory/resident_mb")]


def logged_precision(log: str) -> str:
    """The precision a run's output names on its ``precision: …`` line, or "unknown"."""
    found = PRECISION_LINE.search(log)
    return found.group(1) if found else "unknown"


def wait_for_peak(child: subprocess.Popen) -> float:
    """Wait for ``child`` to end (its exit code then in ``child.returncode``) and return its own peak resident
    size in GB: ``os.wait4``'s, where ``getrusage(RUSAGE_CHILDREN)`` gives the largest of all children. Linux
    counts in it the processes the child waited for (data loader workers, where a run has them): the largest
    of the child's and theirs, not their sum."""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 2**20  # KiB on Linux


def run_side_by_side(train_args: list[str], save_dirs: list[Path], env: dict[str, str] | None = None
                     ) -> list[Run]:
    """Run ``train.py train_args`` once per folder of ``save_dirs``, all at once, each logging there, with
    ``env`` as their environment (None: this one's)."""
    # Spawned while this process is small (tensorboard is imported only to read the logs, afterwards): a
    # child's ru_maxrss counts what its parent held resident when it was spawned.
    children = []
    for save_dir in save_dirs:
        save_dir.mkdir(parents=True, exist_ok=True)
        logs = ["--trainer.logger.init_args.save_dir", str(save_dir)]
        command = [sys.executable, "train.py", *train_args, *logs]
        log = open(save_dir / "train.log", "w")  # noqa: SIM115 (closed when the child has ended)
        child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        children.append((child, log))
    start = time.perf_counter()
    runs = []
    for (child, log), save_dir in zip(children, save_dirs, strict=True):
        peak_gb = wait_for_peak(child)
        log.close()
        output = (save_dir / "train.log").read_text(errors="replace")
        if child.returncode != 0:
            for other, _ in children:
                if other.poll() is None:
                    other.terminate()  # the runs beside it would go on unwatched
            tail = "\n".join(output.splitlines()[-5:])
            where = save_dir / "train.log"
            raise SystemExit(f"error: train.py exited with {child.returncode} (its output: {where}):\n{tail}")
        runs.append(
            Run(
                peak_gb=peak_gb,
                minutes=(time.perf_counter() - start) / 60,
                precision=logged_precision(output),
                resident_gb=[mb / 1024 for _, mb in resident_per_validation(save_dir)],
            )
        )
    return runs


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours, train_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--runs", type=int, default=1, help="runs side by side (default: 1)")
    parser.add_argument("--kernel-cache", type=int, metavar="N",
                        help=f"the kernel caches of the runs ({' and '.join(KERNEL_CACHES)}; train.py's "
                             f"default {KERNEL_CACHE} each, oneDNN's and ideep's own 1024): the bf16-mixed "
                             "peak with and without")
    args = parser.parse_args(ours)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if sys.platform != "linux":
        parser.error("the peak resident size is read with os.wait4's ru_maxrss, in KiB on Linux only")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        env = None if args.kernel_cache is None else (
            os.environ | dict.fromkeys(KERNEL_CACHES, str(args.kernel_cache)))
        runs = run_side_by_side(train_args, [out / f"run{i + 1}" for i in range(args.runs)], env)
    caches = [os.environ.get(name, KERNEL_CACHE) if args.kernel_cache is None else args.kernel_cache
              for name in KERNEL_CACHES]
    print(f"train.py {' '.join(train_args)}".rstrip() + f": {len(runs)} run(s) side by side, kernel caches "
          f"{caches[0]} (oneDNN) and {caches[1]} (ideep)")
    for i, run in enumerate(runs, 1):
        print(f"run {i}: {run.precision}, {run.minutes:.1f} min, peak resident {run.peak_gb:.2f} GB")
        if run.resident_gb:
            print("  resident after each validation, GB: " + ", ".join(f"{gb:.2f}" for gb in run.resident_gb))
    peaks = [run.peak_gb for run in runs]
    if len(runs) > 1:
        print(f"peak resident over {len(runs)} runs: {min(peaks):.2f}–{max(peaks):.2f} GB")


if __name__ == "__main__":
    main()
