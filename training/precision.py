"""The training precision chosen by the hardware: a pure decision over a small hardware description, and a
probe.

bf16 mixed precision pays only where the hardware computes in bf16 natively: NVIDIA GPUs of compute capability
8.0 (Ampere) or newer, and CPUs with AVX512-BF16 or AMX-BF16. Elsewhere bf16 is emulated, and slower than
fp32, even where ``torch.cuda.is_bf16_supported()`` says True (it does for emulated bf16), so the decision
reads measurable facts: the GPU's compute capability and the CPU's instruction-set flags.
"""

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

AcceleratorKind = Literal["cuda", "mps", "cpu"]
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # as /proc/cpuinfo names them


@dataclass(frozen=True)
class Hardware:
    """What the precision depends on.

    Args:
        accelerator: the device the run trains on.
        cuda_capability: ``(major, minor)`` compute capability of the GPU (``accelerator == "cuda"``).
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
        if hardware.cuda_capability >= (8, 0):
            return PrecisionChoice(
                "bf16-mixed", f"CUDA GPU of compute capability {major}.{minor}: native bf16"
            )
        return PrecisionChoice(
            "16-mixed",
            f"CUDA GPU of compute capability {major}.{minor}, before 8.0: no native bf16, "
            "fp16 with loss scaling",
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
    return PrecisionChoice("32-true", "CPU without AVX512-BF16/AMX-BF16: bf16 would be emulated")


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


def accelerator_kind(accelerator: object) -> AcceleratorKind:
    """The device a run with ``--trainer.accelerator ACCELERATOR`` trains on, as Lightning picks it."""
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__.lower()
    name = name.lower()
    if name in ("cpu", "cpuaccelerator"):
        return "cpu"
    cuda = torch.cuda.is_available()
    mps = torch.backends.mps.is_available()
    if name in ("cuda", "cudaaccelerator"):
        return "cuda"
    if name in ("mps", "mpsaccelerator"):
        return "mps"
    if name in ("gpu", "auto") or accelerator is None:
        if cuda:
            return "cuda"
        if mps:
            return "mps"
    return "cpu"


def probe_hardware(accelerator: object = "auto", *, cpuinfo: str | Path = "/proc/cpuinfo") -> Hardware:
    """Describe the device that ``--trainer.accelerator ACCELERATOR`` trains on, from this machine."""
    kind = accelerator_kind(accelerator)
    if kind == "cuda":
        return Hardware("cuda", cuda_capability=tuple(torch.cuda.get_device_capability()))  # type: ignore[arg-type]
    if kind == "mps":
        return Hardware("mps")
    return Hardware("cpu", cpu_flags=read_cpu_flags(cpuinfo))
