"""The precision chosen by the hardware: the decision over faked hardware, the probe over a fake machine, and
the choice reaching the Trainer of train.py (or yielding to --trainer.precision)."""

import logging

import pytest
import torch

from tests.conftest import TINY_CONFIG
from training import precision as precision_module
from training.cli import resolve_precision
from training.precision import (
    Hardware,
    PrecisionChoice,
    choose_precision,
    cpu_flags_from_cpuinfo,
    probe_hardware,
    read_cpu_flags,
)

AVX2_ONLY = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu vme sse2 avx avx2 fma avx512f avx512_bf16 avx512_vnni
bogomips\t: 5200.00

processor\t: 1
flags\t\t: fpu sse2
"""


@pytest.mark.parametrize(
    "hardware, expected, why",
    [
        (Hardware("cuda", cuda_capability=(9, 0)), "bf16-mixed", "compute capability 9.0: native bf16"),
        (Hardware("cuda", cuda_capability=(8, 0)), "bf16-mixed", "compute capability 8.0: native bf16"),
        (Hardware("cuda", cuda_capability=(8, 6)), "bf16-mixed", "8.6: native bf16"),
        (Hardware("cuda", cuda_capability=(7, 5)), "16-mixed", "7.5, before 8.0"),
        (Hardware("cuda", cuda_capability=(6, 0)), "16-mixed", "6.0, before 8.0"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"avx512_bf16"}), "bf16-mixed", "AVX512_BF16: native bf16"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"amx_bf16", "amx_tile"}), "bf16-mixed", "AMX_BF16: native"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"avx512f"}), "32-true", "bf16 would be emulated"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY), "32-true", "without AVX512-BF16/AMX-BF16"),
        (Hardware("cpu", cpu_flags=None), "32-true", "flags cannot be read"),
        (Hardware("mps"), "32-true", "MPS"),
    ],
)
def test_precision_follows_the_hardware(hardware, expected, why):
    choice = choose_precision(hardware)
    assert choice.precision == expected
    assert why in choice.reason
    assert choice.describe() == f"precision: {expected} ({choice.reason})"


def test_a_cuda_description_needs_its_capability():
    with pytest.raises(ValueError, match="cuda_capability"):
        choose_precision(Hardware("cuda"))


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    flags = cpu_flags_from_cpuinfo(CPUINFO)
    assert flags == {"fpu", "vme", "sse2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}
    assert cpu_flags_from_cpuinfo("Features\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}  # ARM's spelling
    assert cpu_flags_from_cpuinfo("processor: 0\n") == frozenset()
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert read_cpu_flags(path, system="Linux") == flags
    assert read_cpu_flags(path, system="Darwin") is None  # no /proc/cpuinfo off Linux
    assert read_cpu_flags(tmp_path / "missing", system="Linux") is None


def test_probe_describes_the_cpu_from_cpuinfo(tmp_path, monkeypatch):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    monkeypatch.setattr(precision_module.platform, "system", lambda: "Linux")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    hardware = probe_hardware("auto", cpuinfo=path)
    assert hardware == Hardware("cpu", cpu_flags=cpu_flags_from_cpuinfo(CPUINFO))
    assert choose_precision(hardware).precision == "bf16-mixed"
    path.write_text(CPUINFO.replace(" avx512_bf16", ""))
    assert choose_precision(probe_hardware("auto", cpuinfo=path)).precision == "32-true"


def test_probe_follows_the_accelerator_chosen(tmp_path, monkeypatch):
    """On a (faked) machine with a Volta GPU: the GPU unless --trainer.accelerator cpu says otherwise."""
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.replace(" avx512_bf16", ""))
    monkeypatch.setattr(precision_module.platform, "system", lambda: "Linux")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulated bf16 says True too
    for accelerator in ("auto", "gpu", "cuda", None):
        assert probe_hardware(accelerator, cpuinfo=path) == Hardware("cuda", cuda_capability=(7, 0))
    assert choose_precision(probe_hardware("auto", cpuinfo=path)).precision == "16-mixed"
    cpu = probe_hardware("cpu", cpuinfo=path)
    assert cpu.accelerator == "cpu"
    assert choose_precision(cpu).precision == "32-true"


def test_an_explicit_precision_is_kept():
    assert resolve_precision("bf16-mixed", "cpu") == PrecisionChoice(
        "bf16-mixed", "set by --trainer.precision or the config"
    )
    assert resolve_precision(None, "cpu") == choose_precision(probe_hardware("cpu"))
    assert resolve_precision("auto", "cpu") == choose_precision(probe_hardware("cpu"))


@pytest.fixture
def logged():
    """The messages Lightning's loggers (rank_zero_info among them) emit during the test."""
    messages: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.INFO)  # whatever an earlier test in this process set
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


def run_fast(tmp_path, *extra):
    from training.cli import main

    return main([
        "--config", TINY_CONFIG, "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.default_root_dir", str(tmp_path), "--trainer.fast_dev_run", "true", *extra,
    ])


def test_the_hardware_choice_reaches_the_trainer_and_is_logged(tmp_path, logged):
    expected = choose_precision(probe_hardware("cpu"))  # configs/tiny.yaml trains on the CPU
    cli = run_fast(tmp_path)
    assert cli.trainer.precision == expected.precision
    assert cli.config.trainer.precision == expected.precision  # what config.yaml records
    assert expected.describe() in logged


@pytest.mark.parametrize(
    "spelling", [["--trainer.precision", "bf16-mixed"], ["--trainer.precision=bf16-mixed"]]
)
def test_an_explicit_precision_wins_over_the_hardware(tmp_path, logged, spelling):
    cli = run_fast(tmp_path, *spelling)
    assert cli.trainer.precision == "bf16-mixed"
    assert "precision: bf16-mixed (set by --trainer.precision or the config)" in logged


def test_auto_on_the_command_line_means_the_hardware_choice(tmp_path):
    cli = run_fast(tmp_path, "--trainer.precision", "auto")
    assert cli.trainer.precision == choose_precision(probe_hardware("cpu")).precision
