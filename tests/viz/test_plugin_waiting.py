"""The ATTENTION tab lists every run from its first event: a run with no maps yet is listed under ``waiting``
with one line saying why and when its first maps come, read from the config.yaml it saved beside its
events."""

import os
import shutil

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from tests.helpers.tab_client import get, serve
from viz.tab.events import NO_PROBES, run_settings, waiting_note
from viz.tab.metadata import RUN_TAG
from viz.tab.summary import json_summary

GENERAL = "no attention logged yet: train.py logs a run's first maps at its first validation"


def training_run(folder, settings: dict | None = None, scalars=("train/loss",)):
    """A run folder as train.py leaves it before its first validation: scalars, and its config.yaml."""
    with SummaryWriter(str(folder)) as writer:
        for tag in scalars:
            writer.add_scalar(tag, 1.5, 5)
    if settings is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    return folder


TATOEBA = {"trainer": {"max_epochs": 40, "check_val_every_n_epoch": 1, "val_check_interval": None},
           "attention": {"every_n_epochs": 5}}
TATOEBA_NOTE = ("no attention logged yet: maps come at the first validation, after epoch 1 (every 5 epochs "
                "after, and at the end of training)")


def test_runs_lists_a_run_without_maps_with_when_its_first_maps_come(tmp_path, tiny_run):
    shutil.copytree(tiny_run, tmp_path / "toy", ignore=shutil.ignore_patterns("checkpoints"))
    training_run(tmp_path / "tatoeba" / "version_0", TATOEBA)
    training_run(tmp_path / "elsewhere")  # events of something else: no config.yaml
    client, _ = serve(tmp_path)
    answer = get(client, "/runs")
    assert [run["run"] for run in answer["runs"]] == ["toy"]
    assert answer["waiting"] == {
        "elsewhere": GENERAL,
        "tatoeba/version_0": TATOEBA_NOTE,
    }
    assert answer["skipped"] == {}


def test_a_run_that_started_training_is_listed_from_its_first_summary(tmp_path):
    folder = training_run(tmp_path / "run", TATOEBA)
    with SummaryWriter(str(folder)) as writer:  # what the attention logger writes as training starts
        writer.file_writer.add_summary(json_summary(RUN_TAG, {"every_n_epochs": 5}), 0)
    client, _ = serve(tmp_path)
    assert get(client, "/runs")["waiting"] == {"run": TATOEBA_NOTE}


def test_a_run_whose_summaries_hold_no_probe_is_waiting_not_dropped(tmp_path):
    with SummaryWriter(str(tmp_path / "run")) as writer:  # a probe's text, none of its maps
        writer.file_writer.add_summary(json_summary("attention/sentence_0/text", {"source": "a"}), 6)
    client, _ = serve(tmp_path)
    assert get(client, "/runs") == {"runs": [], "waiting": {"run": NO_PROBES}, "skipped": {}}


def test_a_run_that_validated_without_maps_says_when_they_come(tmp_path):
    training_run(tmp_path / "run", TATOEBA, scalars=("train/loss", "val/loss"))
    client, _ = serve(tmp_path)
    assert get(client, "/runs")["waiting"] == {
        "run": "no attention logged at its validations so far (attention.every_n_epochs: 5): maps come every "
               "5 epochs and at the end of training",
    }


END = "and at the end of training)"


@pytest.mark.parametrize(
    "trainer, attention, note",
    [
        ({}, {"every_n_epochs": 1}, f"after epoch 1 (at every validation after, {END}"),
        ({"check_val_every_n_epoch": 3}, {"every_n_epochs": 5},
         f"after epoch 3 (every 5 epochs after, {END}"),
        ({"val_check_interval": 0.25}, {"every_n_epochs": 2}, f"during epoch 1 (every 2 epochs after, {END}"),
        ({"val_check_interval": 200}, {}, f"after training batch 200 (at every validation after, {END}"),
    ],
)
def test_the_first_maps_come_when_the_saved_trainer_settings_say(trainer, attention, note):
    assert waiting_note({"trainer": trainer, "attention": attention}, validated=False) == (
        f"no attention logged yet: maps come at the first validation, {note}"
    )


def test_a_run_that_does_not_validate_has_its_maps_at_its_end():
    assert waiting_note({"trainer": {"limit_val_batches": 0}, "attention": {}}, validated=False) == (
        "no attention logged yet: this run does not validate (trainer.limit_val_batches: 0); maps come at "
        "its end"
    )


@pytest.mark.parametrize(
    "settings",
    [None, {}, {"attention": "five"}, {"attention": {"every_n_epochs": "5"}},
     {"attention": {"every_n_epochs": -1}}, {"attention": {}, "trainer": [1]}],
)
def test_settings_that_say_nothing_readable_give_the_general_line(settings):
    assert waiting_note(settings, validated=False) == GENERAL


def test_a_run_with_attention_logging_off_says_so():
    off = {"trainer": {}, "attention": {"every_n_epochs": 0}}
    assert waiting_note(off, validated=True) == (
        "attention logging is off in this run (attention.every_n_epochs: 0 in its config.yaml)"
    )


def test_run_settings_are_the_newest_saved_config_and_none_where_unreadable(tmp_path):
    assert run_settings(tmp_path) is None and run_settings(None) is None
    (tmp_path / "config.yaml").write_text("attention:\n  every_n_epochs: 5\n", encoding="utf-8")
    assert run_settings(tmp_path) == {"attention": {"every_n_epochs": 5}}
    resumed = tmp_path / "config.resumed-1.yaml"  # --resume with another period
    resumed.write_text("attention:\n  every_n_epochs: 2\n", encoding="utf-8")
    later = (tmp_path / "config.yaml").stat().st_mtime + 10
    os.utime(resumed, (later, later))
    assert run_settings(tmp_path) == {"attention": {"every_n_epochs": 2}}
    resumed.write_text("attention: [every_n_epochs: 2\n", encoding="utf-8")  # broken YAML
    os.utime(resumed, (later, later))
    assert run_settings(tmp_path) is None
    resumed.write_bytes(b"\xff\xfe")  # not UTF-8
    os.utime(resumed, (later, later))
    assert run_settings(tmp_path) is None
    resumed.write_text("- a list\n", encoding="utf-8")
    os.utime(resumed, (later, later))
    assert run_settings(tmp_path) is None
