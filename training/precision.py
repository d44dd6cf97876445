"""The training precision chosen by the hardware: a pure decision over a small hardware description, and a
probe.

bf16 mixed precision pays only where the hardware computes in bf16 natively: NVIDIA GPUs of compute capability
8.0 (Ampere) or newer, x86 CPUs with AVX512-BF16 or AMX-BF16 and ARM CPUs with the BF16 extension. Elsewhere
bf16 is emulated, and slower than fp32, even where ``torch.cuda.is_bf16_supported()`` says True (it does for
emulated bf16), so the decision reads measurable facts: the GPU's compute capability and the CPU's
instruction-set flags. fp16 mixed precision needs the tensor cores of compute capability 7.0 (Volta) or newer;
older GPUs train in full precision.

The probe runs in the launching process, before Lightning starts its workers: it must not initialise CUDA
there, or ``--trainer.strategy ddp_fork`` / ``ddp_notebook`` could not fork afterwards. So it counts GPUs the
way ``torch.cuda.device_count`` does without initialising (NVML), and reads the compute capability from NVML
too, or, where NVML cannot answer, from a short-lived child process.
"""

import ctypes
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

AcceleratorKind = Literal["cuda", "mps", "cpu"]
# As /proc/cpuinfo names them: x86's AVX512-BF16 and AMX-BF16 in "flags", ARM's BF16 in "Features".
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
FP16_MIN_CAPABILITY = (7, 0)  # Volta: the first tensor cores, for fp16
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: native bf16


@dataclass(frozen=True)
class Hardware:
    """What the precision depends on.

    Args:
        accelerator: the device the run trains on.
        cuda_capability: ``(major, minor)`` compute capability of the GPU (``accelerator == "cuda"``); of
            several GPUs, the lowest, since every process of a run trains in the same precision.
        cpu_flags: the CPU's instruction-set flags; ``None`` where they could not be read (not Linux).
    """

    accelerator: AcceleratorKind
    cuda_capability: tuple[int, int] | None = None
    cpu_flags: frozenset[str] | None = field(default_factory=frozenset)


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # a value of ``Trainer(precision=...)``
    reason: str

    def describe(self) -> str:
        """The one line a run logs: ``precision: 32-true (why)``."""
        return f"precision: {self.precision} ({self.reason})"


def choose_precision(hardware: Hardware) -> PrecisionChoice:
    """The precision to train in on ``hardware``: bf16 mixed where bf16 is native, else fp16 mixed on a CUDA
    GPU and full precision on a CPU or an Apple GPU."""
    if hardware.accelerator == "cuda":
        if hardware.cuda_capability is None:
            raise ValueError("a CUDA accelerator needs its cuda_capability")
        major, minor = hardware.cuda_capability
        if hardware.cuda_capability >= BF16_MIN_CAPABILITY:
            return PrecisionChoice(
                "bf16-mixed", f"CUDA GPU of compute capability {major}.{minor}: native bf16"
            )
        if hardware.cuda_capability >= FP16_MIN_CAPABILITY:
            return PrecisionChoice(
                "16-mixed",
                f"CUDA GPU of compute capability {major}.{minor}, before 8.0: no native bf16, "
                "fp16 with loss scaling",
            )
        return PrecisionChoice(
            "32-true",
            f"CUDA GPU of compute capability {major}.{minor}, before 7.0: no tensor cores for fp16 or bf16",
        )
    if hardware.accelerator == "mps":
        # Lightning would run 16-mixed through torch's MPS autocast and gradient scaler, whose operator
        # coverage has lagged CUDA's; full precision is correct on every Apple GPU.
        return PrecisionChoice(
            "32-true", "Apple GPU (MPS): full precision, the mode supported without gaps there"
        )
    if hardware.accelerator != "cpu":
        raise ValueError(f"accelerator must be cuda, mps or cpu, got {hardware.accelerator!r}")
    if hardware.cpu_flags is None:
        return PrecisionChoice(
            "32-true", "CPU whose instruction-set flags cannot be read here: bf16 may be emulated"
        )
    native = [flag for flag in CPU_BF16_FLAGS if flag in hardware.cpu_flags]
    if native:
        return PrecisionChoice("bf16-mixed", f"CPU with {'/'.join(f.upper() for f in native)}: native bf16")
    return PrecisionChoice("32-true", "CPU without AVX512-BF16/AMX-BF16/BF16: bf16 would be emulated")


def cpu_flags_from_cpuinfo(text: str) -> frozenset[str]:
    """The ``flags`` of the first processor in the text of ``/proc/cpuinfo`` (x86; ARM calls them
    ``Features``)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def read_cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo", system: str | None = None) -> frozenset[str] | None:
    """This machine's CPU flags, or ``None`` off Linux or when ``cpuinfo`` cannot be read."""
    if (system or platform.system()) != "Linux":
        return None
    try:
        return cpu_flags_from_cpuinfo(Path(cpuinfo).read_text(errors="replace"))
    except OSError:
        return None


def cuda_device_count() -> int:
    """GPUs visible to torch, counted without initialising CUDA (``torch.cuda.device_count`` asks NVML
    first)."""
    return torch.cuda.device_count()


def accelerator_kind(accelerator: object) -> AcceleratorKind:
    """The device a run with ``--trainer.accelerator ACCELERATOR`` trains on, as Lightning picks it."""
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__.lower()
    name = name.lower()
    if name in ("cpu", "cpuaccelerator"):
        return "cpu"
    if name in ("cuda", "cudaaccelerator"):
        return "cuda"
    if name in ("mps", "mpsaccelerator"):
        return "mps"
    if name in ("gpu", "auto") or accelerator is None:
        # Not torch.cuda.is_available(): it initialises the CUDA driver unless PYTORCH_NVML_BASED_CUDA_CHECK
        # is set. Lightning itself asks device_count().
        if cuda_device_count() > 0:
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
    return "cpu"


def chosen_gpus(devices: object, count: int) -> list[int]:
    """The CUDA device indices a run with ``--trainer.devices DEVICES`` uses, of ``count`` visible, as
    Lightning reads the setting: "auto" or -1 all, a number N the first N, a list or "1,3" those indices."""
    if devices is None or devices in ("auto", -1, "-1"):
        return list(range(count))
    if isinstance(devices, int):
        return list(range(devices))
    if isinstance(devices, str):
        text = devices.strip()
        if "," not in text:
            return list(range(int(text)))
        return [int(part) for part in text.split(",") if part.strip()]
    return [int(index) for index in devices]  # type: ignore[union-attr]


def nvml_capabilities(indices: Sequence[int]) -> list[tuple[int, int]] | None:
    """The compute capability of each CUDA device (torch's index, through ``CUDA_VISIBLE_DEVICES``), read from
    NVML, which does not initialise CUDA; ``None`` where NVML cannot answer (no driver library, MIG)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        capabilities = []
        for index in indices:
            handle = ctypes.c_void_p()
            nvml_index = torch.cuda._get_nvml_device_index(index)  # torch's own mapping; no CUDA init
            if nvml.nvmlDeviceGetHandleByIndex_v2(nvml_index, ctypes.byref(handle)) != 0:
                return None
            major, minor = ctypes.c_int(), ctypes.c_int()
            if nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                return None
            capabilities.append((major.value, minor.value))
        return capabilities
    except (OSError, AttributeError, RuntimeError, ValueError):
        return None


def child_process_capabilities(indices: Sequence[int]) -> list[tuple[int, int]]:
    """The compute capability of each CUDA device, asked of a child Python process, so that CUDA is
    initialised there and not here."""
    code = (
        "import sys, torch\n"
        "for i in sys.argv[1:]:\n"
        "    print(*torch.cuda.get_device_capability(int(i)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, indices)],
        check=False, capture_output=True, text=True, timeout=300,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"could not read the GPUs' compute capability: {last}")
    return [(int(a), int(b)) for a, b in (line.split() for line in done.stdout.splitlines())]


def gpu_capabilities(indices: Sequence[int]) -> list[tuple[int, int]]:
    """The compute capability of each CUDA device of ``indices``, without initialising CUDA here."""
    found = nvml_capabilities(indices)
    return found if found is not None else child_process_capabilities(indices)


def probe_hardware(
    accelerator: object = "auto", devices: object = "auto", *, cpuinfo: str | Path = "/proc/cpuinfo"
) -> Hardware:
    """Describe the device that ``--trainer.accelerator ACCELERATOR --trainer.devices DEVICES`` trains on,
    from this machine, without initialising CUDA in this process."""
    kind = accelerator_kind(accelerator)
    if kind == "cuda":
        count = cuda_device_count()
        indices = [i for i in chosen_gpus(devices, count) if 0 <= i < count] or [0]
        return Hardware("cuda", cuda_capability=min(gpu_capabilities(indices)))
    if kind == "mps":
        return Hardware("mps")
    return Hardware("cpu", cpu_flags=read_cpu_flags(cpuinfo))
