"""train.py end to end with the tiny config: its run folder, logs, attention images and checkpoints, DDP,
precision, and its errors. Resuming and the checkpoint writer: tests/training/test_checkpoint_io.py; the
attention logger on hand-made inputs: tests/viz/test_attention_logging.py."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, TINY_CONFIG, read_events, short_tsv_corpus, train_tiny
from tests.helpers.runs import copy_run, interrupt_at, listing, loss_curve, val_curve
from training.module import TranslationModule

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
    # the epoch's losses come before its validation: no attention figures needed to compare them
    quick = ("--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")
    run = train_tiny(tmp_path, "--trainer.precision", "bf16-mixed", *quick)
    from training.precision import choose_precision, probe_hardware

    if choose_precision(probe_hardware("cpu")).precision != "32-true":  # tiny_run was in bf16: native here
        tiny_run = train_tiny(tmp_path / "fp32", "--trainer.precision", "32-true", *quick)
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
def test_invalid_options_give_a_clear_error(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)  # where a relative --data.path is looked for
    with pytest.raises(SystemExit) as stopped:
        train_tiny(tmp_path, *args)
    assert stopped.value.code not in (0, None)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


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
        "--attention.every_n_epochs", "0",
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


def test_best_checkpoint_is_the_epoch_of_lowest_validation_loss(tiny_run):
    losses = [s.value for s in read_events(tiny_run).Scalars("val/loss")]  # one per epoch
    assert len(set(losses)) == EPOCHS
    (best,) = (tiny_run / "checkpoints").glob("best-*.ckpt")
    assert best.name.startswith(f"best-epoch{losses.index(min(losses))}-")


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
