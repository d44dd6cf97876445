"""A run's checkpoints (``training.checkpoints``): the one rule for a run's newest weights, which train.py
--resume, evaluate.py and the tab follow; a checkpoint path that is a folder named as one; and checkpoints
saved with earlier parameter names loading on every path that loads weights."""

import contextlib
import os
import re
import threading
from pathlib import Path

import pytest
import torch
from tensorboard.plugins import base_plugin

from model import Transformer
from tests.conftest import bomb, run_evaluate, tiny_config
from training import checkpoints
from training.checkpoint_io import check_resume_checkpoint
from training.checkpoints import (
    OLD_NORM_NAMES,
    CheckpointError,
    CheckpointMissing,
    CheckpointRefused,
    checkpoint_step,
    load_run,
    newest_checkpoint,
    read_checkpoint,
    upgrade_data_settings,
    upgrade_state_dict,
)
from training.module import TranslationModule


def saved(path, step, mtime):
    """A file that holds what the rule reads of a checkpoint (its global_step), written at time ``mtime``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step}, path)
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def run(tmp_path):
    """A run folder whose last.ckpt and latest epoch checkpoint are at step 20 (time 2000)."""
    folder = tmp_path / "logs" / "run"
    saved(folder / "checkpoints" / "epoch0-step10.ckpt", 10, 1000)
    saved(folder / "checkpoints" / "epoch1-step20.ckpt", 20, 2000)
    saved(folder / "checkpoints" / "last.ckpt", 20, 2000)
    return folder


def test_last_ckpt_is_the_newest_weights_of_a_finished_run(run):
    assert newest_checkpoint(run) == run / "checkpoints" / "last.ckpt"
    assert newest_checkpoint(run / "checkpoints") == run / "checkpoints" / "last.ckpt"


def test_an_interrupt_saved_after_last_with_more_steps_wins(run):
    interrupted = saved(run / "checkpoints" / "interrupted.ckpt", 27, 3000)
    assert newest_checkpoint(run) == interrupted


def test_an_interrupt_from_before_the_latest_save_never_wins(run):
    """Stopped at step 27, resumed from an earlier checkpoint and saved again since: the old interrupt is
    stale, although it holds more steps."""
    saved(run / "checkpoints" / "interrupted.ckpt", 27, 1500)
    assert newest_checkpoint(run) == run / "checkpoints" / "last.ckpt"


def test_an_interrupt_after_last_at_its_step_wins_the_tie(run):
    """Stopped with the first batch of an epoch in flight: nothing trained since last.ckpt, but the interrupt
    holds where the next epoch stands, and it is what the run's last line told to resume from."""
    interrupted = saved(run / "checkpoints" / "interrupted.ckpt", 20, 3000)
    assert newest_checkpoint(run) == interrupted


def test_without_last_the_checkpoint_of_most_steps_wins_whatever_its_time(run):
    (run / "checkpoints" / "last.ckpt").unlink()
    os.utime(run / "checkpoints" / "epoch0-step10.ckpt", (5000, 5000))  # touched later, fewer steps
    assert newest_checkpoint(run) == run / "checkpoints" / "epoch1-step20.ckpt"
    interrupted = saved(run / "checkpoints" / "interrupted.ckpt", 25, 100)
    assert newest_checkpoint(run) == interrupted


def test_no_checkpoint_and_unreadable_ones_are_named(run, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointMissing, match="no checkpoint yet in"):
        newest_checkpoint(tmp_path / "empty")
    with pytest.raises(CheckpointMissing, match="no such run folder"):
        newest_checkpoint(tmp_path / "nowhere")
    for path in (run / "checkpoints").iterdir():
        path.write_bytes(b"half a file")
    with pytest.raises(CheckpointError, match=r"no readable checkpoint in .*\(epoch0-step10.ckpt"):
        newest_checkpoint(run)


def test_a_checkpoint_cut_short_is_skipped_with_a_one_line_warning(run, caplog):
    """A full disk left a truncated best-*.ckpt, and --resume refused the whole run though last.ckpt was
    whole."""
    best = run / "checkpoints" / "best-epoch1-step20.ckpt"
    torch.save({"global_step": 20}, best)
    best.write_bytes(best.read_bytes()[:100])
    assert newest_checkpoint(run) == run / "checkpoints" / "last.ckpt"
    assert [record.getMessage() for record in caplog.records] == [
        f"warning: skipping {best}: not a checkpoint (not a PyTorch zip archive; truncated or another format)"
    ]


def test_a_checkpoint_deleted_while_the_folder_is_read_is_left_out(run, monkeypatch):
    """Training deletes old epoch checkpoints while the folder is read (a race that was a 500 in the tab)."""
    read = checkpoint_step

    def rotating(path):
        if path.name == "last.ckpt":
            path.unlink()  # gone between the listing and the read
        return read(path)

    monkeypatch.setattr(checkpoints, "checkpoint_step", rotating)
    assert newest_checkpoint(run) == run / "checkpoints" / "epoch1-step20.ckpt"


def test_a_file_link_out_of_the_allowed_folder_is_refused_before_it_is_read(run, tmp_path, monkeypatch):
    outside = saved(tmp_path / "elsewhere" / "secret.ckpt", 99, 4000)
    last = run / "checkpoints" / "last.ckpt"
    last.unlink()
    last.symlink_to(outside)
    opened = []
    monkeypatch.setattr(checkpoints, "checkpoint_step", lambda path: opened.append(path) or 0)
    with pytest.raises(CheckpointRefused, match=r"last.ckpt resolves to a file outside .*logs; refused"):
        newest_checkpoint(run, inside=(tmp_path / "logs").resolve())
    assert last not in opened
    # A link that stays inside is an ordinary checkpoint.
    last.unlink()
    last.symlink_to(run / "checkpoints" / "epoch1-step20.ckpt")
    monkeypatch.undo()
    assert newest_checkpoint(run, inside=(tmp_path / "logs").resolve()) == last


def test_a_checkpoint_link_that_loops_is_named(run, tmp_path):
    last = run / "checkpoints" / "last.ckpt"
    last.unlink()
    last.symlink_to("last.ckpt")  # ln -s last.ckpt last.ckpt
    with pytest.raises(CheckpointError) as error:
        newest_checkpoint(run, inside=(tmp_path / "logs").resolve())
    assert str(error.value) == f"{last}: a loop of symbolic links; refused"


def test_a_checkpoints_folder_that_loops_is_named_alike_by_evaluate_resume_and_the_tab(tmp_path, capsys):
    """evaluate.py said "no checkpoint yet" where the tab said the true thing: a loop of symbolic links."""
    from evaluate import main as evaluate
    from training.cli import find_resume_checkpoint
    from viz.tab.live import LiveRuns

    logs = (tmp_path / "logs").resolve()
    run = logs / "run"
    run.mkdir(parents=True)
    (run / "checkpoints").symlink_to("checkpoints")  # ln -s checkpoints run/checkpoints
    loop = f"{run / 'checkpoints'}: a loop of symbolic links; refused"
    for given in (run, run / "checkpoints"):
        assert evaluate(["translate", str(given), "a"]) == 1
        assert capsys.readouterr().err == f"error: {loop}\n"
    with pytest.raises(SystemExit) as stopped:
        find_resume_checkpoint(str(run))
    assert str(stopped.value.code) == f"error: --resume {run}: {loop}"
    assert LiveRuns(logs).checkpoint("run") == (None, loop, 422)


def test_the_step_is_read_from_the_file_not_its_name(tmp_path):
    path = saved(tmp_path / "epoch9-step999.ckpt", 12, 1000)
    assert checkpoint_step(path) == 12
    torch.save({"global_step": "12"}, path)
    with pytest.raises(CheckpointError, match="no integer global_step"):
        checkpoint_step(path)


@pytest.mark.parametrize(
    "interrupt, expected", [((27, 3000), "interrupted.ckpt"), ((27, 1500), "last.ckpt"), (None, "last.ckpt")]
)
def test_resume_evaluate_and_the_tab_choose_the_same_checkpoint(run, capsys, interrupt, expected):
    """Before, --resume took the newer file by time, and the tab last.ckpt whenever it existed."""
    from argparse import Namespace

    from commands.shared import checkpoint_of
    from training.cli import find_resume_checkpoint
    from viz.tab.plugin import AttentionPlugin

    if interrupt is not None:
        saved(run / "checkpoints" / "interrupted.ckpt", *interrupt)
    chosen = run / "checkpoints" / expected
    assert find_resume_checkpoint(str(run)) == (chosen, run)
    assert checkpoint_of(Namespace(model=str(run))) == str(chosen)  # evaluate.py, which says which it uses
    assert f"using {chosen}" in capsys.readouterr().err
    plugin = AttentionPlugin(base_plugin.TBContext(logdir=str(run.parent), data_provider=None))
    assert plugin._live.checkpoint("run") == (chosen.resolve(), None, 200)


def returned_within(call, seconds: float = 10.0):
    """What ``call()`` returned or raised, run in a thread: a call that hangs fails the test instead of
    hanging it."""
    outcome = []

    def target():
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001  # handed to the test to judge
            outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s"
    return outcome[0]


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_is_refused_before_it_is_read(tmp_path, special):
    """A FIFO hung every reader; /dev/zero was read until the process was killed (17.5 GB)."""
    from training.checkpoints import read_checkpoint

    path = Path(special) if special.startswith("/") else tmp_path / "last.ckpt"
    kind = "a character device" if special.startswith("/") else "a FIFO"
    if special == "fifo":
        os.mkfifo(path)
    try:
        for read in (checkpoint_step, read_checkpoint):
            error = returned_within(lambda read=read: read(path))
            assert isinstance(error, CheckpointError), error
            assert str(error) == f"{path}: not a checkpoint file ({kind}, not a regular file)"
    finally:
        if special == "fifo":  # a reader still blocked in open() gets its end of file
            with contextlib.suppress(OSError):  # ENXIO: no reader waits
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize(
    "name, message",
    [
        ("archive/data.pkl",
         "its pickle (data.pkl) would expand to 80.0 MiB; a checkpoint's holds at most 64.0 MiB"),
        ("archive/data/0", "it would expand to 80.0 MiB from a file of 0.3 MiB (a zip bomb?)"),
    ],
)
def test_a_zip_bomb_is_refused_before_torch_load(tmp_path, monkeypatch, name, message):
    """A 292 KB checkpoint with a deflated data.pkl raised the tab's memory by 0.9 GB on one request."""
    from training.checkpoints import read_checkpoint

    path = bomb(tmp_path / "last.ckpt", inflated=80 * 2**20, name=name)
    loads = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args))
    for read in (checkpoint_step, read_checkpoint):
        with pytest.raises(CheckpointError) as refused:
            read(path)
        assert str(refused.value) == f"{path}: refused: {message}"
    assert loads == []


def test_a_legacy_checkpoint_that_is_no_zip_is_refused_in_one_line(tmp_path):
    path = tmp_path / "old.ckpt"
    torch.save({"global_step": 3}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=r"old.ckpt: not a checkpoint \(not a PyTorch zip archive"):
        checkpoint_step(path)


def with_old_names(state_dict: dict) -> dict:
    """``state_dict`` as an earlier version saved it: a layer's norms under ``<block>.norm``."""
    old = {}
    for key, value in state_dict.items():
        for (stack, block), norm in OLD_NORM_NAMES.items():
            key = re.sub(rf"(^|\.){stack}\.(\d+)\.{norm}\.", rf"\g<1>{stack}.\g<2>.{block}.norm.", key)
        old[key] = value
    return old


def test_old_names_are_renamed_and_today_s_pass_unchanged():
    state = {
        "model.encoder_layers.0.attn_block.norm.weight": 1,
        "model.decoder_layers.11.cross_block.norm.bias": 2,
        "decoder_layers.1.ff_block.norm.weight": 3,
        "model.encoder_layers.1.self_attn_norm.weight": 4,
        "model.encoder_layers.0.cross_block.norm.weight": 5,  # never a name: the encoder has no cross block
        "model.my_encoder_layers.0.attn_block.norm.weight": 6,  # not the model's stack
    }
    assert list(upgrade_state_dict(state).items()) == [
        ("model.encoder_layers.0.self_attn_norm.weight", 1),
        ("model.decoder_layers.11.cross_attn_norm.bias", 2),
        ("decoder_layers.1.feed_forward_norm.weight", 3),
        ("model.encoder_layers.1.self_attn_norm.weight", 4),
        ("model.encoder_layers.0.cross_block.norm.weight", 5),
        ("model.my_encoder_layers.0.attn_block.norm.weight", 6),
    ]


def test_a_checkpoint_with_old_names_loads_for_evaluation_resume_and_lightning(tiny_run, tmp_path):
    """evaluate.py and the tab (``load_run``), ``--resume``'s check and Lightning's own restore
    (``on_load_checkpoint``) all load the old names into today's model, weights unchanged."""
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    old_state = with_old_names(saved["state_dict"])
    assert "model.decoder_layers.0.cross_block.norm.weight" in old_state
    assert not any("_attn_norm" in key or "feed_forward_norm" in key for key in old_state)
    old = tmp_path / "old.ckpt"
    torch.save({**saved, "state_dict": old_state}, old)
    expected = load_run(checkpoint).module.state_dict()

    assert set(read_checkpoint(old)["state_dict"]) == set(expected)
    for name, value in load_run(old).module.state_dict().items():
        assert torch.equal(value, expected[name]), name

    settings = {name: value for name, value in saved["hyper_parameters"].items() if not name.startswith("_")}
    resumed = TranslationModule(**settings)
    assert check_resume_checkpoint(old, resumed) == saved["global_step"]
    assert torch.equal(resumed.model.decoder_layers[0].cross_attn_norm.weight,
                       expected["model.decoder_layers.0.cross_attn_norm.weight"])

    restored = torch.load(old, map_location="cpu", weights_only=True)
    lightning = TranslationModule(**settings)
    lightning.on_load_checkpoint(restored)  # as Lightning calls it, before it loads the weights
    lightning.load_state_dict(restored["state_dict"])  # strict
    assert torch.equal(lightning.model.encoder_layers[1].feed_forward_norm.bias,
                       expected["model.encoder_layers.1.feed_forward_norm.bias"])


def test_today_s_model_has_no_old_names():
    names = Transformer(tiny_config()).state_dict()
    assert list(upgrade_state_dict(names)) == list(names)


def test_a_checkpoint_from_before_the_marian_fields_loads_as_today_s_model(tiny_run, tmp_path):
    """Hyperparameters saved before ``scale_embedding`` and ``logits_bias`` existed load with their defaults:
    the same model, the same weights, without a warning."""
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    new_fields = ("scale_embedding", "logits_bias")
    older = {k: v for k, v in saved["hyper_parameters"].items() if k not in new_fields}
    old = tmp_path / "old.ckpt"
    torch.save({**saved, "hyper_parameters": older}, old)
    loaded = load_run(old).module
    assert (loaded.config.scale_embedding, loaded.config.logits_bias) == (True, False)
    expected = load_run(checkpoint).module.state_dict()
    assert set(loaded.state_dict()) == set(expected)
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_the_flat_toy_and_gold_data_settings_of_earlier_versions_are_grouped():
    old = {"dataset": "toy", "toy_train_size": 2000, "toy_split": "length", "seed": 7, "gold_sentences": None,
           "gold_alignments": None, "gold_zero_based": True, "gold_direction": "forward"}
    assert upgrade_data_settings(old) == {
        "dataset": "toy", "seed": 7, "toy": {"train_size": 2000, "split": "length"},
        "gold": {"sentences": None, "alignments": None},  # ignored without links then, refused now: dropped
    }
    linked = {"gold_sentences": "s.txt", "gold_alignments": "a.txt", "gold_zero_based": True}
    assert upgrade_data_settings(linked) == {"gold": {"sentences": "s.txt", "alignments": "a.txt",
                                                      "zero_based": True}}
    today = {"dataset": "toy", "toy": {"train_size": 5}, "gold": {"sentences": None}}
    assert upgrade_data_settings(today) == today


@pytest.mark.parametrize("given", ["run", "file"])
def test_a_last_checkpoint_that_is_a_folder_is_named_as_one(tmp_path, capsys, given):
    """It was passed over, and the run had "no checkpoint yet"."""
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    last.mkdir(parents=True)
    code, _, err = run_evaluate(capsys, tmp_path / "run" if given == "run" else last)
    assert (code, err.strip()) == (1, f"error: {last}: not a checkpoint file (a folder, not a regular file)")


def test_the_tab_names_a_last_checkpoint_that_is_a_folder(tmp_path):
    from training.checkpoints import CheckpointError, newest_checkpoint

    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    last.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="^.*/last.ckpt: not a checkpoint file \\(a folder, "):
        newest_checkpoint(tmp_path / "run", inside=tmp_path.resolve())
