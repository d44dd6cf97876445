"""A run's own checkpoints (``training.checkpoint_io``, ``train.py --resume``): exact resume mid-epoch, the
interrupt checkpoint on Ctrl-C and SIGTERM, each checkpoint written whole or not at all (a full disk, a
read-only folder), and ``--resume`` refusing a checkpoint of another run before it writes anything."""

import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tests.conftest import REPO, TINY_CONFIG, short_tsv_corpus, train_tiny
from tests.helpers.runs import copy_run, interrupt_at, listing, loss_curve, run_cli, val_curve
from training.checkpoint_io import InterruptCheckpoint, rng_states, set_rng_states
from training.checkpoints import INTERRUPTED_CHECKPOINT
from training.cli import find_resume_checkpoint, pop_resume
from training.module import NonFiniteLossError, TranslationModule

# Every step's loss logged; 6 batches an epoch, so steps 0-5 are the first epoch and 6-11 the second.
RESUME_ARGS = ("--trainer.log_every_n_steps", "1", "--attention.every_n_epochs", "0")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The tiny run with RESUME_ARGS, never interrupted: what every resumed run must equal."""
    return train_tiny(tmp_path_factory.mktemp("uninterrupted"), *RESUME_ARGS)


def assert_continues_exactly(resumed_run, uninterrupted_run, from_step):
    full, resumed = loss_curve(uninterrupted_run), loss_curve(resumed_run)
    assert sorted(resumed) == sorted(full)  # the same step labels: none skipped, none doubled
    after = [step for step in full if step >= from_step]
    assert after, "nothing was trained after resuming"
    for step in after:
        assert resumed[step] == pytest.approx(full[step], rel=1e-6, abs=1e-7), f"loss differs at step {step}"
    assert val_curve(resumed_run) == pytest.approx(val_curve(uninterrupted_run), rel=1e-6, abs=1e-7)


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, uninterrupted):
    first = train_tiny(tmp_path, *RESUME_ARGS, "--trainer.max_epochs", "1")
    saved = torch.load(first / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    train_tiny(tmp_path, *RESUME_ARGS, "--resume", str(first), "--trainer.max_epochs", "2")
    assert_continues_exactly(first, uninterrupted, saved["global_step"])
    assert (first / "config.resumed-1.yaml").is_file() and (first / "config.yaml").is_file()


@pytest.mark.parametrize(
    "how, step, status",
    [
        ("sigint", 8, 130),  # the third batch of the second epoch in flight
        ("sigint", 6, 130),  # its first batch in flight: no batch of the epoch trained yet
        ("sigterm", 3, 143),  # between two batches of the first epoch
    ],
)
def test_a_run_interrupted_mid_epoch_exits_non_zero_and_resumes_exactly(
    tmp_path, monkeypatch, capsys, uninterrupted, how, step, status
):
    with monkeypatch.context() as patch:
        interrupt_at(patch, step, how)
        with pytest.raises(SystemExit) as stopped:
            train_tiny(tmp_path, *RESUME_ARGS)
    assert stopped.value.code == status  # 128 + SIGINT or SIGTERM, as a shell reports a killed command
    run = next((tmp_path / "tiny").iterdir())
    interrupted = run / "checkpoints" / "interrupted.ckpt"
    assert f"continue with: python train.py --resume {interrupted}" in capsys.readouterr().err
    saved = torch.load(interrupted, map_location="cpu", weights_only=True)
    assert saved["global_step"] == (step if how == "sigint" else step + 1)  # the steps whose update was taken

    train_tiny(tmp_path, *RESUME_ARGS, "--resume", str(run))
    assert_continues_exactly(run, uninterrupted, saved["global_step"])


def test_an_error_saves_no_interrupt_checkpoint_and_offers_no_resume(tmp_path, monkeypatch, capsys):
    def out_of_memory(self, batch, batch_idx):
        if not self.trainer.sanity_checking:
            raise RuntimeError("CUDA out of memory (as if)")

    monkeypatch.setattr(TranslationModule, "validation_step", out_of_memory)
    with pytest.raises(RuntimeError, match="out of memory"):
        train_tiny(tmp_path, *RESUME_ARGS, "--trainer.limit_train_batches", "2")
    run = next((tmp_path / "tiny").iterdir())
    assert not (run / "checkpoints" / "interrupted.ckpt").exists()
    captured = capsys.readouterr()
    assert "--resume" not in captured.out + captured.err


class RecordingTrainer(SimpleNamespace):
    def save_checkpoint(self, path):
        self.saved.append(Path(path))


@pytest.mark.parametrize(
    "world_size, exception, saves, stopped_by",
    [
        (1, KeyboardInterrupt(), True, signal.SIGINT),
        (1, SIGTERMException(), True, signal.SIGTERM),
        (2, SIGTERMException(), True, signal.SIGTERM),  # every rank stops at the same step: a collective save
        (2, KeyboardInterrupt(), False, signal.SIGINT),  # may have reached this rank alone: a save would hang
        (1, RuntimeError("CUDA out of memory"), False, None),
        (1, NonFiniteLossError("training loss is nan"), False, None),
    ],
)
def test_the_interrupt_checkpoint_is_saved_on_a_signal_only_and_where_every_rank_saves_it(
    tmp_path, world_size, exception, saves, stopped_by
):
    between_batches = SimpleNamespace(current=SimpleNamespace(ready=3, processed=3))
    fit_loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=between_batches))
    trainer = RecordingTrainer(
        checkpoint_callback=SimpleNamespace(dirpath=str(tmp_path)), global_step=5, world_size=world_size,
        is_global_zero=True, fit_loop=fit_loop, saved=[],
    )
    callback = InterruptCheckpoint()
    callback.on_exception(trainer, None, exception)
    assert trainer.saved == ([tmp_path / INTERRUPTED_CHECKPOINT] if saves else [])
    assert callback.signal == stopped_by


def test_random_states_survive_a_weights_only_checkpoint(tmp_path):
    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        random.seed(1), np.random.seed(2), torch.manual_seed(3)
        torch.save(rng_states(), tmp_path / "rng.pt")
        expected = (random.random(), float(np.random.rand()), torch.rand(2).tolist())
        random.seed(9), np.random.seed(9), torch.manual_seed(9)
        set_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True))
        assert (random.random(), float(np.random.rand()), torch.rand(2).tolist()) == expected
    finally:
        random.setstate(saved[0]), np.random.set_state(saved[1]), torch.set_rng_state(saved[2])


def test_resume_refuses_a_checkpoint_of_another_run_and_writes_nothing(tmp_path, tiny_run):
    run = copy_run(tiny_run, tmp_path)
    before = listing(run)
    with pytest.raises(SystemExit) as stopped:  # the run's model, but twice as wide as its last.ckpt's
        train_tiny(tmp_path, "--resume", str(run), "--model.d_model", "64", "--model.d_ff", "128")
    assert str(stopped.value.code) == (
        f"error: --resume {run / 'checkpoints' / 'last.ckpt'}: its weights do not fit the model of the run's "
        "config: --model.d_model is 64 now, 32 in the checkpoint; "
        "--model.d_ff is 128 now, 64 in the checkpoint"
    )
    assert listing(run) == before  # no config.resumed-1.yaml, no event file


def test_resume_after_the_corpus_grew_names_the_vocabulary_and_writes_nothing(tmp_path):
    from train import main

    data = short_tsv_corpus(tmp_path / "data")
    run = train_tiny(tmp_path, "--data.dataset", "tsv", "--data.path", str(data), "--data.tokenizer", "word",
                     "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")  # fmt: skip
    with (data / "train.tsv").open("a", encoding="utf-8") as train:
        train.write("new1 new2\tneu1 neu2 neu3\n")  # 2 new source words, 3 new target words
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    src, tgt = saved["hyper_parameters"]["src_vocab_size"], saved["hyper_parameters"]["tgt_vocab_size"]
    before = listing(run)
    with pytest.raises(SystemExit) as stopped:
        main(["--resume", str(run)])
    assert str(stopped.value.code) == (
        f"error: --resume {run / 'checkpoints' / 'last.ckpt'}: its weights do not fit the model of the run's "
        f"config: the vocabulary has {src + 2} source and {tgt + 3} target tokens now, "
        f"{src} and {tgt} in the checkpoint: the corpus or the tokenizer settings changed since it was saved"
    )
    assert listing(run) == before


def test_a_moved_run_resumes_in_its_own_folder_whatever_the_cwd(tmp_path, monkeypatch):
    from train import main

    first = train_tiny(tmp_path / "A", *RESUME_ARGS, "--trainer.max_epochs", "1")
    moved = Path(shutil.move(first, tmp_path / "B" / "elsewhere"))  # B/elsewhere: no save_dir/name/version
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    main(["--resume", str(moved), "--trainer.max_epochs", "2"])
    names = sorted(p.name for p in (moved / "checkpoints").iterdir())
    # The top-k and last bookkeeping followed the folder: one best, last.ckpt rewritten (not last-v1.ckpt).
    assert [n for n in names if not n.startswith("best-")] == ["epoch0-step6.ckpt", "epoch1-step12.ckpt",
                                                                "last.ckpt"]  # fmt: skip
    assert len(names) == 4
    last = torch.load(moved / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 12 and (moved / "config.resumed-1.yaml").is_file()
    assert len(list(moved.glob("events.out.tfevents.*"))) == 2
    assert sorted(loss_curve(moved)) == list(range(12))  # both epochs' steps, read from the moved folder
    assert listing(cwd) == [] and listing(tmp_path / "A") == ["tiny"]


def test_a_run_resumed_mid_epoch_shows_the_epoch_length_and_no_argument_warning(
    tmp_path, monkeypatch, recwarn
):
    from train import main

    with monkeypatch.context() as patch:
        interrupt_at(patch, 8, "sigint")  # the third batch of the second epoch in flight
        with pytest.raises(SystemExit):
            train_tiny(tmp_path, *RESUME_ARGS)
    run = next((tmp_path / "tiny").iterdir())
    argv = ["train.py", "--resume", str(run), "--trainer.enable_progress_bar", "true"]
    monkeypatch.setattr(sys, "argv", argv)
    # Lightning shows Rich's bar where rich is installed (transformers brings it): read tqdm's here.
    monkeypatch.setattr("lightning.pytorch.trainer.connectors.callback_connector._RICH_AVAILABLE", False)
    monkeypatch.setattr("train.plain_progress_unless_terminal", lambda trainer: None)  # as in a terminal
    recwarn.clear()
    cli = main()  # as `python train.py --resume RUN ...` runs it
    # Lightning skips on_train_epoch_start in an epoch it restarts mid-way: the bar showed "Training: 3/?".
    bar = cli.trainer.progress_bar_callback.train_progress_bar
    assert (bar.desc, bar.total, bar.n) == ("Epoch 1: ", 6, 6)
    assert [str(w.message) for w in recwarn if "sys.argv" in str(w.message)] == []


def test_resume_refuses_a_checkpoint_that_does_not_load_safely_and_writes_nothing(tmp_path, tiny_run):
    run = copy_run(tiny_run, tmp_path)
    marker = tmp_path / "the pickle ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))  # what a malicious checkpoint would run when unpickled

    torch.save({"state_dict": Payload()}, run / "checkpoints" / "last.ckpt")
    before = listing(run)
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--resume", str(run))
    message = str(stopped.value.code)
    # Refused while the run's newest checkpoint is chosen (training.checkpoints), the file named.
    assert message.startswith(
        f"error: --resume {run}: {run / 'checkpoints' / 'last.ckpt'}: corrupt or unsafe checkpoint ("
    )
    assert "GLOBAL" in message and "\n" not in message  # the global it refused, named
    assert not marker.exists()
    assert listing(run) == before


@pytest.mark.parametrize(
    "target, problem",
    [
        ("config.yaml", "not a checkpoint (not a PyTorch zip archive; truncated or another format)"),
        ("checkpoints/last.ckpt",
         "refused: its pickle (data.pkl) would expand to 80.0 MiB; a checkpoint's holds at most 64.0 MiB"),
    ],
)
def test_resume_checks_a_checkpoint_file_as_evaluate_does_before_loading_it(tmp_path, tiny_run, monkeypatch,
                                                                           target, problem):
    """torch.load read these first: the run's config.yaml got torch's "Please file an issue" message, and a
    292 KB zip bomb took 1.66 GB of memory before it was found not to be a training checkpoint."""
    from tests.conftest import bomb

    run = copy_run(tiny_run, tmp_path)
    bomb(run / "checkpoints" / "last.ckpt", inflated=80 * 2**20)
    before = listing(run)
    loads = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args))
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--resume", str(run / target))
    assert str(stopped.value.code) == f"error: --resume {run / target}: {problem}"
    assert loads == [] and listing(run) == before


def test_the_resumed_checkpoint_is_loaded_through_the_checked_opener(tmp_path, monkeypatch):
    # The file is checked again as it is loaded: it may have been replaced since the run's was chosen.
    from tests.conftest import bomb
    from training.checkpoint_io import check_resume_checkpoint

    path = bomb(tmp_path / "last.ckpt", inflated=80 * 2**20, name="archive/data/0")
    loads = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args))
    with pytest.raises(SystemExit) as stopped:
        check_resume_checkpoint(path, torch.nn.Linear(1, 1))
    assert str(stopped.value.code) == (
        f"error: --resume {path}: refused: it would expand to 80.0 MiB from a file of 0.3 MiB (a zip bomb?)"
    )
    assert loads == []


@pytest.mark.slow
def test_sigterm_leaves_a_checkpoint_to_resume_from(tmp_path):
    import time

    command = [sys.executable, str(REPO / "train.py"), "--config", TINY_CONFIG,
               "--trainer.max_epochs", "1000", "--attention.every_n_epochs", "0"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    checkpoints = tmp_path / "runs" / "tiny" / "version_0" / "checkpoints"
    deadline = time.time() + 240
    while not (checkpoints / "last.ckpt").exists() and time.time() < deadline:  # let it train a little
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    interrupted = checkpoints / "interrupted.ckpt"
    assert interrupted.is_file(), output[-2000:]
    assert process.returncode == 128 + signal.SIGTERM, output[-2000:]
    # the path as the run was given its save_dir: relative to where it was started
    assert f"continue with: python train.py --resume {interrupted.relative_to(tmp_path)}" in output
    state = torch.load(interrupted, map_location="cpu", weights_only=True)
    assert state["global_step"] > 0
    resumed = run_cli(tmp_path, "--resume", str(interrupted.parent.parent),
                      "--trainer.max_epochs", str(state["epoch"] + 2))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)
    assert final["global_step"] > state["global_step"]


def test_resume_takes_the_newest_weights_of_last_and_interrupted(tmp_path):
    """The rule of training.checkpoints (tested in full in test_checkpoints.py)."""
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    last, interrupted = checkpoints / "last.ckpt", checkpoints / "interrupted.ckpt"
    for path, step, mtime in ((last, 10, 1000), (interrupted, 15, 2000)):
        torch.save({"global_step": step}, path)
        os.utime(path, (mtime, mtime))
    assert find_resume_checkpoint(str(tmp_path / "run")) == (interrupted, tmp_path / "run")
    os.utime(last, (3000, 3000))  # saved again after the interrupt: a resumed run's
    assert find_resume_checkpoint(str(tmp_path / "run")) == (last, tmp_path / "run")
    assert find_resume_checkpoint(str(interrupted)) == (interrupted, tmp_path / "run")


def test_resume_option_is_taken_out_of_the_arguments_in_both_spellings():
    assert pop_resume(["--a", "1", "--resume", "runs/x", "--b"]) == (["--a", "1", "--b"], "runs/x")
    assert pop_resume(["--resume=runs/x=y", "--b"]) == (["--b"], "runs/x=y")
    assert pop_resume(["--b"]) == (["--b"], None)


# -- the attention logger on hand-made sentences -------------------------------------------------------------


class _FillingFile:
    """A file on a disk that is full after its first 4 KiB: writing more raises ENOSPC, as the system does."""

    def __init__(self, file):
        self._file = file

    def write(self, data):
        if self._file.tell() + len(data) > 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._file.write(data)

    def flush(self):
        self._file.flush()


def _disk_full_in_python(checkpoint, file):
    file.write(b"PK\x03\x04" + bytes(4096))  # the first blocks reach the disk, then it is full
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _disk_full_in_torch(save):
    # torch's own writer meets the full disk: it reports the OSError as a RuntimeError ("[enforce fail at
    # inline_container.cc:672] . unexpected pos ...").
    return lambda checkpoint, file: save(checkpoint, _FillingFile(file))


@pytest.mark.parametrize("full_disk", ["python", "torch"])
def test_a_full_disk_keeps_every_checkpoint_whole_and_stops_in_one_line(tmp_path, tiny_run, monkeypatch,
                                                                        full_disk):
    """A full disk left a truncated best-*.ckpt, after which --resume refused the run; then torch's report of
    it (a RuntimeError) ended the run in a traceback."""
    run = copy_run(tiny_run, tmp_path)
    folder = run / "checkpoints"
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    save = _disk_full_in_python if full_disk == "python" else _disk_full_in_torch(torch.save)
    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--resume", str(run), "--trainer.max_epochs", "3")
    message = str(stopped.value.code)
    assert re.fullmatch(
        rf"error: {re.escape(str(folder))}/[\w-]+-step18\.ckpt: cannot save the checkpoint "
        r"\(No space left on device\); the checkpoints saved before are kept",
        message,
    ), message
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before  # no part-file left
    assert find_resume_checkpoint(str(run)) == (folder / "last.ckpt", run)


def test_a_full_disk_as_the_tokenizers_are_saved_stops_in_one_line_naming_the_file(tmp_path, monkeypatch):
    """The run's first write, its tokenizers beside the events, ended in an OSError traceback and left a
    0-byte src_tokenizer.json."""
    write_text = Path.write_text

    def full(path, *args, **kwargs):
        if path.name.endswith("tokenizer.json.partial"):
            path.open("w").close()  # the file is made, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path)
    message = str(stopped.value.code)
    assert re.fullmatch(r"error: \S+/tiny/version_0/src_tokenizer\.json: cannot write it "
                        r"\(No space left on device\)", message), message
    assert not [p.name for p in (tmp_path / "tiny" / "version_0").iterdir() if "tokenizer" in p.name]


@pytest.mark.parametrize(
    ("raised", "why"),
    [
        (RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
         "the write stopped short: PytorchStreamWriter failed writing file data/0: file write failed"),
        (RuntimeError("not a failure to write"), None),
    ],
)
def test_a_checkpoint_write_that_torch_reports_failed_is_one_line_and_anything_else_propagates(
    tmp_path, monkeypatch, raised, why
):
    from training.checkpoint_io import AtomicCheckpointIO
    from training.checkpoints import CheckpointError

    def save(checkpoint, file):
        file.write(b"PK\x03\x04")
        raise raised

    monkeypatch.setattr(torch, "save", save)
    path = tmp_path / "last.ckpt"
    with pytest.raises(CheckpointError if why else RuntimeError) as failed:
        AtomicCheckpointIO().save_checkpoint({}, path)
    expected = f"{path}: cannot save the checkpoint ({why}); the checkpoints saved before are kept"
    assert str(failed.value) == (expected if why else str(raised))
    assert list(tmp_path.iterdir()) == []  # no part-file left


def test_a_read_only_save_folder_stops_the_run_before_it_starts(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o555)
    if os.access(logs, os.W_OK):  # root writes anywhere: let os.access answer as the mode bits say
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode) and Path(path) != logs)
    try:
        with pytest.raises(SystemExit) as stopped:
            train_tiny(logs)
    finally:
        logs.chmod(0o755)
    assert str(stopped.value.code) == (
        f"error: cannot save checkpoints in {logs / 'tiny' / 'version_0' / 'checkpoints'}: "
        f"{logs} is not writable"
    )
    assert list(logs.iterdir()) == []
