"""Peak resident memory of a training run, and its resident size after every validation.

    python bench/memory.py                                        # the default run (python train.py)
    python bench/memory.py -- --config configs/multi30k.yaml --data.path ../shared/corpora/multi30k
    python bench/memory.py --out runs_memory -- --trainer.max_epochs 3   # what follows -- goes to train.py

Runs ``train.py`` with the options after ``--`` in a child process (its run under ``--out``, a temporary
folder by default) and prints the child's peak resident size as ``/usr/bin/time -v`` reports it
(``ru_maxrss``), then the ``memory/resident_mb`` that the run logged after each validation
(``training.memory.HostMemory``): a run whose memory stays flat shows about the same figure at every epoch.
"""

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ours, train_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the run goes (default: a temporary folder)")
    args = parser.parse_args(ours)
    with tempfile.TemporaryDirectory() as scratch:
        save_dir = args.out or Path(scratch)
        logs = ["--trainer.logger.init_args.save_dir", str(save_dir)]
        command = [sys.executable, "train.py", *train_args, *logs]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, check=False)
        minutes = (time.perf_counter() - start) / 60
        if done.returncode != 0:
            raise SystemExit(f"error: train.py exited with {done.returncode}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux
        resident = resident_per_validation(save_dir)
    print(f"train.py {' '.join(train_args)}: {minutes:.1f} min, peak resident {peak / 1024:.2f} GB")
    if resident:
        print("resident after each validation, GB: " + ", ".join(f"{mb / 1024:.2f}" for _, mb in resident))


if __name__ == "__main__":
    main()
