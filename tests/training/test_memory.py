"""A run's resident memory stays flat: what a validation (decoding, attention logging, explanations) takes is
given back, and epochs do not pile it up."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import read_events
from training.memory import peak_resident_mb, release_freed_memory, resident_mb

ROOT = Path(__file__).resolve().parents[2]

# Trains in a fresh process (the allocator's state is the process's), recording the resident size before and
# after each validation; prints them as one JSON line.
PROBE = """
import json, sys
import train
from lightning.pytorch import Callback
from tests.conftest import read_events
from training.memory import resident_mb

rows = []

class Probe(Callback):
    def on_validation_epoch_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            rows.append({"before": resident_mb()})

    def on_validation_end(self, trainer, pl_module):  # after every callback's on_validation_epoch_end
        if not trainer.sanity_checking:
            rows[-1]["after"] = resident_mb()

defaults = train.trainer_defaults
train.trainer_defaults = lambda: {**defaults(), "callbacks": defaults()["callbacks"] + [Probe()]}
train.main(sys.argv[1:])
print("MEMORY " + json.dumps(rows))
"""


def test_resident_memory_is_read():
    now = resident_mb()
    if now is None:
        pytest.skip("resident memory is read from Linux's /proc")
    assert 10 < now <= peak_resident_mb() + 1  # MB: at least the interpreter, at most the peak so far


def test_releasing_hands_back_the_free_pages_between_live_blocks():
    if resident_mb() is None or not release_freed_memory():
        pytest.skip("needs Linux with glibc")
    blocks = [bytearray(100_000) for _ in range(3000)]  # 300 MB from the heap (each under 128 KiB)
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
    blocks = blocks[::20]  # free 19 of every 20: free space lies between the live blocks
    held = resident_mb()
    release_freed_memory()
    assert held - resident_mb() > 150, (held, resident_mb())  # most of the 285 MB freed goes back


@pytest.mark.slow
def test_validations_give_back_their_memory_and_epochs_do_not_pile_it_up(tmp_path):
    if resident_mb() is None or not release_freed_memory():
        pytest.skip("needs Linux with glibc")
    args = [
        "--data.toy.train_size", "3000", "--data.toy.val_size", "200", "--trainer.max_epochs", "5",
        "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--model.decode_max_sentences", "200", "--attention.explanation_sentences", "50",
    ]  # the default run's model, batches and attention logging at every validation, on less data
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.split("MEMORY ", 1)[1])
    assert len(rows) == 5
    for epoch, row in enumerate(rows):
        assert row["after"] - row["before"] < 60, (epoch, rows)
    after = [row["after"] for row in rows]
    assert max(after[1:]) - after[1] < 60, rows  # the second epoch's size holds (the first warms up)


def test_every_validation_logs_the_resident_size_and_the_benchmark_reads_it(tiny_run):
    if resident_mb() is None:
        pytest.skip("resident memory is read from Linux's /proc")
    from bench.memory import resident_per_validation

    logged = resident_per_validation(tiny_run.parent.parent)  # the save_dir: <save_dir>/tiny/version_N
    events = read_events(tiny_run)
    peaks = [e.value for e in events.Scalars("memory/peak_resident_mb")]
    assert len(logged) == 2 and len(peaks) == 2  # two epochs, a validation each (the sanity check logs none)
    assert all(100 < mb <= peak + 1 for (_, mb), peak in zip(logged, peaks, strict=True))
    assert peaks[0] <= peaks[1]


def test_where_the_resource_module_is_missing_memory_reads_none_and_train_still_imports(monkeypatch):
    import importlib

    monkeypatch.setitem(sys.modules, "resource", None)  # what `import resource` meets on Windows
    for name in ("training.memory", "train"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    memory = importlib.import_module("training.memory")
    importlib.import_module("train")
    assert memory.resident_mb() is None
    assert memory.peak_resident_mb() is None


def test_both_kernel_caches_are_bounded_unless_the_environment_sets_them(monkeypatch):
    from training.memory import KERNEL_CACHE, KERNEL_CACHES, bound_kernel_cache

    assert KERNEL_CACHES == ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    for name in KERNEL_CACHES:
        monkeypatch.delenv(name, raising=False)
    bound_kernel_cache()
    assert [os.environ[name] for name in KERNEL_CACHES] == [str(KERNEL_CACHE)] * 2
    monkeypatch.setenv(KERNEL_CACHES[0], "512")  # the user's own, for one of them
    monkeypatch.delenv(KERNEL_CACHES[1])
    bound_kernel_cache()
    assert [os.environ[name] for name in KERNEL_CACHES] == ["512", str(KERNEL_CACHE)]
