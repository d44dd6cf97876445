"""bench/peers/joeynmt_baseline.py, joeynmt_tune.py and joeynmt.sh: the configs each recipe writes, the sizing
of the learning rate decay, the result lines and the tables, checked without JoeyNMT; the scheduler itself is
checked in JoeyNMT's environment when it exists (``python bench/peers/joeynmt_baseline.py --venv-only`` makes
it)."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.peers.common import venv_python
from bench.peers.joeynmt_baseline import VENV

HAS_VENV = venv_python(VENV).exists()


def test_joeynmt_config_is_the_iwslt14_transformer_recipe_with_the_stated_changes(tmp_path):
    from bench.peers.joeynmt_baseline import parse_args, recipe_changes, write_config

    data = tmp_path / "multi30k"
    args = parse_args(["--data", str(data), "--minutes", "7", "--layers", "3", "--batch-tokens", "2048",
                       "--merges", "6000", "--threads", "2"])
    path = write_config(args, tmp_path)
    cfg = yaml.safe_load(path.read_text())
    # The changes: data, case, BPE merges (one joint vocabulary), CPU, and the sizes asked for.
    assert cfg["model_dir"] == str(tmp_path.resolve() / "model")
    assert (cfg["data"]["train"], cfg["data"]["dev"], cfg["data"]["test"]) == tuple(
        str(data.resolve() / name) for name in ("train", "val", "test2016")
    )
    src, trg = cfg["data"]["src"], cfg["data"]["trg"]
    assert (src["lang"], trg["lang"]) == ("de", "en")
    for side in (src, trg):
        assert (side["lowercase"], side["level"], side["tokenizer_type"]) == (False, "bpe", "subword-nmt")
        assert side["tokenizer_cfg"] == {"num_merges": 6000, "codes": str(tmp_path.resolve() / "bpe.codes"),
                                         "pretokenizer": "moses"}
        assert side["voc_file"] == str(tmp_path.resolve() / "vocab.txt")  # one vocabulary: tied embeddings
    assert cfg["use_cuda"] is False and cfg["fp16"] is False
    assert cfg["testing"]["sacrebleu_cfg"] == {"tokenize": "13a", "lowercase": False}
    assert cfg["training"]["batch_size"] == 2048 and cfg["training"]["batch_type"] == "token"
    for coder in (cfg["model"]["encoder"], cfg["model"]["decoder"]):
        assert coder["num_layers"] == 3
        # ... and the recipe as it is: a pre-LN Transformer of width 256, 4 heads, 1024-wide FFN, dropout 0.3
        widths = (coder["hidden_size"], coder["embeddings"]["embedding_dim"], coder["num_heads"])
        assert widths == (256, 256, 4)
        assert (coder["ff_size"], coder["dropout"], coder["layer_norm"]) == (1024, 0.3, "pre")
    t = cfg["training"]
    assert (t["optimizer"], t["learning_rate"], t["adam_betas"], t["scheduling"]) == ("adamw", 3e-4,
                                                                                      [0.9, 0.999], "plateau")
    assert (t["label_smoothing"], t["normalization"], t["validation_freq"]) == (0.1, "tokens", 1000)
    assert cfg["model"]["tied_embeddings"] is True and cfg["model"]["tied_softmax"] is True
    assert (cfg["testing"]["beam_size"], cfg["testing"]["beam_alpha"]) == (5, 1.0)
    changes = recipe_changes(args)
    assert "num_merges 6000 (recipe: 32000 on IWSLT14)" in changes[2]
    assert changes[3] == "CPU fp32 (use_cuda: False), 2 torch thread(s)"
    assert changes[4].startswith("training stops after 7 min")
    assert changes[5:] == ["encoder/decoder layers 3 (recipe: 6)", "batch tokens 2048 (recipe: 4096)"]


def test_joeynmt_defaults_are_the_recipe_sizes_and_bad_values_name_the_option(capsys):
    from bench.peers.joeynmt_baseline import parse_args

    args = parse_args([])
    assert (args.recipe, args.minutes, args.threads, args.split) == ("documented", 60.0, 1, "test2016")
    s = args.settings
    assert (s.layers, s.d_ff, s.dropout, s.lr, s.warmup, s.schedule, s.clip_grad_norm, s.batch_tokens,
            s.validation_freq) == (6, 1024, 0.3, 3e-4, 0, "plateau", 0.0, 4096, 1000)  # fmt: skip
    with pytest.raises(SystemExit):
        parse_args(["--batch-tokens", "0"])
    assert "--batch-tokens must be positive, got 0" in capsys.readouterr().err


def test_joeynmt_result_line_round_trips_and_the_last_one_counts():
    from bench.peers.joeynmt_baseline import parse_result, result_line

    first, last = {"bleu": 1.5}, {"bleu": 30.25, "model": "JoeyNMT → ü", "updates": 812}
    text = "\n".join(["training...", result_line(first), "decoding...", result_line(last), "done"])
    assert parse_result(text) == last
    with pytest.raises(ValueError, match="no line starting with 'joeynmt result: '"):
        parse_result("training...\n")
    with pytest.raises(ValueError, match="line 2: the JoeyNMT result is not JSON"):
        parse_result("x\njoeynmt result: {bleu: 3}\n")


def test_joeynmt_training_progress_from_its_log():
    from bench.peers.joeynmt_baseline import training_progress

    log = """\
2026-11-23 23:52:04,529 - INFO - joeynmt.training - EPOCH 1
2026-11-23 23:58:00,001 - INFO - joeynmt.training - Epoch   1, Step:      100, Batch Loss:  5.1, \
Batch Acc: 0.1, Tokens per Sec:  900, Lr: 0.000300
2026-11-23 23:59:00,001 - INFO - joeynmt.prediction - Evaluation result (greedy): bleu:  12.34, \
loss:   4.10, ppl:  60.30, acc:   0.30, 55.1[sec]
2026-11-24 00:01:04,529 - INFO - joeynmt.training - EPOCH 2
2026-11-24 00:02:11,736 - INFO - joeynmt.training - Interrupt at epoch 2, step 163.
"""
    assert training_progress(log) == {"epochs": 2, "updates": 163, "last_logged_lr": 3e-4,
                                      "last_validation_bleu_greedy": 12.34}
    assert training_progress("") == {"epochs": 0, "updates": 0}


WATCHED = """
import sys, time
print("loading data", flush=True)
print("... - EPOCH 1", flush=True)
try:
    while True:
        time.sleep(0.01)
except KeyboardInterrupt:
    print("Interrupt at epoch 1, step 3.", flush=True)
    sys.exit(0)
"""


def test_joeynmt_watchdog_interrupts_training_once_the_budget_is_spent(tmp_path):
    import sys

    from bench.peers.joeynmt_baseline import train_with_budget

    log = tmp_path / "train.out"
    times = train_with_budget([sys.executable, "-c", WATCHED], dict(os.environ), log, budget_s=0.5)
    assert times["stopped_by_budget"] is True
    assert 0.5 <= times["train_seconds"] < 5
    assert log.read_text().splitlines() == ["loading data", "... - EPOCH 1", "Interrupt at epoch 1, step 3."]

    # Started in the background by a shell (`cmd &`), a process has SIGINT ignored, and so would JoeyNMT:
    # the watchdog still stops it.
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        times = train_with_budget([sys.executable, "-c", WATCHED], dict(os.environ), log, 0.5, grace_s=5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert times["stopped_by_budget"] is True and times["train_seconds"] < 5
    assert log.read_text().splitlines()[-1] == "Interrupt at epoch 1, step 3."

    with pytest.raises(RuntimeError, match=f"JoeyNMT training failed \\(exit 3\\); see {log}"):
        train_with_budget([sys.executable, "-c", "import sys; sys.exit(3)"], dict(os.environ), log, 5)


def test_joeynmt_baseline_skips_cleanly_without_the_corpus(tmp_path, capsys):
    from bench.peers.joeynmt_baseline import main as joeynmt_main

    venv = tmp_path / "venv"
    assert joeynmt_main(["--data", str(tmp_path / "absent"), "--venv", str(venv), "--out",
                         str(tmp_path / "out")]) is None
    out = capsys.readouterr().out
    assert out.startswith(f"skipped: no Multi30k in {tmp_path / 'absent'} (missing train.de, train.en")
    assert not venv.exists() and not (tmp_path / "out").exists()  # nothing installed, nothing written


# -- the cpu-hour recipe and its knobs ---------------------------------------------------------------------


def test_cpu_hour_config_is_sized_for_the_hour_and_its_changes_name_the_shipped_values(tmp_path):
    from bench.peers.joeynmt_baseline import NO_VALIDATION, parse_args, recipe_changes, write_config

    args = parse_args(["--recipe", "cpu-hour", "--data", str(tmp_path / "multi30k"), "--minutes", "60"])
    cfg = yaml.safe_load(write_config(args, tmp_path).read_text())
    for coder in (cfg["model"]["encoder"], cfg["model"]["decoder"]):
        sizes = (coder["num_layers"], coder["ff_size"], coder["dropout"], coder["hidden_size"])
        assert sizes == (3, 512, 0.1, 256)
    t = cfg["training"]
    # 40 updates a minute for 60 minutes: 2400 updates, 300 of them warm-up, so the decay spans 2100
    assert {k: t[k] for k in t if k.startswith("learning_rate")} == {
        "learning_rate": 1e-3 / 300, "learning_rate_peak": 1e-3, "learning_rate_warmup": 300,
        "learning_rate_decay": 0.01, "learning_rate_decay_length": 2100, "learning_rate_min": 1e-8,
    }  # fmt: skip
    assert (t["scheduling"], t["clip_grad_norm"], t["batch_size"]) == ("warmupexponentialdecay", 1.0, 2048)
    assert t["validation_freq"] == NO_VALIDATION and "clip_grad_val" not in t
    assert (cfg["use_cuda"], cfg["fp16"]) == (False, False)  # JoeyNMT turns fp16 off on a CPU anyway
    assert recipe_changes(args)[5:] == [
        "encoder/decoder layers 3 (recipe: 6)", "ff_size 512 (recipe: 1024)", "dropout 0.1 (recipe: 0.3)",
        "learning rate 0.001 (recipe: 0.0003)", "warm-up updates 300 (recipe: 0)",
        "scheduling warmupexponentialdecay (recipe: plateau)", "clip_grad_norm 1.0 (recipe: none)",
        "batch tokens 2048 (recipe: 4096)", "validation_freq never (recipe: 1000)",
        "decay to 0.01 x the peak at update 2400 (40 updates/min x 60 min, the expected pace)",
    ]  # fmt: skip


def test_knobs_override_the_recipe_and_bad_ones_name_the_option(tmp_path, capsys):
    from bench.peers.joeynmt_baseline import parse_args, write_config

    args = parse_args(["--recipe", "cpu-hour", "--layers", "4", "--d-ff", "768", "--dropout", "0.15", "--lr",
                       "2e-3", "--warmup", "100", "--updates-per-minute", "10", "--minutes", "30",
                       "--clip-grad-norm", "0", "--batch-tokens", "4096"])  # fmt: skip
    t = yaml.safe_load(write_config(args, tmp_path).read_text())["training"]
    # 10 updates a minute for 30 minutes: 300 updates, 100 of them warm-up
    assert (t["learning_rate_peak"], t["learning_rate_warmup"], t["learning_rate_decay_length"]) == (
        2e-3, 100, 200
    )
    assert "clip_grad_norm" not in t and t["batch_size"] == 4096
    assert (args.settings.layers, args.settings.d_ff, args.settings.dropout) == (4, 768, 0.15)
    # The documented recipe with a knob: only that knob changes.
    doc = yaml.safe_load(write_config(parse_args(["--dropout", "0.1"]), tmp_path).read_text())["training"]
    assert (doc["scheduling"], doc["learning_rate"], doc["decrease_factor"]) == ("plateau", 3e-4, 0.7)
    for bad, message in ((["--warmup", "-1"], "--warmup must not be negative, got -1"),
                         (["--lr", "0"], "--lr must be positive, got 0.0"),
                         (["--decay-to", "1.5"], "decay_to must be between 0 and 1, got 1.5"),
                         (["--sentences", "0"], "--sentences must be positive, got 0")):  # fmt: skip
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert message in capsys.readouterr().err


def test_length_blocks_write_a_training_file_of_the_same_pairs_sorted_within_blocks(tmp_path, capsys):
    from bench.peers.joeynmt_baseline import length_blocks, parse_args, recipe_changes, write_config

    data = tmp_path / "multi30k"
    data.mkdir()
    de = [" ".join(["w"] * n) + f" d{i}" for i, n in enumerate([5, 1, 9, 3, 7, 2, 8, 4, 6, 0])]
    en = [" ".join(["v"] * (n % 4)) + f" e{i}" for i, n in enumerate(range(10))]
    (data / "train.de").write_text("".join(line + "\n" for line in de), encoding="utf-8")
    (data / "train.en").write_text("".join(line + "\n" for line in en), encoding="utf-8")
    out = tmp_path / "run"
    out.mkdir()
    args = parse_args(["--recipe", "cpu-hour", "--data", str(data), "--length-blocks", "4"])
    cfg = yaml.safe_load(write_config(args, out).read_text())
    assert cfg["data"]["train"] == str(out.resolve() / "train") and cfg["training"]["shuffle"] is False
    new_de = (out / "train.de").read_text(encoding="utf-8").splitlines()
    new_en = (out / "train.en").read_text(encoding="utf-8").splitlines()
    # the same pairs, each still beside its translation (the i of d<i> and e<i> agree)
    assert sorted(zip(new_de, new_en)) == sorted(zip(de, en))
    assert all(a.split()[-1][1:] == b.split()[-1][1:] for a, b in zip(new_de, new_en))
    # blocks of 4, 4 and 2 pairs, each sorted by its pairs' longer side in words
    order = length_blocks(list(zip(de, en)), 4)
    assert [de[k] for k in order] == new_de
    for start in (0, 4, 8):
        block = order[start : start + 4]
        longer = [max(len(de[k].split()), len(en[k].split())) for k in block]
        assert longer == sorted(longer)
    assert order != sorted(order, key=lambda k: max(len(de[k].split()), len(en[k].split())))  # not one sort
    changed = "training order length-sorted blocks of 4 pairs, read in order (recipe: shuffled)"
    assert changed in recipe_changes(args)
    # without the knob: the corpus's own file, shuffled by JoeyNMT, nothing written
    plain = yaml.safe_load(write_config(parse_args(["--recipe", "cpu-hour", "--data", str(data)]),
                                        tmp_path).read_text())  # fmt: skip
    assert plain["data"]["train"] == str(data.resolve() / "train") and plain["training"]["shuffle"] is True
    assert not (tmp_path / "train.de").exists()
    with pytest.raises(SystemExit):
        parse_args(["--length-blocks", "-1"])
    assert "--length-blocks must not be negative, got -1" in capsys.readouterr().err


def joey_rate(step: int, t: dict) -> float:
    """JoeyNMT 2.3.0's ``WarmupExponentialDecayScheduler._compute_rate``, written out from its source."""
    peak, warmup = t["learning_rate_peak"], t["learning_rate_warmup"]
    if step < warmup:
        rate = step * peak / warmup
    else:
        rate = peak * t["learning_rate_decay"] ** ((step - warmup) / t["learning_rate_decay_length"])
    return max(rate, t["learning_rate_min"])


def test_the_decay_reaches_its_share_of_the_peak_at_the_expected_update():
    from bench.peers.joeynmt_baseline import RECIPES, exponential_decay

    t = exponential_decay(RECIPES["cpu-hour"], updates=2400)
    assert joey_rate(300, t) == pytest.approx(1e-3)  # the peak, at the end of the warm-up
    assert joey_rate(150, t) == pytest.approx(5e-4)
    assert joey_rate(1350, t) == pytest.approx(1e-4)  # half way through the decay: sqrt(0.01) of the peak
    assert joey_rate(2400, t) == pytest.approx(1e-5)  # the expected end of the hour: 1% of the peak
    assert joey_rate(4800, t) < 1e-6  # a faster machine: the rate keeps falling, above JoeyNMT's stop at 1e-8
    # a warm-up longer than the budget's updates: the decay still has a length
    assert exponential_decay(RECIPES["cpu-hour"], updates=100)["learning_rate_decay_length"] == 1


SCHEDULE = """
import json, sys, torch
from pathlib import Path
sys.path.insert(0, "bench/peers")
from joeynmt_venv import patch_joeynmt
patch_joeynmt(Path(sys.argv[1]))
from joeynmt.builders import build_scheduler
from joeynmt.config import load_config, parse_train_args
# What JoeyNMT's TrainManager passes: the training section as its TrainConfig parsed it.
t = parse_train_args(load_config(Path(sys.argv[1]))["training"])._asdict()
opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=t["learning_rate"])
scheduler, at = build_scheduler(t, opt, "max", 256)
rates = {}
for step in range(2400):
    scheduler.step(step)  # JoeyNMT calls it after each update with the updates done before it
    rates[step + 1] = opt.param_groups[0]["lr"]
print(json.dumps({"at": at, "rates": {k: rates[k] for k in (150, 300, 1350, 2000, 2400)}}))
"""


@pytest.mark.skipif(not HAS_VENV, reason=f"no JoeyNMT environment in {VENV}")
def test_joeynmt_builds_the_schedule_and_follows_the_sizing(tmp_path):
    from bench.peers.joeynmt_baseline import parse_args, write_config

    config = write_config(parse_args(["--recipe", "cpu-hour", "--lr", "2e-3"]), tmp_path)
    t = yaml.safe_load(config.read_text())["training"]
    done = subprocess.run([str(venv_python(VENV)), "-c", SCHEDULE, str(config)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[3])  # fmt: skip
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["at"] == "step"
    for step, rate in out["rates"].items():
        assert rate == pytest.approx(joey_rate(int(step), t))
    assert out["rates"]["300"] == pytest.approx(2e-3)  # the config's peak, not JoeyNMT's default of 1e-3
    assert out["rates"]["2400"] == pytest.approx(2e-5)  # 1% of the peak at the 2400 updates expected


def test_the_clock_decay_reaches_its_share_of_the_peak_as_the_budget_ends_whatever_the_pace():
    from bench.peers.joeynmt_venv import clock_decay_rate

    def rate(step, seconds, warmup_seconds=300.0):
        return clock_decay_rate(step, seconds, warmup_seconds, peak=1e-3, warmup=300, decay=0.01,
                                decay_seconds=3600.0)  # fmt: skip

    assert rate(150, 10.0) == pytest.approx(5e-4)  # the warm-up counts updates, as JoeyNMT's
    assert rate(300, 300.0) == pytest.approx(1e-3)  # the peak as the warm-up ends
    assert rate(1000, 1950.0) == pytest.approx(1e-4)  # half the decay's seconds: sqrt(0.01) of the peak
    assert rate(4000, 1950.0) == pytest.approx(1e-4)  # a faster machine: the same rate at the same second
    assert rate(2400, 3600.0) == pytest.approx(1e-5)  # the budget's end: 1% of the peak
    # a warm-up that took its time: the decay spans what is left of the budget
    assert rate(600, 1200.0, warmup_seconds=1200.0) == pytest.approx(1e-3)
    assert rate(900, 2400.0, warmup_seconds=1200.0) == pytest.approx(1e-4)


def test_decay_clock_time_writes_the_budget_in_seconds_and_says_so(tmp_path):
    from bench.peers.joeynmt_baseline import parse_args, recipe_changes, write_config

    args = parse_args(["--recipe", "cpu-hour", "--minutes", "45", "--decay-clock", "time"])
    t = yaml.safe_load(write_config(args, tmp_path).read_text())["training"]
    assert (t["learning_rate_decay_seconds"], t["learning_rate_decay"]) == (2700, 0.01)
    changed = "decay to 0.01 x the peak as the 45 min end (by the clock, whatever the pace)"
    assert recipe_changes(args)[-1] == changed
    updates = parse_args(["--recipe", "cpu-hour", "--minutes", "45"])
    assert "learning_rate_decay_seconds" not in yaml.safe_load(write_config(updates, tmp_path).read_text())[
        "training"]  # the default counts updates, as the tunings of docs/peers.md did


CLOCK_SCHEDULE = """
import json, sys, torch, types
from pathlib import Path
sys.path.insert(0, "bench/peers")
import joeynmt_venv
joeynmt_venv.patch_joeynmt(Path(sys.argv[1]))
now = [100.0]
joeynmt_venv.time = types.SimpleNamespace(monotonic=lambda: now[0])  # the scheduler's clock, driven here
from joeynmt.builders import build_scheduler
from joeynmt.config import load_config, parse_train_args
t = parse_train_args(load_config(Path(sys.argv[1]))["training"])._asdict()
opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=t["learning_rate"])
scheduler, at = build_scheduler(t, opt, "max", 256)
rates = {}
for step in range(5000):  # a fast machine: 5000 updates in the hour, one every 0.72 s
    now[0] = 100.0 + 0.72 * (step + 1)
    scheduler.step(step)
    rates[step + 1] = opt.param_groups[0]["lr"]
print(json.dumps({"at": at, "rates": {k: rates[k] for k in (150, 300, 2650, 5000)}}))
"""


@pytest.mark.skipif(not HAS_VENV, reason=f"no JoeyNMT environment in {VENV}")
def test_joeynmt_decays_by_the_clock_when_the_config_says_so(tmp_path):
    from bench.peers.joeynmt_baseline import parse_args, write_config

    config = write_config(parse_args(["--recipe", "cpu-hour", "--decay-clock", "time"]), tmp_path)
    done = subprocess.run([str(venv_python(VENV)), "-c", CLOCK_SCHEDULE, str(config)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[3])  # fmt: skip
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rates = {int(k): v for k, v in out["rates"].items()}
    assert out["at"] == "step"
    assert rates[150] == pytest.approx(5e-4) and rates[300] == pytest.approx(1e-3)  # warm-up by updates
    # the first update at 0 s, the warm-up's end at 215.28 s, the hour's end at 3600 s: half the decay's
    # seconds at update 2650 (1907.28 s) and 1% of the peak at update 5000, where JoeyNMT's own decay, sized
    # for 2400 updates, would have been at 0.01 ** (4700 / 2100) of it
    assert rates[2650] == pytest.approx(1e-3 * 0.01 ** ((0.72 * 2649 - 215.28) / (3600 - 215.28)))
    assert rates[5000] == pytest.approx(1e-3 * 0.01 ** ((0.72 * 4999 - 215.28) / (3600 - 215.28)))
    assert rates[5000] == pytest.approx(1e-5, rel=2e-3)


# -- the tuning driver ---------------------------------------------------------------------------------------


def test_variant_options_scale_the_warmup_with_a_short_budget():
    from bench.peers.joeynmt_tune import DEFAULT_VARIANTS, VARIANTS, variant_options

    assert len(DEFAULT_VARIANTS) >= 4 and set(DEFAULT_VARIANTS) <= set(VARIANTS)
    assert variant_options("base", 60) == []
    assert variant_options("base", 60, {"base": 38.5, "4x4": 30.0}) == ["--updates-per-minute", "38.5"]
    assert variant_options("base", 3) == ["--warmup", "15"]
    assert variant_options("4x4", 60) == ["--layers", "4", "--updates-per-minute", "34.0"]
    assert variant_options("b4096", 1) == ["--batch-tokens", "4096", "--updates-per-minute", "20.0",
                                           "--warmup", "5"]  # fmt: skip
    from bench.peers.joeynmt_baseline import parse_args

    for name in VARIANTS:  # every variant's options are ones the baseline accepts
        parse_args(["--recipe", "cpu-hour", *variant_options(name, 60)])


def test_tune_passes_its_decay_clock_to_every_run(tmp_path):
    from bench.peers.joeynmt_baseline import parse_args as baseline_args
    from bench.peers.joeynmt_tune import joeynmt_command, parse_args

    for clock in ("updates", "time"):
        args = parse_args(["tune", "--decay-clock", clock])
        args.pace = None
        command = joeynmt_command(args, tmp_path / "b1024", "b1024")
        assert command[command.index("--decay-clock") + 1] == clock
        assert baseline_args(command[2:]).settings.decay_clock == clock


def result(bleu: float, **settings) -> dict:
    s = {"layers": 3, "d_ff": 512, "dropout": 0.1, "lr": 1e-3, "warmup": 300, "batch_tokens": 2048,
         **settings}  # fmt: skip
    return {"settings": s, "expected_updates": 2400, "updates": 2310, "last_logged_lr": 1.2e-5, "bleu": bleu,
            "chrf": 50.0 + bleu, "sentences": 1014, "test_split": "val", "train_minutes": 60.0}  # fmt: skip


def test_tuning_table_sorts_by_validation_bleu_and_marks_the_pick():
    from bench.peers.joeynmt_tune import tuning_rows, tuning_table

    rows = tuning_rows({"base": result(35.25), "4x4": result(36.5, layers=4),
                        "lr2e-3": result(12.0, lr=2e-3)})  # fmt: skip
    assert [r["variant"] for r in rows] == ["4x4", "base", "lr2e-3"]
    lines = tuning_table(rows)
    assert lines[0].endswith("| val (1014 sentences), beam 5: BLEU | chrF |")
    assert lines[2] == (
        "| **4x4** (pick) | 4 | 512 | 0.1 | 0.001 | 300 | 2048 | 2400 | 2310 | 1.20e-05 | 36.5 | 86.5 |"
    )
    assert lines[3].startswith("| base | 3 |") and lines[4].startswith("| lr2e-3 | 3 | 512 | 0.1 | 0.002 |")
    assert all(line.count("|") == 13 for line in lines)
    with pytest.raises(ValueError, match="no tuning results"):
        tuning_table([])
    from bench.peers.joeynmt_tune import measured_pace

    assert measured_pace([{**rows[0], "updates": 62, "train_minutes": 3.01}]) == {"4x4": 20.6}


def test_final_table_and_cross_check_lines():
    from bench.peers.joeynmt_tune import cross_check_lines, final_table, joey_row

    joey = joey_row("JoeyNMT", {**result(30.0), "decode_minutes": 2.46})
    ours = {"label": "ours", "precision": "32-true", "updates": 7000, "bleu": 41.0, "chrf": 60.0,
            "sentences": 1000, "decode_minutes": None}  # fmt: skip
    lines = final_table([joey, ours])
    assert lines[2] == "| JoeyNMT | 32-true (fp32) | 2310 | 30.0 | 80.0 | 1014 | 2.5 |"
    assert lines[3] == "| ours | 32-true | 7000 | 41.0 | 60.0 | 1000 |  |"
    check = {"joeynmt_test_bleu": 30.12, "project_bleu": 30.05, "project_bleu_on_joeynmt_references": 30.12,
             "references_changed_by_moses": 7, "translations_differing_from_translate_mode": 0,
             "sentences": 1000}  # fmt: skip
    assert cross_check_lines(check) == [
        "JoeyNMT test mode BLEU: 30.12 (1000 sentences; its references are Moses-tokenized then detokenized)",
        ("this project's sacreBLEU of the same translations: 30.05 against the raw references, 30.12 against "
         "JoeyNMT's"),
        ("references changed by the Moses round trip: 7; translations that differ between test and translate "
         "mode: 0"),
    ]


def test_tune_driver_skips_without_the_corpus_and_checks_its_budget(tmp_path, capsys, monkeypatch):
    from bench.peers.joeynmt_tune import main, parse_args

    main(["tune", "--corpora", str(tmp_path), "--out", str(tmp_path / "out")])
    assert capsys.readouterr().out == f"skipped: no Multi30k in {tmp_path / 'multi30k'} (pass --corpora)\n"
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("MINUTES", "3")
    monkeypatch.setenv("SENTENCES", "100")
    args = parse_args(["final"])
    assert (args.minutes, args.sentences) == (3, 100)
    with pytest.raises(SystemExit):
        parse_args(["tune", "--minutes", "0"])
    assert "--minutes must be a whole number of minutes from 1 to 1439, got 0" in capsys.readouterr().err


def test_a_tuning_in_pairs_keeps_the_earlier_rows_of_the_same_budget(tmp_path):
    from bench.peers.joeynmt_tune import earlier_rows, tuning_rows

    assert earlier_rows(tmp_path / "tuning.json", []) == []  # no earlier tuning
    hour = {"budget_minutes": 60}
    earlier = tuning_rows({"base": {**result(35.0), **hour}, "4x4": {**result(36.0, layers=4), **hour},
                           "b4096": {**result(20.0, batch_tokens=4096), "budget_minutes": 5},
                           "lr5e-4": {**result(30.0, lr=5e-4), **hour, "sentences": 20}})  # fmt: skip
    (tmp_path / "tuning.json").write_text(json.dumps(earlier))
    now = tuning_rows({"lr2e-3": {**result(37.0, lr=2e-3), **hour}, "base": {**result(34.0), **hour}})
    kept = earlier_rows(tmp_path / "tuning.json", now)
    # base ran again; b4096 had another budget, lr5e-4 other sentences: only 4x4 joins the table.
    assert [(r["variant"], r["bleu"], r["layers"]) for r in kept] == [("4x4", 36.0, 4)]


def test_final_names_what_is_missing_before_it_decodes(tmp_path, capsys):
    from bench.peers.joeynmt_baseline import main as baseline
    from bench.peers.joeynmt_tune import final, parse_args

    args = parse_args(["final", "--out", str(tmp_path), "--corpora", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"no .*tuning.json: run the tune step first"):
        final(args)
    (tmp_path / "tuning.json").write_text(json.dumps(tuning_rows_of("4x4")))
    with pytest.raises(SystemExit, match=r"no tuning run of 4x4 in .*tune/4x4: run `tune --variants 4x4`"):
        final(args)
    run = tmp_path / "tune" / "4x4"
    run.mkdir(parents=True)
    (run / "result.json").write_text("{}")  # a run without its weights
    with pytest.raises(SystemExit, match=r"--decode-only: no finished JoeyNMT run in .*4x4 \(its result"):
        baseline(["--decode-only", "--out", str(run), "--split", "test2016"])
    with pytest.raises(SystemExit):
        baseline(["--decode-only", "--out", str(run), "--d-ff", "1024"])
    assert capsys.readouterr().err.strip().endswith(
        "--decode-only decodes the run in --out as it was trained; --d-ff would be ignored")


def tuning_rows_of(*variants: str) -> list[dict]:
    from bench.peers.joeynmt_tune import tuning_rows

    return tuning_rows({name: {**result(30.0 - i), "budget_minutes": 60} for i, name in enumerate(variants)})


def test_peer_results_record_the_budget_and_go_to_the_file_named(tmp_path, capsys):
    from argparse import Namespace

    from bench.peers.common import report

    args = Namespace(minutes=60.0, threads=1, data=tmp_path)
    times = {"train_seconds": 3600.5, "prepare_seconds": 30.0, "stopped_by_budget": True}
    scores = {"bleu": 30.5, "chrf": 55.0, "sentences": 1000, "test_split": "test2016"}
    out = report(args, tmp_path, "joeynmt result: ", {"model": "m"}, tmp_path / "hyp", times, 120.0,
                 {"updates": 2400}, scores, name="result_test2016.json")  # fmt: skip
    written = json.loads((tmp_path / "result_test2016.json").read_text())
    assert written == out and not (tmp_path / "result.json").exists()
    minutes = (written["budget_minutes"], written["train_minutes"], written["decode_minutes"])
    assert minutes == (60.0, 3600.5 / 60, 2.0)
    assert capsys.readouterr().out == "joeynmt result: " + json.dumps(out) + "\n"


JOEYNMT_SH = Path(__file__).resolve().parents[3] / "bench" / "peers" / "joeynmt.sh"


def test_joeynmt_sh_skips_without_the_corpus_and_checks_minutes(tmp_path):
    import subprocess

    def joeynmt_sh(*args, minutes="60"):
        env = {**os.environ, "MINUTES": minutes}
        return subprocess.run(["bash", str(JOEYNMT_SH), *args], cwd=JOEYNMT_SH.parents[2], check=False,
                              capture_output=True, text=True, timeout=60, env=env)

    done = joeynmt_sh(str(tmp_path / "absent"), str(tmp_path / "out"))
    assert done.returncode == 0
    assert done.stdout.strip() == (
        f"skipped: no Multi30k in {tmp_path / 'absent'}/multi30k "
        "(give the corpora folder as the first argument)"
    )
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "train.de").write_text("Hallo.\n")
    done = joeynmt_sh(str(tmp_path), str(tmp_path / "out"), minutes="1.5")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: MINUTES must be a whole number of minutes from 1 to 1439, got '1.5'"
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
