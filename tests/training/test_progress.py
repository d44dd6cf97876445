"""Progress that a terminal and a redirected log both show: Lightning's bar in a terminal, plain lines in a
file (the rich bar, which Lightning picks whenever rich is installed, writes nothing to a file)."""

import io
import re

import lightning as L
import pytest
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from tests.conftest import train_tiny
from training.callbacks import LineProgress, plain_progress_unless_terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def bare_trainer(**settings) -> L.Trainer:
    return L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False, **settings)


@pytest.mark.parametrize("bar", [RichProgressBar, TQDMProgressBar])
def test_lightnings_bar_stays_in_a_terminal_and_gives_way_to_lines_in_a_log(bar):
    in_terminal = bare_trainer(callbacks=[bar()])
    plain_progress_unless_terminal(in_terminal, Terminal())
    assert type(in_terminal.progress_bar_callback) is bar
    in_log = bare_trainer(callbacks=[bar()])
    plain_progress_unless_terminal(in_log, io.StringIO())
    assert type(in_log.progress_bar_callback) is LineProgress
    assert sum(isinstance(c, L.pytorch.callbacks.ProgressBar) for c in in_log.callbacks) == 1


def test_a_notebooks_output_keeps_lightnings_bar():
    """A Jupyter kernel's standard output is no terminal, but the notebook draws the bar."""
    notebook_output = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})()
    trainer = bare_trainer(callbacks=[RichProgressBar()])
    plain_progress_unless_terminal(trainer, notebook_output)
    assert type(trainer.progress_bar_callback) is RichProgressBar


def test_no_bar_asked_and_a_bar_of_ones_own_are_left_alone():
    quiet = bare_trainer(enable_progress_bar=False)
    plain_progress_unless_terminal(quiet, io.StringIO())
    assert quiet.progress_bar_callback is None

    class OwnBar(TQDMProgressBar):
        pass

    own = bare_trainer(callbacks=[OwnBar()])
    plain_progress_unless_terminal(own, io.StringIO())
    assert type(own.progress_bar_callback) is OwnBar


def test_a_run_whose_output_is_not_a_terminal_prints_its_progress_in_lines(tmp_path, capsys):
    """train.py with standard output captured (a file, for the run): a line per epoch and per validation, and
    one at the end; the tiny config trains 2 epochs of 6 batches and validates after each."""
    # the tiny config turns the lines off; the attention figures (half a tiny run's time) are not what is read
    train_tiny(tmp_path, "--trainer.enable_progress_bar", "true", "--attention.every_n_epochs", "0")
    out = capsys.readouterr().out
    epochs = re.findall(r"^epoch (\d+) done: 6 batches, step (\d+), [\d.]+ batches/s$", out, re.MULTILINE)
    assert epochs == [("0", "6"), ("1", "12")], out
    validations = re.findall(r"^validation at step (\d+) \(epoch (\d+)\), .*val/loss [\d.]+", out,
                             re.MULTILINE)
    assert validations == [("6", "0"), ("12", "1")]
    assert re.search(r"^training ended at step 12, after \d+:\d\d:\d\d$", out, re.MULTILINE), out


def test_lines_while_training_come_every_so_many_seconds(tmp_path, capsys):
    """With ``every_seconds`` 0 (the default is 30), a line after every batch: epoch, batch of the epoch,
    step, the rate and, once logged, the loss."""
    train_tiny(tmp_path, "--trainer.enable_progress_bar", "true", "--attention.every_n_epochs", "0",
               "--trainer.callbacks+=training.callbacks.LineProgress",
               "--trainer.callbacks.every_seconds", "0")
    out = capsys.readouterr().out
    lines = re.findall(r"^epoch (\d+), batch (\d+)/6, step (\d+): [\d.]+ batches/s(, train/loss [\d.]+)?$",
                       out, re.MULTILINE)
    assert [line[:3] for line in lines] == [(str(i // 6), str(1 + i % 6), str(1 + i)) for i in range(12)]
    assert lines[-1][3], "no loss: it is shown once the first log step (every 5 in the tiny config) has it"
