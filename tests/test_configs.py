"""The config files parse, and configs/default.yaml says exactly what `python train.py` does without
options."""

import contextlib
import dataclasses
import inspect
import io
import os
import subprocess
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
            ours = dataclasses.asdict(code[key]) if dataclasses.is_dataclass(code[key]) else code[key]
            if isinstance(value, dict):  # a group of options (data.toy): the fields it names
                ours = {name: ours[name] for name in value}
            assert ours == value, f"{section}.{key}: default.yaml says {value!r}, the code {ours!r}"
    trainer = trainer_defaults()
    for key, value in config["trainer"].items():
        assert trainer[key] == value, f"trainer.{key}"


def print_config(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``train.py ARGS --print_config`` run in ``folder``, in this process (a fresh interpreter a call costs
    seconds of imports): its exit status, standard output and error as a subprocess's would be."""
    from train import main

    out, err, here = io.StringIO(), io.StringIO(), Path.cwd()
    os.chdir(folder)  # contextlib.chdir is Python 3.11's
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([*args, "--print_config"])
        code = 0
    except SystemExit as done:  # what the interpreter does with it: a message to stderr and status 1
        code = done.code if isinstance(done.code, int) or done.code is None else 1
        if isinstance(done.code, str):
            print(done.code, file=err)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["train.py", *args, "--print_config"], code or 0, out.getvalue(),
                                       err.getvalue())


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_config_parses(name):
    """``--print_config`` parses and validates a config file without building anything."""
    done = print_config(Path.cwd(), "--config", str(CONFIGS / name))
    assert done.returncode == 0, done.stderr[-2000:]
    config = yaml.safe_load(done.stdout)
    written = yaml.safe_load((CONFIGS / name).read_text())
    for section in ("model", "data"):
        for key, value in written.get(section, {}).items():
            if isinstance(value, dict):  # a group of options (data.toy): the fields it names
                assert {name: config[section][key][name] for name in value} == value
            else:
                assert config[section][key] == value




def test_the_toy_and_gold_groups_read_from_a_yaml_and_one_field_from_the_command_line(tmp_path):
    config = tmp_path / "grouped.yaml"
    config.write_text("data:\n  toy: {train_size: 2000, split: length}\n"
                      "  gold: {sentences: gold.src-tgt, alignments: gold.links}\n", encoding="utf-8")
    done = print_config(tmp_path, "--config", str(config), "--data.toy.split", "random",
                        "--data.gold.direction", "reversed")
    assert done.returncode == 0, done.stderr[-2000:]
    data = yaml.safe_load(done.stdout)["data"]
    assert data["toy"] == {"train_size": 2000, "val_size": 1000, "test_size": 1000, "split": "random",
                           "max_train_words": 12, "phenomena": False, "script": "latin"}
    assert data["gold"] == {"sentences": "gold.src-tgt", "alignments": "gold.links", "zero_based": False,
                            "direction": "reversed"}


def test_an_option_spelt_as_before_it_was_grouped_is_refused_naming_its_spelling_now(tmp_path):
    done = print_config(tmp_path, "--data.toy_train_size", "2000")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --data.toy_train_size is now --data.toy.train_size (CHANGELOG.md)")
    old = tmp_path / "old.yaml"
    old.write_text("data:\n  gold_sentences: gold.src-tgt\n", encoding="utf-8")
    done = print_config(tmp_path, "--config", str(old))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: --config {old}: data: gold_sentences is now data: gold: sentences (CHANGELOG.md)")
