"""A checkpoint path that is a folder (``checkpoints/last.ckpt`` made a folder) is named as one, in one line,
by evaluate.py given the run or that path, and by the rule every reader of a run's checkpoints shares."""

import pytest

from tests.conftest import run_evaluate


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
