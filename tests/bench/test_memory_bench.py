"""bench/memory.py: each run's own peak resident size, and the precision the run trained in."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench.memory import logged_precision, main, wait_for_peak

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is read in KiB on Linux")

# A child that holds `mb` MB resident (written, so every page is touched), then exits.
HOLD = "import sys; block = bytearray(int(sys.argv[1]) * 2**20); block[::4096] = b'x' * len(block[::4096])"

# Started from a small process, as bench/memory.py is: a child's ru_maxrss counts what its parent held
# resident when it was spawned (until its exec the child shares the parent's pages); pytest's holds torch.
SIDE_BY_SIDE = f"""
import subprocess, sys
from bench.memory import wait_for_peak
small = subprocess.Popen([sys.executable, "-c", {HOLD!r}, "20"])
large = subprocess.Popen([sys.executable, "-c", {HOLD!r}, "220"])
large_gb = wait_for_peak(large)  # the larger one first: RUSAGE_CHILDREN would then report it for both
print(wait_for_peak(small), large_gb, small.returncode, large.returncode)
"""


def test_each_run_gets_its_own_peak_not_the_largest_of_all_children():
    command = [sys.executable, "-c", SIDE_BY_SIDE]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    small_gb, large_gb, small_code, large_code = done.stdout.split()
    assert (small_code, large_code) == ("0", "0")
    assert float(large_gb) - float(small_gb) > 0.15, done.stdout  # 200 MB apart, less the shared interpreter


def test_a_childs_exit_code_is_kept():
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    wait_for_peak(child)
    assert child.returncode == 3


def test_the_precision_is_read_from_the_runs_own_line():
    log = (
        "Seed set to 1234\n"
        "precision: 32-true (CPU without AVX512-BF16/AMX-BF16/BF16: bf16 would be emulated)\n"
        "validation BLEU: sacreBLEU, tokenize 13a\n"
    )
    assert logged_precision(log) == "32-true"
    assert logged_precision(log.replace("32-true", "bf16-mixed")) == "bf16-mixed"
    assert logged_precision("a run that never said\nthe precision: it chose\n") == "unknown"


def test_no_runs_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--runs", "0"])
    assert stopped.value.code == 2
    assert "--runs must be at least 1, got 0" in capsys.readouterr().err


def test_the_kernel_cache_option_reaches_the_runs_and_names_train_pys_default(tmp_path, monkeypatch, capsys):
    from bench import memory
    from training.memory import KERNEL_CACHE, KERNEL_CACHES

    assert (memory.KERNEL_CACHES, memory.KERNEL_CACHE) == (KERNEL_CACHES, KERNEL_CACHE)
    seen = {}

    def run_side_by_side(train_args, save_dirs, env=None):
        seen["env"] = env
        return [memory.Run(peak_gb=1.0, minutes=0.5, precision="bf16-mixed", resident_gb=[])]

    monkeypatch.setattr(memory, "run_side_by_side", run_side_by_side)
    for name in KERNEL_CACHES:
        monkeypatch.delenv(name, raising=False)
    memory.main(["--kernel-cache", "1024", "--out", str(tmp_path)])
    assert [seen["env"][name] for name in KERNEL_CACHES] == ["1024", "1024"]
    assert "kernel caches 1024 (oneDNN) and 1024 (ideep)" in capsys.readouterr().out
    memory.main(["--out", str(tmp_path)])
    assert seen["env"] is None  # train.py's own default
    assert f"kernel caches {KERNEL_CACHE} (oneDNN) and {KERNEL_CACHE} (ideep)" in capsys.readouterr().out
