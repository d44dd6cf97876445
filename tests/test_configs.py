"""The config files parse, and configs/default.yaml says exactly what `python train.py` does without
options."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from data.datamodule import TranslationDataModule
from train import trainer_defaults
from training.module import TranslationModule
from viz.logger import AttentionLogger

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def defaults(cls) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_default_yaml_matches_the_code_defaults():
    config = yaml.safe_load((CONFIGS / "default.yaml").read_text())
    for section, cls in (
        ("model", TranslationModule), ("data", TranslationDataModule), ("attention", AttentionLogger)
    ):
        code = defaults(cls)
        for key, value in config[section].items():
            assert code[key] == value, f"{section}.{key}: default.yaml says {value!r}, the code {code[key]!r}"
    trainer = trainer_defaults()
    for key, value in config["trainer"].items():
        assert trainer[key] == value, f"trainer.{key}"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_config_parses(name):
    """``--print_config`` parses and validates a config file without building anything."""
    done = subprocess.run(
        [sys.executable, str(CONFIGS.parent / "train.py"), "--config", str(CONFIGS / name), "--print_config"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    config = yaml.safe_load(done.stdout)
    written = yaml.safe_load((CONFIGS / name).read_text())
    for section in ("model", "data"):
        for key, value in written.get(section, {}).items():
            assert config[section][key] == value
