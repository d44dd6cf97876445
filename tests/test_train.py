"""train.py end to end with the tiny config: logs, attention images, checkpoints, resume, DDP, errors; and the
attention logger and the command line's helpers on hand-made inputs."""

import errno
import json
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
from tensorboard.util import tensor_util

from analysis.axes import attention_axes
from analysis.heads import summarize
from data.batching import collate
from data.pairs import Pair
from evaluation.forced import sentence_pass
from tests.conftest import PAD, REPO, TINY_CONFIG, read_events, short_tsv_corpus, train_tiny
from tests.helpers.attention_logging import PAIRS, default_run, hand_made, recorded
from training.checkpoint_io import InterruptCheckpoint, rng_states, set_rng_states
from training.checkpoints import INTERRUPTED_CHECKPOINT
from training.cli import find_resume_checkpoint, pop_resume
from training.module import NonFiniteLossError, TranslationModule
from viz import logger as attention_logging
from viz.logger import AttentionLogger

__all__ = ["hand_made", "recorded"]  # the attention logger's fixtures (tests/helpers), used here

# The tiny config: 2 layers x 2 heads in encoder and decoder, 1 probe sentence,
# 2 epochs with a validation each.
LAYERS, HEADS, EPOCHS = 2, 2, 2


def test_fast_dev_run_says_it_saved_nothing_and_saves_nothing(tmp_path, capsys, monkeypatch):
    from train import main

    monkeypatch.chdir(tmp_path)  # Lightning wrote checkpoints/last.ckpt in the working folder
    runs = tmp_path / "runs"
    cli = main([
        "--config", TINY_CONFIG, "--trainer.logger.init_args.save_dir", str(runs),
        "--trainer.default_root_dir", str(runs), "--trainer.fast_dev_run", "true",
    ])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == (
        "Fast dev run (--trainer.fast_dev_run 1): a training and a validation step ran once each; "
        "nothing was saved."
    )  # it used to end "Run saved in None"
    # What the line says ran, ran: one optimiser step and one validation batch.
    validated = cli.trainer.fit_loop.epoch_loop.val_loop.batch_progress.total.completed
    assert (cli.trainer.global_step, validated) == (1, 1)
    # No run folder, config, event file or checkpoint: neither under the run's folder nor the working one.
    assert list(tmp_path.rglob("*")) == []


def test_run_directory_holds_config_tokenizers_and_checkpoints(tiny_run):
    assert (tiny_run / "config.yaml").is_file()
    assert (tiny_run / "src_tokenizer.json").is_file() and (tiny_run / "tgt_tokenizer.json").is_file()
    names = sorted(p.name for p in (tiny_run / "checkpoints").iterdir())
    assert "last.ckpt" in names
    assert any(n.startswith("best-") for n in names)
    assert sum(n.startswith("epoch") for n in names) == EPOCHS


def test_event_files_hold_per_head_attention_images(tiny_run):
    events = read_events(tiny_run)
    tags = events.Tags()["images"]
    for kind in ("encoder", "decoder", "cross"):
        per_head = [t for t in tags if t.startswith(f"attention_{kind}/")]
        assert sorted(per_head) == sorted(
            f"attention_{kind}/sentence_1/layer_{layer}/head_{head}"
            for layer in range(1, LAYERS + 1)
            for head in range(1, HEADS + 1)
        )
        assert f"attention_overview/{kind}/sentence_1" in tags
    image = events.Images("attention_cross/sentence_1/layer_1/head_1")
    assert len(image) == EPOCHS  # once per validation, the sanity check excluded
    assert (image[0].width, image[0].height) == (320, 320)
    assert image[0].step < image[1].step
    for name in ("cross_entropy", "cross_agreement", "cross_aer", "decoder_previous", "encoder_distance"):
        assert f"heads/{name}" in tags


def test_scalars_and_text(tiny_run):
    events = read_events(tiny_run)
    scalars = set(events.Tags()["scalars"])
    expected = {
        "train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss", "val/ppl", "val/bleu",
        "val/chrf", "val/exact_match", "heads/best_alignment", "heads/best_aer",
    }
    assert expected <= scalars
    assert len(events.Scalars("val/loss")) == EPOCHS
    assert all(0.0 <= s.value <= 1.0 for s in events.Scalars("heads/best_alignment"))
    assert "samples/text_summary" in events.Tags()["tensors"]


def test_last_checkpoint_holds_the_final_weights_when_the_last_epoch_is_not_the_best(tmp_path):
    # With mode max, the "best" validation loss is the highest: the first epoch's, as the loss falls.
    run = train_tiny(tmp_path, "--checkpoint.mode", "max", "--attention.every_n_epochs", "0")

    def step(name):
        return torch.load(run / "checkpoints" / name, map_location="cpu", weights_only=True)["global_step"]

    names = [p.name for p in (run / "checkpoints").iterdir()]
    final = max(step(n) for n in names if n.startswith("epoch"))
    (best,) = [n for n in names if n.startswith("best-")]
    assert step(best) < final  # the last epoch was not the best
    assert step("last.ckpt") == final


def test_checkpoint_loads_under_weights_only(tiny_run):
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    module = TranslationModule(
        **{k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    )
    module.load_state_dict(checkpoint["state_dict"])
    assert checkpoint["global_step"] > 0
    assert checkpoint["optimizer_states"][0]["state"]  # Adam moments were saved


def test_bf16_mixed_precision_trains_on_the_cpu(tmp_path, tiny_run):
    run = train_tiny(tmp_path, "--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1")
    from training.precision import choose_precision, probe_hardware

    if choose_precision(probe_hardware("cpu")).precision != "32-true":  # tiny_run was in bf16: native here
        tiny_run = train_tiny(
            tmp_path / "fp32", "--trainer.precision", "32-true", "--trainer.max_epochs", "1"
        )
    bf16, fp32 = loss_curve(run), loss_curve(tiny_run)  # the same config and seed, in fp32
    steps = sorted(bf16)
    assert steps and set(steps) <= set(fp32)
    bf16, fp32 = torch.tensor([bf16[s] for s in steps]), torch.tensor([fp32[s] for s in steps])
    assert torch.isfinite(bf16).all()
    assert not torch.equal(bf16, fp32)  # bf16 rounding changed the computation: autocast really ran
    torch.testing.assert_close(bf16, fp32, rtol=0.05, atol=0.0)  # and it learns the same way
    assert "precision: bf16-mixed" in (run / "config.yaml").read_text()
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    # fp32 master weights
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())


def loss_curve(run_dir):
    return {s.step: s.value for s in read_events(run_dir).Scalars("train/loss")}


# Every step's loss logged; 6 batches an epoch, so steps 0-5 are the first epoch and 6-11 the second.
RESUME_ARGS = ("--trainer.log_every_n_steps", "1", "--attention.every_n_epochs", "0")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The tiny run with RESUME_ARGS, never interrupted: what every resumed run must equal."""
    return train_tiny(tmp_path_factory.mktemp("uninterrupted"), *RESUME_ARGS)


def val_curve(run_dir):
    return {s.step: s.value for s in read_events(run_dir).Scalars("val/loss")}


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


def interrupt_at(monkeypatch, step: int, how: str) -> None:
    """Stop the next run at training step ``step``: Ctrl-C in the middle of it (a batch in flight), or a
    SIGTERM, after which Lightning stops once the step is done."""
    original = TranslationModule.training_step

    def interrupted(self, batch, batch_idx):
        if self.global_step == step:
            if how == "sigint":
                raise KeyboardInterrupt
            if not self.trainer.received_sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
        return original(self, batch, batch_idx)

    monkeypatch.setattr(TranslationModule, "training_step", interrupted)


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


def test_a_new_run_never_overwrites_an_old_one(tmp_path):
    one = train_tiny(tmp_path, "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")
    two = train_tiny(tmp_path, "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")
    assert one != two and (one / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_ddp_with_two_cpu_processes_logs_attention_once(tmp_path):
    command = [
        sys.executable, str(REPO / "train.py"), "--config", TINY_CONFIG, "--trainer.max_epochs", "1",
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((tmp_path / "runs" / "tiny").iterdir())
    assert len(runs) == 1, "both processes must write into one run directory"
    event_files = list(runs[0].glob("events.out.tfevents.*"))
    assert len(event_files) == 1
    images = read_events(runs[0]).Images("attention_cross/sentence_1/layer_1/head_1")
    assert len(images) == 1  # one validation, logged by rank 0 only


def run_cli(tmp_path, *args):
    command = [sys.executable, str(REPO / "train.py"), "--config", TINY_CONFIG, *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model.num_heads", "two"], "model.num_heads"),
        (["--model.d_model", "30", "--model.num_heads", "4"],
         "d_model (30) must be divisible by num_heads (4)"),
        (["--data.dataset", "klingon"], "data.dataset"),
        (["--checkpoint.monitor", "val/bleu", "--model.decode_every_n_epochs", "2"],
         "decode_every_n_epochs 1"),
        (["--data.dataset", "tsv", "--data.path", "missing-folder"], "missing-folder"),
        (["--model.schedule", "cosine_time"], "cosine_time decays the learning rate over the time budget"),
    ],
)
def test_invalid_options_give_a_clear_error(tmp_path, args, message):
    done = run_cli(tmp_path, *args)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model.decode_beam_size", "0"], "decode_beam_size must be at least 1 (1: greedy), got 0"),
        (["--model.decode_beam_size", "-1"], "decode_beam_size must be at least 1 (1: greedy), got -1"),
        (["--model.decode_max_len", "0"], "decode_max_len must be at least 1, or null, got 0"),
        (["--model.decode_max_sentences", "0"], "decode_max_sentences must be at least 1, or null, got 0"),
        (["--model.decode_every_n_epochs", "-1"], "decode_every_n_epochs must be >= 0 (0: none), got -1"),
        (["--model.weight_decay", "-0.1"], "weight_decay must be a number >= 0, got -0.1"),
        (["--model.adam_beta2", "1.0"], "adam_beta2 must be in [0, 1), got 1.0"),
        (["--trainer.max_epochs", "-2"],
         "`max_epochs` must be a non-negative integer or -1. You passed in -2."),
        (["--trainer.log_every_n_steps", "0"], "--trainer.log_every_n_steps must be at least 1, got 0"),
        (["--trainer.check_val_every_n_epoch", "0"], "--trainer.check_val_every_n_epoch must be at least 1"),
        (["--trainer.val_check_interval", "0"], "--trainer.val_check_interval must be positive"),
        (["--trainer.gradient_clip_val", "-1"], "--trainer.gradient_clip_val must be a number >= 0"),
        (["--model.decode_beam_size", "100000"], "decode_beam_size must be at most 256, got 100000"),
        (["--attention.ig_steps", "100000"], "ig_steps must be at most 32, got 100000"),
        (["--model.d_model", "1000000000"],
         ("d_model must be at most 65536, got 1000000000: one d_model × d_model weight matrix alone would "
          "take 3.5 EiB")),
        (["--model.max_len", "100000000"],
         ("max_len must be at most 65536, got 100000000: one head's attention map over that many positions "
          "would take 35.5 PiB")),
        (["--trainer.max_time", "00:00:00:00"],
         "--trainer.max_time 00:00:00:00 is a time limit of 0 seconds: nothing would be trained"),
        (["--seed_everything", "-1"],
         "--seed_everything must be an integer from 0 to 4294967295, true (a random seed) or false, got -1"),
    ],
)
def test_bad_settings_stop_the_run_before_its_first_step(tmp_path, capsys, args, message):
    """Each of these used to train an epoch (or a step) and then stop with a traceback, or not at all."""
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, *args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {message}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the reason (and the tip to run --help), no page of usage
    assert not (tmp_path / "tiny").exists()  # nothing ran: no run directory


def test_a_huge_vocab_size_is_refused_before_a_tokenizer_is_trained(tmp_path, capsys):
    """The tokenizer library aborted the process (exit 134, a Rust backtrace) when asked for this many."""
    corpus = short_tsv_corpus(tmp_path / "data")
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--data.dataset", "tsv", "--data.path", str(corpus), "--data.vocab_size",
                   "1000000000000")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "error: vocab_size must be at most 1048576, got 1000000000000: the model's embedding table for it "
        "would take 3.6 TiB for each of its d_model columns (float32)"
    )
    assert "Traceback" not in err and not (tmp_path / "tiny").exists()


BINARY = bytes(range(256))  # not UTF-8 text: 0x80 cannot start a character
SHAPE = "a config is a YAML mapping of sections (model:, data:, trainer:, ...)"


@pytest.mark.parametrize(
    "content, problem",
    [
        (BINARY, "not a UTF-8 text file (byte 0x80 at position 128)"),
        (b"", f"the file is empty; {SHAPE}"),
        (b"# only a comment\n", f"the file is empty; {SHAPE}"),
        (b"model: [\n",
         "not valid YAML at line 2, column 1: expected the node content, but found '<stream end>'"),
        (b"- 1\n- 2\n", f"{SHAPE}, got a list"),
        (b"model: 5\n", "line 1: model must be a mapping of its options, got 5"),
        (b"trainer:\n  max_epochs: 1\nattention:\n",
         "line 3: attention must be a mapping of its options, got nothing"),
    ],
    ids=["binary", "empty", "comments only", "bad yaml", "a list", "model: 5", "empty section"],
)
def test_a_bad_config_file_is_named_in_one_line(tmp_path, capsys, content, problem):
    """Each of these used to end in a traceback from deep inside the parser, or in "Unexpected config:"."""
    config = tmp_path / "bad.yaml"
    config.write_bytes(content)
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--config", str(config))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"error: --config {config}: {problem}"
    assert "Traceback" not in err
    assert not (tmp_path / "tiny").exists()


def copy_run(run, save_dir):
    """A copy of a finished tiny run under ``save_dir``, where train_tiny(save_dir, "--resume", ...) logs."""
    return Path(shutil.copytree(run, save_dir / "tiny" / run.name))


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


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


@pytest.mark.parametrize("folder, version", [("version_0", "0"), ("myrun", "myrun")])
def test_training_into_a_folder_that_holds_a_run_stops_with_one_line_and_writes_nothing(
    tmp_path, tiny_run, folder, version
):
    run = Path(shutil.copytree(tiny_run, tmp_path / "tiny" / folder))
    before = listing(run)
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, "--trainer.logger.init_args.version", version)
    assert str(stopped.value.code) == (
        f"error: {run} already holds a run; pick another --trainer.logger.init_args.version "
        f"or resume it with --resume {run}"
    )
    assert listing(run) == before


def test_a_second_run_without_a_logger_in_the_same_folder_stops_with_one_line_and_writes_nothing(
    tmp_path, tiny_run
):
    """Lightning's config saving stopped it with a RuntimeError traceback ("expected config.yaml to NOT
    exist"). Without a logger a run writes its config and checkpoints into --trainer.default_root_dir."""
    from train import main

    run = Path(shutil.copytree(tiny_run, tmp_path / "plain"))  # what a first run without a logger left
    before = listing(run)
    with pytest.raises(SystemExit) as stopped:
        main(["--config", TINY_CONFIG, "--trainer.logger", "false", "--trainer.default_root_dir", str(run)])
    assert str(stopped.value.code) == (
        f"error: {run} already holds a run; pick another --trainer.default_root_dir or resume it with "
        f"--resume {run}"
    )
    assert listing(run) == before


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


def test_a_run_that_trains_nothing_says_so(tmp_path, capsys, tiny_run):
    train_tiny(tmp_path / "new", "--trainer.max_epochs", "0")
    out = capsys.readouterr().out
    expected = "Nothing was trained (--trainer.max_epochs 0, --trainer.max_steps -1): no checkpoint was saved"
    assert expected in out
    assert "Run saved" not in out

    run = copy_run(tiny_run, tmp_path / "resumed")
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    train_tiny(tmp_path / "resumed", "--resume", str(run))  # the run already did its max_epochs
    out = capsys.readouterr().out
    assert (
        "Nothing was trained: the run had already reached its limits (--trainer.max_epochs 2, "
        f"--trainer.max_steps -1) at step {last['global_step']}; raise them to train on." in out
    )
    assert "Run saved" not in out


def test_a_checkpoint_callback_added_by_step_leaves_the_best_named_by_validation_loss(tmp_path, capsys):
    # As bench/multi30k_levers.py's `steps` lever adds one: checkpoints within epochs, for averaging.
    run = train_tiny(
        tmp_path, "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.monitor=step",
        "--trainer.callbacks.mode=max", "--trainer.callbacks.every_n_train_steps=5",
        "--trainer.callbacks.save_top_k=2",
        "--trainer.callbacks.filename=step{step}", "--trainer.callbacks.auto_insert_metric_name=false",
    )  # fmt: skip
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["best-epoch1-step12.ckpt", "epoch0-step6.ckpt", "epoch1-step12.ckpt", "last.ckpt",
                     "step10.ckpt", "step5.ckpt"]  # fmt: skip
    assert f"; best checkpoint {run / 'checkpoints' / 'best-epoch1-step12.ckpt'}" in capsys.readouterr().out


def test_nan_guard_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = TranslationModule.loss

    def poisoned(self, logits, tgt_out, label_smoothing=0.0, reduction="mean"):
        loss = original(self, logits, tgt_out, label_smoothing, reduction)
        return loss * float("nan") if self.training and self.current_epoch >= 1 else loss

    monkeypatch.setattr(TranslationModule, "loss", poisoned)
    with pytest.raises(SystemExit, match="training loss is nan"):
        train_tiny(tmp_path, "--attention.every_n_epochs", "0")
    run = next((tmp_path / "tiny").iterdir())
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] == 0  # saved after the first, healthy epoch
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())
    assert not (run / "checkpoints" / "interrupted.ckpt").exists()


def test_a_run_that_diverges_on_the_last_step_of_an_epoch_stops_before_logging_nan(tmp_path, monkeypatch):
    """An update that ruins the weights on an epoch's last step (not a log step) leaves a finite training loss
    behind it: the run used to reach validation and die in the attention logger, writing NaN into JSON."""

    def diverge(self, outputs, batch, batch_idx):
        if self.current_epoch == 1 and self.trainer.is_last_batch:
            with torch.no_grad():
                for parameter in self.parameters():
                    parameter.fill_(float("nan"))

    monkeypatch.setattr(TranslationModule, "on_train_batch_end", diverge)
    diverged = "attention logging: the attention weights at step 12 are not finite"
    with pytest.warns(UserWarning, match=diverged), pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path)
    assert str(stopped.value.code) == (
        "error: validation loss is nan at step 12: the weights diverged; stopping. "
        "The last good checkpoint is kept; try a lower --model.lr or more --model.warmup_steps"
    )
    run = next((tmp_path / "tiny").iterdir())
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] == 0 and all(torch.isfinite(v).all() for v in last["state_dict"].values())
    logged = read_events(run)
    tab = [tag for tag in logged.Tags()["tensors"] if tag.startswith("attention/sentence_")]
    assert tab and all({e.step for e in logged.Tensors(tag)} == {6} for tag in tab)  # nothing of step 12


def test_json_summaries_hold_non_finite_numbers_as_null():
    from viz.tab.summary import json_summary

    summary = json_summary("lens", {"top_probs": [[float("nan"), 0.5]], "produced_prob": float("-inf")})
    text = summary.value[0].tensor.string_val[0].decode("utf-8")
    assert json.loads(text) == {"top_probs": [[None, 0.5]], "produced_prob": None}  # as JSON.stringify writes


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


def test_best_checkpoint_is_the_epoch_of_lowest_validation_loss(tiny_run):
    losses = [s.value for s in read_events(tiny_run).Scalars("val/loss")]  # one per epoch
    assert len(set(losses)) == EPOCHS
    (best,) = (tiny_run / "checkpoints").glob("best-*.ckpt")
    assert best.name.startswith(f"best-epoch{losses.index(min(losses))}-")


def test_resume_takes_the_newest_weights_of_last_and_interrupted(tmp_path):
    """The rule of training.checkpoints (tested in full in test_run_checkpoints.py)."""
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


def test_attention_probes_are_the_first_short_validation_sentences(hand_made):
    datamodule, _ = hand_made
    logger = AttentionLogger(num_sentences=1, max_tokens=4, stats_sentences=2)
    logger._prepare(datamodule)
    assert [i for i, _, _ in logger._probes] == [2]  # the others need 6 and 5 positions
    assert [i for i, _, _ in logger._stats_items] == [0, 1]
    logger = AttentionLogger(num_sentences=2, max_tokens=3)
    logger._prepare(datamodule)
    assert [i for i, _, _ in logger._probes] == [0, 1]  # none is short enough: the first ones


def test_attention_is_logged_at_the_first_validation_then_every_nth_epoch_and_never_in_the_sanity_check():
    def trainer(epoch, sanity=False):
        return SimpleNamespace(current_epoch=epoch, sanity_checking=sanity, should_stop=False, max_steps=-1,
                               global_step=6 * epoch, max_epochs=-1)

    every_second = AttentionLogger(every_n_epochs=2)
    assert not every_second._due(trainer(0, sanity=True))
    assert every_second._due(trainer(0))  # the first validation, whatever the period
    every_second._logged_step = 6  # once it has logged
    assert [every_second._due(trainer(e)) for e in range(4)] == [False, True, False, True]
    assert not AttentionLogger(every_n_epochs=1)._due(trainer(0, sanity=True))
    assert not AttentionLogger(every_n_epochs=0)._due(trainer(0))


def test_attention_images_per_layer_and_head_have_generated_tokens_on_the_rows(hand_made, recorded):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logger = AttentionLogger(num_sentences=1, max_tokens=4, per_head=True)
    logger._prepare(datamodule)  # the probe: "c d e" -> "z w"
    _, src_ids, tgt_ids = logger._probes[0]
    seen = sentence_pass(module.model, src_ids, tgt_ids)
    tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
    logger._log_images(experiment, tokens, seen.sentence_maps(), 1, 0)
    batch = collate([logger._probes[0]])
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    source, target_in, target_out = ["c", "d", "e", "</s>"], ["<s>", "z", "w"], ["z", "w", "</s>"]
    axes = attention_axes(source, target_in, target_out)
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        assert drawn[f"attention_overview/{kind}/sentence_1"][1:] == axes[kind]
        for layer in (1, 2):
            for head in (1, 2):
                weights, rows, cols = drawn[f"attention_{kind}/sentence_1/layer_{layer}/head_{head}"]
                assert (rows, cols) == axes[kind]
                torch.testing.assert_close(weights, layers[layer - 1][0, head - 1])
    assert len(drawn) == 3 * (1 + 2 * 2)


def test_head_statistics_average_over_stats_sentences_with_padding_masked(hand_made, recorded, monkeypatch):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.__setitem__(name, value))
    logger = AttentionLogger(num_sentences=1, stats_sentences=3)
    logger._prepare(datamodule)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)

    batch = collate(logger._stats_items)
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    maps = dict(zip(("encoder", "decoder", "cross"), maps))
    gold = [set(p.alignment) for p in PAIRS]
    expected = summarize(maps, src_valid=batch.src != PAD, tgt_valid=batch.tgt_out != PAD, gold=gold)
    for kind, named in expected.items():
        for name, values in named.items():
            torch.testing.assert_close(drawn[f"heads/{kind}_{name}"], values)
    agreement, aer = expected["cross"]["agreement"], expected["cross"]["aer"]
    assert logged["heads/best_alignment"] == agreement.max().item() > agreement.mean().item()
    assert logged["heads/best_aer"] == aer.min().item() < aer.max().item()
    # Without the source mask, target positions facing source padding would count on the cross diagonal.
    unmasked = summarize({"cross": maps["cross"]}, tgt_valid=batch.tgt_out != PAD)
    assert not torch.allclose(unmasked["cross"]["diagonal"], expected["cross"]["diagonal"])


def test_head_statistics_score_no_alignment_when_a_word_is_two_tokens(hand_made, recorded, monkeypatch):
    # The links index words; with "x y" one word of two tokens (as a Chinese word of two characters is), a
    # link's word position is no token position, so no AER is logged rather than a wrong one.
    datamodule, module = hand_made
    experiment, drawn = recorded
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.__setitem__(name, value))
    pairs = [*PAIRS[:1], Pair("a b", "x y z w", ((0, 0), (1, 1), (0, 2)), target_words=("x y", "z", "w"))]
    served = SimpleNamespace(
        pairs=lambda split: pairs,
        src_tokenizer=datamodule.src_tokenizer,
        tgt_tokenizer=datamodule.tgt_tokenizer,
        gold_set=lambda: None,
    )
    logger = AttentionLogger(num_sentences=1, stats_sentences=2, explanation_sentences=0)
    logger._prepare(served)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    assert "heads/cross_entropy" in drawn and "heads/cross_aer" not in drawn
    assert "heads/best_aer" not in logged and "heads/best_alignment" not in logged


def _decoded(summary_value):
    return tensor_util.make_ndarray(summary_value.tensor)


def test_attention_tensors_hold_every_head_in_float16_with_tokens_and_gold_cells(hand_made, recorded):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=2, num_images=0, max_tokens=6)
    logger._prepare(datamodule)
    for number, (index, src_ids, tgt_ids) in enumerate(logger._probes):
        seen = sentence_pass(module.model, src_ids, tgt_ids)
        tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
        logger._log_tensors(experiment, tokens, seen.sentence_maps(), PAIRS[index], number, 7, 10**6)
    summaries = experiment.summaries
    assert sorted(summaries) == sorted(
        f"attention/sentence_{n}/{part}" for n in (0, 1) for part in ("text", "encoder", "decoder", "cross")
    )
    assert {v.metadata.plugin_data.plugin_name for v in summaries.values()} == {"attention"}
    text = json.loads(_decoded(summaries["attention/sentence_1/text"]).item())  # PAIRS[1]: "a b" -> "x y z w"
    assert text == {
        "source": "a b", "target": "x y z w", "source_tokens": ["a", "b", "</s>"],
        "target_in": ["<s>", "x", "y", "z", "w"], "target_out": ["x", "y", "z", "w", "</s>"],
        "gold": [[0, 0], [1, 1], [2, 1], [3, 0]],  # [row, column]: target word t generated at row t
    }
    batch = collate([logger._probes[1]])
    _, maps = module.model(batch.src, batch.tgt_in, return_attention=True)
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        logged = _decoded(summaries[f"attention/sentence_1/{kind}"])
        assert logged.dtype == np.float16 and logged.shape == (2, 2, *layers[0].shape[2:])  # (L, H, Tq, Tk)
        expected = torch.stack([layer[0] for layer in layers])
        torch.testing.assert_close(torch.from_numpy(logged.astype(np.float32)), expected, atol=1e-3, rtol=0)


def test_attention_tensors_stay_within_the_byte_budget(hand_made, recorded):
    datamodule, module = hand_made
    experiment, _ = recorded
    logger = AttentionLogger(num_sentences=3, max_tokens=10)
    logger._prepare(datamodule)
    index, src_ids, tgt_ids = logger._probes[0]  # "a b c d e" -> "x y z": S = 6, T = 4
    seen = sentence_pass(module.model, src_ids, tgt_ids)
    tokens, maps = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer), seen.sentence_maps()
    size = 2 * 2 * (6 * 6 + 4 * 4 + 4 * 6) * 2  # L * H * (encoder + decoder + cross cells) * 2 bytes
    assert logger._log_tensors(experiment, tokens, maps, PAIRS[index], 0, 0, size) == size
    with pytest.warns(UserWarning, match=r"probe sentence 1 would take 608 bytes, more than the 607 left"):
        assert logger._log_tensors(experiment, tokens, maps, PAIRS[index], 1, 0, size - 1) is None
    assert not any(tag.startswith("attention/sentence_1/") for tag in experiment.summaries)


def test_probes_after_one_over_the_budget_are_left_out_so_the_ids_have_no_gap(hand_made, recorded):
    """Probe 1 ("a b" -> "x y z w") is over what probe 0 left of the budget, probe 2 ("c d e" -> "z w") would
    fit: it is left out too, so the tab's sentences stay 0 .. k-1, and the warning says what is shown."""
    datamodule, module = hand_made
    experiment, _ = recorded
    # The weights alone (test_explain_logging counts the explanations with them).
    logger = AttentionLogger(num_sentences=3, num_images=0, max_tokens=10, stats_sentences=0,
                             explanation_sentences=0, explain_probes=False)
    size = 2 * 2 * (6 * 6 + 4 * 4 + 4 * 6) * 2  # probe 0, "a b c d e" -> "x y z": L * H * cells * 2 bytes
    logger.max_bytes = size + 2 * 2 * (4 * 4 + 3 * 3 + 3 * 4) * 2  # room for probe 0 and then probe 2
    logger._prepare(datamodule)
    trainer = SimpleNamespace(logger=SimpleNamespace(experiment=experiment), current_epoch=0,
                              sanity_checking=False, datamodule=datamodule, global_step=5)
    with pytest.warns(UserWarning, match=r"probe sentence 1 would take .* the ATTENTION tab shows probe "
                                         r"sentences 0 to 0 only"):
        logger.on_validation_epoch_end(trainer, module)
    logged = {tag.split("/")[1] for tag in experiment.summaries if tag.startswith("attention/sentence_")}
    assert logged == {"sentence_0"}


def test_head_statistics_in_batches_under_a_memory_bound_equal_those_of_one_batch(hand_made, recorded):
    datamodule, module = hand_made
    experiment, drawn = recorded
    logger = AttentionLogger(num_sentences=1, stats_sentences=3)
    logger._prepare(datamodule)
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    whole = dict(drawn)
    config = module.model.config
    smallest = attention_logging.attention_bytes(config, 4, 3)  # "c d e" -> "z w" alone
    batches = attention_logging.statistics_batches(logger._stats_items, config, smallest)
    assert [[i for i, _, _ in batch] for batch in batches] == [[1], [2], [0]]  # one sentence each, by length
    assert attention_logging.statistics_batches(logger._stats_items, config, 10**9) == [
        sorted(logger._stats_items, key=lambda item: (len(item[1]), len(item[2])))
    ]
    logger.stats_max_bytes = smallest
    drawn.clear()
    logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    assert set(drawn) == set(whole) and any(tag.endswith("cross_aer") for tag in drawn)
    for tag, values in whole.items():
        torch.testing.assert_close(drawn[tag], values, atol=1e-6, rtol=0)


def test_tiny_run_logs_attention_tensors_of_every_probe_at_every_validation(tiny_run):
    events = read_events(tiny_run)
    tensors = set(events.Tags()["tensors"])
    for number in (0, 1):
        for part in ("text", "encoder", "decoder", "cross"):
            assert len(events.Tensors(f"attention/sentence_{number}/{part}")) == EPOCHS
    assert {"attention/statistics/cross/agreement", "attention/statistics/encoder/next"} <= tensors
    size = sum(
        len(event.tensor_proto.SerializeToString())
        for tag in tensors if tag.startswith("attention/")
        for event in events.Tensors(tag)[-1:]
    )
    # bytes per validation for the tiny model (the default run's is measured in docs/attention.md)
    assert size < 50_000


def test_a_sentence_longer_than_max_len_stops_the_run_before_training(tmp_path):
    """Found when the run starts, with its file and line: not as a traceback at the first validation."""
    data = short_tsv_corpus(tmp_path / "data", val=["w1 w2\tv1", "a b c d e f g h i j k l\tv1 v2"])
    with pytest.raises(SystemExit) as stopped:
        train_tiny(
            tmp_path / "runs", "--data.dataset", "tsv", "--data.path", str(data), "--data.tokenizer", "word",
            "--model.max_len", "8",
        )
    assert str(stopped.value) == (
        f"error: {data / 'val.tsv'}:2: source has 12 tokens, 13 with EOS, longer than the model's max_len 8"
    )
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


@pytest.mark.slow
def test_compile_trains_through_the_compiled_forward_and_matches_eager(tmp_path):
    from train import main

    def run(*extra):
        return main([
            "--config", TINY_CONFIG, "--trainer.logger.init_args.save_dir", str(tmp_path),
            "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "6",
            "--trainer.log_every_n_steps", "1", "--model.dropout", "0", "--attention.every_n_epochs", "0",
            "--trainer.limit_val_batches", "0",
            *extra,
        ])

    compiled = run("--model.compile", "true")
    assert compiled.model._train_forward is not None  # the training steps went through torch.compile
    eager = run()
    assert eager.model._train_forward is None
    losses = [loss_curve(Path(cli.trainer.log_dir)) for cli in (compiled, eager)]
    assert sorted(losses[0]) == sorted(losses[1]) == list(range(6))
    steps = sorted(losses[0])
    torch.testing.assert_close(
        torch.tensor([losses[0][s] for s in steps]),
        torch.tensor([losses[1][s] for s in steps]),
        rtol=1e-4,
        atol=1e-5,
    )


def test_the_default_run_logs_far_less_than_1_mb_of_attention_per_validation(recorded):
    """The default model (configs/default.yaml) on the default toy data: every tensor the ATTENTION tab gets
    at one validation, serialised as in the event file, stays under the 1 MB target and within max_bytes."""
    module, datamodule, logger = default_run()
    experiment, _ = recorded
    logger._prepare(datamodule)
    with torch.no_grad():
        for number, (index, src_ids, tgt_ids) in enumerate(logger._probes[: logger.num_sentences]):
            seen = sentence_pass(module.model, src_ids, tgt_ids)
            tokens = seen.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer)
            logger._log_tensors(experiment, tokens, seen.sentence_maps(), logger._pairs[index], number, 0,
                                logger.max_bytes)
        logger._log_head_statistics(experiment, module.model, module.config, 0, module)
    summaries = experiment.summaries
    assert sum(tag.startswith("attention/sentence_") for tag in summaries) == 4 * 4  # 4 probes logged whole
    weights = sum(len(summaries[t].tensor.tensor_content) for t in summaries if t.split("/")[-1] in
                  ("encoder", "decoder", "cross"))
    # 3 layers x 4 heads x (S*S + T*T + T*S) x 2 bytes, every probe at most 16 tokens a side
    assert weights <= 4 * 3 * 4 * 3 * 16 * 16 * 2
    total = sum(len(value.SerializeToString()) for value in summaries.values())
    assert weights < total < 100_000


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


def varying_epochs(tmp_path, monkeypatch) -> tuple[tuple[str, ...], list[int]]:
    """(train_tiny's arguments, batches in each of its 3 epochs) for a corpus whose epochs have 25, 26 and 24
    batches. The token-bucket sampler cuts each epoch from a fresh shuffle, in chunks (16,384 pairs; 30 here,
    so that 120 pairs show it), so epochs differ by a batch or two."""
    import random

    import data.batching
    from tests.conftest import short_tsv_corpus

    class Chunked(data.batching.TokenBucketBatchSampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, chunk_size=30, **kwargs)

    monkeypatch.setattr(data.batching, "TokenBucketBatchSampler", Chunked)
    rng = random.Random(14)
    lines = [" ".join(f"w{rng.randint(0, 9)}" for _ in range(rng.randint(1, 11))) for _ in range(120)]
    pairs = [f"{line}\t{line}" for line in lines]
    corpus = short_tsv_corpus(tmp_path / "data", train=pairs, val=pairs[:8], test=pairs[:8])
    counts = []
    for epoch in range(3):
        epoch_sampler = Chunked([len(line.split()) + 1 for line in lines], max_tokens=40, seed=1234)
        epoch_sampler.set_epoch(epoch)
        counts.append(len(epoch_sampler))
    assert counts[1] > counts[0] > counts[2], counts  # the premise: a longer epoch, then a shorter one
    args = ("--data.dataset", "tsv", "--data.path", str(corpus), "--data.tokenizer", "word",
            "--data.max_tokens", "40", "--data.max_train_len", "40", "--trainer.max_epochs", "3",
            "--trainer.log_every_n_steps", "1", "--attention.every_n_epochs", "0",
            "--model.decode_every_n_epochs", "0")  # fmt: skip
    return args, counts


def test_every_epoch_runs_all_its_batches_and_validates_after_them_though_their_number_varies(
    tmp_path, monkeypatch
):
    # Lightning counts the first epoch's batches once. It validated after that many batches of every epoch, so
    # a shorter epoch never validated; and it ended every epoch after at most that many, so a longer one lost
    # its last batch and its validation with it.
    args, counts = varying_epochs(tmp_path, monkeypatch)
    run = train_tiny(tmp_path / "runs", *args)
    # Lightning logs a validation's scalars at the count of batches stepped before its epoch's last.
    ends = [sum(counts[: epoch + 1]) for epoch in range(3)]
    assert sorted(val_curve(run)) == [end - 1 for end in ends]
    assert sorted(loss_curve(run)) == list(range(ends[-1]))


def test_a_run_resumed_in_an_epoch_longer_than_the_first_runs_it_whole_and_resumes_exactly(
    tmp_path, monkeypatch
):
    # A resumed run counts its batches while the loader still stands at the first epoch: this one was cut
    # at the first epoch's length, one batch short, and did not validate there.
    args, counts = varying_epochs(tmp_path, monkeypatch)
    uninterrupted = train_tiny(tmp_path / "whole", *args)
    with monkeypatch.context() as patch:
        interrupt_at(patch, counts[0] + 3, "sigint")  # in the second epoch, the longer one
        with pytest.raises(SystemExit):
            train_tiny(tmp_path / "resumed", *args)
    run = next((tmp_path / "resumed" / "tiny").iterdir())
    train_tiny(tmp_path / "resumed", *args, "--resume", str(run))
    assert val_curve(run) == val_curve(uninterrupted)
    assert loss_curve(run) == loss_curve(uninterrupted)
