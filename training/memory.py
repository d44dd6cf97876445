"""Host memory of a run: what a validation or an epoch freed goes back to the system, and every validation
logs the resident size.

glibc's ``malloc`` keeps freed memory in its heap for the next allocation. A validation (decoding, the
attention logger's passes, the explanation methods' backward passes) allocates tensors of other shapes than
training, and what it frees stays resident, scattered between live blocks, so a run's resident size grew at
every validation and never came down (docs/performance.md has the figures). ``malloc_trim(0)`` hands the free
pages back at the two moments where the most is free: after each validation and after each training epoch.
It costs milliseconds. (Fixing glibc's mmap threshold instead, so that every large tensor is unmapped when
freed, kept the resident size flat too but made the default run's CPU time 1.27× for the page faults.)

In bf16-mixed on a CPU, matrix products run in oneDNN, and every kernel ("primitive") built for them is kept
twice over, keyed by the matrices' shapes: in oneDNN's own cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) and in
that of ideep, PyTorch's layer over oneDNN (``LRU_CACHE_CAPACITY``), each of 1,024 by default; a kernel is
freed only when both have let it go. Training on packed tokens gives nearly every batch shapes of its own, so
the caches fill with kernels that are never used again: in a bf16-mixed epoch of the default model the memory
in use grew by 210 MB with either cache at 1,024, and stayed flat with both at 64, 32 or 16, for the same CPU
time (docs/performance.md). ``bound_kernel_cache`` keeps 16 in each, enough for the shapes one step reuses
across its layers and its backward pass; the smaller the caches, the lower a step's peak.
"""

import ctypes
import ctypes.util
import os
import sys

import lightning as L

try:
    import resource  # POSIX only
except ImportError:
    resource = None


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library is not glibc (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


# Read when the first kernel is built: oneDNN's cache, and ideep's (PyTorch's layer over oneDNN).
KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
KERNEL_CACHE = 16


def bound_kernel_cache() -> None:
    """Cap both kernel caches (``KERNEL_CACHES``) at ``KERNEL_CACHE`` kernels each, unless the environment
    already sets them. Call before the process's first matrix product (train.py does, first thing);
    processes it starts inherit it."""
    for variable in KERNEL_CACHES:
        os.environ.setdefault(variable, str(KERNEL_CACHE))


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the system; True where that is possible (glibc)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def resident_mb() -> float | None:
    """This process's resident memory now, in MB (Linux); None elsewhere."""
    if resource is None:
        return None
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return None


def peak_resident_mb() -> float | None:
    """This process's largest resident memory so far, in MB, as ``/usr/bin/time -v`` reports it; None where
    Python has no ``resource`` module (Windows)."""
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


class HostMemory(L.Callback):
    """Release freed memory after every validation and training epoch, and log ``memory/resident_mb`` (after
    the release) and ``memory/peak_resident_mb`` (so far) at every validation. Read on the host; the device
    is never asked."""

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        release_freed_memory()  # train.py puts this callback last: after the attention logger's work
        now = resident_mb()
        if trainer.sanity_checking or now is None:
            return
        pl_module.log("memory/resident_mb", now, rank_zero_only=True)
        pl_module.log("memory/peak_resident_mb", peak_resident_mb(), rank_zero_only=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        release_freed_memory()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        release_freed_memory()
