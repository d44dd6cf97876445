"""The precision chosen by the hardware: the decision over faked hardware, the probe over a fake machine, and
the choice reaching the Trainer of train.py (or yielding to --trainer.precision)."""

import logging
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, TINY_CONFIG, train_tiny
from training import precision as precision_module
from training.cli import resolve_precision
from training.precision import (
    Hardware,
    PrecisionChoice,
    choose_precision,
    chosen_gpus,
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
        (Hardware("cuda", cuda_capability=(7, 0)), "16-mixed", "7.0, before 8.0: no native bf16, fp16"),
        (Hardware("cuda", cuda_capability=(6, 1)), "32-true", "6.1, before 7.0: no tensor cores"),
        (Hardware("cuda", cuda_capability=(3, 7)), "32-true", "3.7, before 7.0"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"avx512_bf16"}), "bf16-mixed", "AVX512_BF16: native bf16"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"amx_bf16", "amx_tile"}), "bf16-mixed", "AMX_BF16: native"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY | {"avx512f"}), "32-true", "bf16 would be emulated"),
        (Hardware("cpu", cpu_flags=AVX2_ONLY), "32-true", "without AVX512-BF16/AMX-BF16"),
        (Hardware("cpu", cpu_flags=frozenset({"fp", "asimd", "bf16"})), "bf16-mixed", "BF16: native bf16"),
        (Hardware("cpu", cpu_flags=frozenset({"fp", "asimd", "sve"})), "32-true", "would be emulated"),
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


def fake_gpus(monkeypatch, *capabilities: tuple[int, int]) -> list[list[int]]:
    """A (faked) machine with GPUs of these compute capabilities, on which initialising CUDA fails the test;
    the lists of device indices whose capability the probe asked for."""
    asked: list[list[int]] = []

    def capabilities_of(indices):
        asked.append(list(indices))
        return [capabilities[i] for i in indices]

    def no_init(*args, **kwargs):
        raise AssertionError("the precision probe initialised CUDA in the launching process")

    monkeypatch.setattr(precision_module, "cuda_device_count", lambda: len(capabilities))
    monkeypatch.setattr(precision_module, "gpu_capabilities", capabilities_of)
    for name in ("_lazy_init", "is_available", "get_device_capability", "get_device_properties", "init"):
        monkeypatch.setattr(torch.cuda, name, no_init)
    return asked


def test_probe_follows_the_accelerator_chosen(tmp_path, monkeypatch):
    """On a (faked) machine with a Volta GPU: the GPU unless --trainer.accelerator cpu says otherwise."""
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.replace(" avx512_bf16", ""))
    monkeypatch.setattr(precision_module.platform, "system", lambda: "Linux")
    fake_gpus(monkeypatch, (7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulated bf16 says True too
    for accelerator in ("auto", "gpu", "cuda", None):
        assert probe_hardware(accelerator, cpuinfo=path) == Hardware("cuda", cuda_capability=(7, 0))
    assert choose_precision(probe_hardware("auto", cpuinfo=path)).precision == "16-mixed"
    cpu = probe_hardware("cpu", cpuinfo=path)
    assert cpu.accelerator == "cpu"
    assert choose_precision(cpu).precision == "32-true"


@pytest.mark.parametrize(
    "devices, asked, expected",
    [
        ("auto", [0, 1, 2], "32-true"),  # every GPU: the Pascal one sets the precision of all
        (-1, [0, 1, 2], "32-true"),
        (1, [0], "bf16-mixed"),
        ("2", [0, 1], "32-true"),  # a number as a string: the first two
        ([2], [2], "16-mixed"),
        ("0,2", [0, 2], "16-mixed"),  # the lowest of an A100 and a T4
        ("2,", [2], "16-mixed"),
        ([0], [0], "bf16-mixed"),
    ],
)
def test_probe_looks_at_the_gpus_the_run_uses(monkeypatch, devices, asked, expected):
    """An A100 (8.0), a P100 (6.0) and a T4 (7.5): --trainer.devices decides which count."""
    calls = fake_gpus(monkeypatch, (8, 0), (6, 0), (7, 5))
    choice = resolve_precision(None, "auto", devices)
    assert calls == [asked]
    assert choice.precision == expected


def test_gpus_are_chosen_as_lightning_reads_the_devices_setting():
    assert chosen_gpus("auto", 4) == [0, 1, 2, 3]
    assert chosen_gpus(None, 2) == [0, 1]
    assert chosen_gpus(3, 4) == [0, 1, 2]
    assert chosen_gpus("3", 4) == [0, 1, 2]
    assert chosen_gpus("1,3", 4) == [1, 3]
    assert chosen_gpus([3, 1], 4) == [3, 1]


def test_capabilities_come_from_a_child_process_when_nvml_cannot_answer(monkeypatch):
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="7 5\n8 6\n", stderr="")

    monkeypatch.setattr(precision_module, "nvml_capabilities", lambda indices: None)
    monkeypatch.setattr(precision_module.subprocess, "run", fake_run)
    assert precision_module.gpu_capabilities([1, 3]) == [(7, 5), (8, 6)]
    assert commands[0][0] == sys.executable and commands[0][-2:] == ["1", "3"]
    monkeypatch.setattr(
        precision_module.subprocess, "run",
        lambda command, **kwargs: subprocess.CompletedProcess(command, 1, "", "RuntimeError: no driver\n"),
    )
    with pytest.raises(RuntimeError, match="compute capability: RuntimeError: no driver"):
        precision_module.gpu_capabilities([0])


def test_nvml_without_its_library_answers_none(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(precision_module.ctypes, "CDLL", missing)
    assert precision_module.nvml_capabilities([0]) is None


def test_the_probe_leaves_cuda_uninitialised_in_a_fresh_process():
    """The real probe, in a process of its own: whatever the machine has, CUDA is not initialised after it."""
    code = (
        "import torch\n"
        "from training.cli import resolve_precision\n"
        "print(resolve_precision(None, 'auto', 'auto').precision)\n"
        "assert not torch.cuda.is_initialized(), 'CUDA initialised'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


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
    from train import main

    return main([
        "--config", TINY_CONFIG, "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.default_root_dir", str(tmp_path), "--trainer.fast_dev_run", "true", *extra,
    ])


def test_the_hardware_choice_reaches_the_trainer_and_is_logged(tmp_path, logged):
    expected = choose_precision(probe_hardware("cpu"))  # configs/tiny.yaml trains on the CPU
    cli = run_fast(tmp_path)
    assert cli.trainer.precision == expected.precision
    assert cli.config.trainer.precision is None  # config.yaml records "the hardware's choice", not the choice
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


def test_auto_in_a_yaml_config_means_the_hardware_choice(tmp_path):
    config = tmp_path / "auto.yaml"
    config.write_text("trainer:\n  precision: auto\n")
    cli = run_fast(tmp_path, "--config", str(config))
    assert cli.trainer.precision == choose_precision(probe_hardware("cpu")).precision
    assert cli.config.trainer.precision == "auto"


def test_resume_chooses_again_on_the_new_machine(tmp_path, monkeypatch):
    """A run whose precision was chosen automatically on a CPU with bf16, resumed on one without: the resumed
    run trains in fp32, and its config still says "chosen by the hardware"."""
    from training import cli as cli_module

    bf16_cpu = Hardware("cpu", cpu_flags=AVX2_ONLY | {"avx512_bf16"})
    monkeypatch.setattr(cli_module, "probe_hardware", lambda *args, **kwargs: bf16_cpu)
    run = train_tiny(tmp_path, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
                     "--trainer.limit_val_batches", "1", "--model.decode_every_n_epochs", "0",
                     "--attention.every_n_epochs", "0")
    assert "precision: null" in (run / "config.yaml").read_text()
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] == 2

    monkeypatch.setattr(cli_module, "probe_hardware", lambda *args, **kwargs: Hardware("cpu", AVX2_ONLY))
    from train import main

    resumed = main(["--resume", str(run), "--trainer.max_epochs", "2"])
    assert resumed.trainer.precision == "32-true"
    first = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert first["global_step"] == 4  # it trained on, from the checkpoint
