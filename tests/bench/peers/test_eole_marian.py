"""``bench/peers/eole_baseline.py`` and ``bench/peers/marian_baseline.py`` (with ``bench/peers/common.py``,
which JoeyNMT's baseline shares), checked without eole or Marian: the configs each writes, the progress read
from each log, the scoring and the watchdog; the installed eole and Marian where their environments exist."""

import itertools
import math
import os
from pathlib import Path

import pytest

# the peers' environments, which bench/peers/eole_baseline.py and bench/peers/marian_baseline.py make
EOLE_VENV = Path(__file__).resolve().parents[3] / "bench" / ".eole-venv"
MARIAN_VENV = Path(__file__).resolve().parents[3] / "bench" / ".marian-venv"


def test_eole_config_is_the_wmt17_spm_recipe_with_the_stated_changes(tmp_path):
    import yaml

    from bench.peers.eole_baseline import parse_args, recipe_changes, write_config

    data = tmp_path / "multi30k"
    args = parse_args(["--data", str(data), "--minutes", "7", "--threads", "2", "--vocab-size", "6000"])
    cfg = yaml.safe_load(write_config(args, tmp_path).read_text())
    out = tmp_path.resolve()
    # The changes: Multi30k, no validation set, one SentencePiece BPE and one vocabulary for both sides, ...
    assert cfg["data"] == {"corpus_1": {"path_src": str(data.resolve() / "train.de"),
                                        "path_tgt": str(data.resolve() / "train.en")}}  # fmt: skip
    assert cfg["transforms"] == ["sentencepiece", "filtertoolong"]
    spm = str(out / "spm.model")
    assert cfg["transforms_configs"]["sentencepiece"] == {"src_subword_model": spm, "tgt_subword_model": spm}
    assert cfg["src_vocab"] == cfg["tgt_vocab"] == str(out / "vocab.shared") and cfg["share_vocab"] is True
    assert (cfg["src_vocab_size"], cfg["tgt_vocab_size"], cfg["n_sample"]) == (6000, 6000, 0)
    # ... this project's sizes and recipe in eole's terms, on the CPU ...
    m, t = cfg["model"], cfg["training"]
    assert (m["layers"], m["hidden_size"], m["heads"], m["transformer_ff"]) == (3, 256, 4, 512)
    assert m["embeddings"]["word_vec_size"] == 256 and m["share_embeddings"] and m["share_decoder_embeddings"]
    assert (t["dropout"], t["attention_dropout"], t["label_smoothing"], t["max_grad_norm"]) == ([0.15], [0.0],
                                                                                                 0.1, 1.0)
    assert (t["batch_type"], t["batch_size"], t["accum_count"]) == ("tokens", 1024, [1])
    assert (t["learning_rate"], t["warmup_steps"], t["decay_method"]) == (0.001, 300, "cosine")
    assert (t["gpu_ranks"], t["compute_dtype"], t["num_workers"]) == ([], "fp32", 0)
    assert "valid_steps" not in t and t["model_path"] == str(out / "model")
    # ... and the recipe as it is
    assert (t["optim"], t["adam_beta2"], t["normalization"]) == ("adamw", 0.998, "tokens")
    assert t["param_init_method"] == "xavier_uniform"
    changes = recipe_changes(args)
    assert changes[1].startswith("joint SentencePiece BPE of 6000 learnt on Multi30k train")
    assert changes[-3] == "CPU fp32, 2 torch thread(s), no data-loading workers (recipe: GPU bf16, 4 workers)"
    assert changes[-2].startswith("training stops after 7 min")
    # decoding with this project's length penalty, no tuning knob away from the first hour's
    assert changes[-1] == "decoding: length penalty wu (GNMT), alpha 1 (eole's default: avg)"
    assert not any(c.startswith("tuned:") for c in changes) and "add_qkvbias" not in m


def test_eole_tuning_knobs_reach_its_config_and_are_listed(tmp_path, capsys):
    import yaml

    from bench.peers.eole_baseline import decode_options, parse_args, recipe_changes, write_config

    args = parse_args(["--data", str(tmp_path), "--lr", "5e-4", "--adam-beta2", "0.98", "--biases",
                       "--length-penalty", "avg"])  # fmt: skip
    cfg = yaml.safe_load(write_config(args, tmp_path).read_text())
    t, m = cfg["training"], cfg["model"]
    assert (t["learning_rate"], t["adam_beta2"], t["dropout"]) == (5e-4, 0.98, [0.15])
    assert m["add_qkvbias"] and m["add_ffnbias"] and m["add_final_linear_bias"]
    changes = recipe_changes(args)
    assert "tuned: lr 0.0005 (first hour: 0.001)" in changes
    assert "tuned: biases True (first hour: False)" in changes
    assert "tuned: adam beta2 0.98 (first hour: 0.998)" in changes
    assert changes[-1] == "decoding: length penalty avg (eole's default: avg)"
    assert decode_options(args) == ["--length_penalty", "avg", "--alpha", "1.0"]
    for bad, message in ((["--adam-beta2", "1"], "--adam-beta2 must be between 0 and 1, got 1.0"),
                         (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
                         (["--lr", "0"], "--lr must be positive")):  # fmt: skip
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert message in capsys.readouterr().err


def test_eole_learning_rate_warms_up_then_reaches_zero_with_the_time_budget():
    from bench.peers.eole_venv import Budget, lr_factor

    assert [lr_factor(step, 4, 0.0) for step in (1, 2, 4)] == [0.25, 0.5, 1.0]
    assert lr_factor(5, 4, 0.0) == 1.0  # no time spent yet: no decay
    # half the time for 50 updates: 100 in all, so 46 of the 96 after warm-up are done
    assert lr_factor(50, 4, 0.5) == pytest.approx(0.5 * (1 + math.cos(math.pi * 46 / 96)))
    assert lr_factor(100, 4, 1.0) == 0.0 and lr_factor(100, 4, 1.5) == 0.0
    budget = Budget(3600)
    assert budget.fraction() == 0.0 and not budget.spent()  # the clock starts with the first batch
    budget.stop()  # the watchdog's SIGINT
    assert budget.spent()


def test_eole_training_progress_from_its_log():
    from bench.peers.eole_baseline import training_progress

    log = """\
[2026-11-26 18:42:01,012 INFO] Step 50/50000; acc: 5.1; ppl: 2886.86; xent: 8.54; lr: 0.00017; 82 sec;
[2026-11-26 18:43:01,012 INFO] Step 100/50000; acc: 8.7; ppl: 1886.86; xent: 7.54; lr: 3.33e-04; 164 sec;
time budget spent at update 101
[2026-11-26 18:43:10,276 INFO] Saving optimizer and weights to step_101, and symlink to /tmp/eole/model
"""
    assert training_progress(log) == {"updates": 101, "last_train_accuracy": 8.7,
                                      "learning_rates": [[50, 0.00017], [100, 3.33e-4]]}  # fmt: skip
    # eole 0.6.4's reports: source/target tokens a second over the report, seconds since training began
    log = """\
[09:37:33 INFO] Step 100/50000; acc: 9.6; lr: 3.33e-04; bsz:  824/ 882/64; 1123/1200 tok/s;     60 sec;
[09:38:43 INFO] Step 200/50000; acc: 23.8; lr: 6.67e-04; bsz:  833/ 890/64; 1400/1500 tok/s;    100 sec;
"""
    progress = training_progress(log)
    assert progress["target_tokens_per_second"] == round((1200 * 60 + 1500 * 40) / 100)  # 1320, not 1350
    assert progress["learning_rates"] == [[100, 3.33e-4], [200, 6.67e-4]] and progress["updates"] == 200
    assert training_progress("") == {"updates": 0}


def test_marian_config_is_the_transformer_example_with_the_stated_changes(tmp_path):
    import yaml

    from bench.peers.marian_baseline import parse_args, recipe_changes, write_config

    data = tmp_path / "multi30k"
    args = parse_args(["--data", str(data), "--threads", "2", "--layers", "2", "--lr", "0.001"])
    cfg = yaml.safe_load(write_config(args, tmp_path).read_text())
    out = tmp_path.resolve()
    assert cfg["train-sets"] == [str(data.resolve() / "train.de"), str(data.resolve() / "train.en")]
    assert cfg["vocabs"] == [str(out / "vocab.spm")] * 2 and cfg["dim-vocabs"] == [8000, 8000]
    assert "valid-sets" not in cfg and cfg["model"] == str(out / "model" / "model.npz")
    assert (cfg["enc-depth"], cfg["dec-depth"], cfg["dim-emb"], cfg["transformer-heads"]) == (2, 2, 256, 4)
    assert (cfg["transformer-dim-ffn"], cfg["transformer-dropout"]) == (512, 0.15)
    assert cfg["label-smoothing"] == 0.1
    assert (cfg["mini-batch-words"], cfg["clip-norm"], cfg["cpu-threads"]) == (1024, 1.0, 2)
    assert (cfg["learn-rate"], cfg["lr-warmup"], cfg["lr-decay-inv-sqrt"]) == (0.001, 300, [300])
    # the recipe as it is: post-LN ("dan"), all embeddings tied, its Adam and cost
    assert (cfg["transformer-postprocess"], cfg["tied-embeddings-all"], cfg["cost-type"]) == ("dan", True,
                                                                                             "ce-mean-words")
    assert cfg["optimizer-params"] == [0.9, 0.98, 1e-09] and cfg["sigterm"] == "save-and-exit"
    assert recipe_changes(args)[2] == (
        "model: 2+2 layers, width 256, 4 heads, feed-forward 512 (recipe: 6+6, 512, 8, 2048)"
    )


def marian_rate(update: int, cfg: dict) -> float:
    """Marian's learning rate after ``update`` updates, as its scheduler computes it (marian-dev
    src/training/scheduler.h): warm-up, then ``lr-decay-inv-sqrt``, times the step decay's factors so far."""
    lr, warmup = cfg["learn-rate"], cfg["lr-warmup"]
    rate = lr * min(1.0, update / warmup)
    if update > cfg["lr-decay-inv-sqrt"][0]:
        rate *= (cfg["lr-decay-inv-sqrt"][0] / update) ** 0.5
    start, freq = cfg["lr-decay-start"][0], cfg["lr-decay-freq"]
    decays = 0 if update < start else (update - start) // freq + 1
    return rate * cfg["lr-decay"] ** decays


def test_marian_step_decay_ends_near_zero_at_the_paced_update(tmp_path):
    import yaml

    from bench.peers.marian_baseline import parse_args, recipe_changes, write_config

    args = parse_args(["--data", str(tmp_path), "--decay-until", "4120"])
    cfg = yaml.safe_load(write_config(args, tmp_path).read_text())
    assert cfg["lr-decay-strategy"] == "batches" and cfg["lr-decay-start"] == [1373]
    assert cfg["lr-decay-freq"] == 137  # (4120 - 1373) // 20
    # untouched before the decay starts: the recipe's 1/sqrt(step) from the 300 warm-up updates
    assert marian_rate(1372, cfg) == pytest.approx(1e-3 * (300 / 1372) ** 0.5)
    assert marian_rate(1373, cfg) < marian_rate(1372, cfg) * 0.9
    assert marian_rate(4120, cfg) == pytest.approx(1e-5, rel=1e-4)  # 1% of the peak at the hour's end
    rates = [marian_rate(u, cfg) for u in range(300, 4121)]
    assert all(a >= b for a, b in itertools.pairwise(rates))  # never rises after the warm-up
    change = recipe_changes(args)[-1]
    assert change.startswith("step decay: × 0.854775 every 137 updates") and "update 4120" in change
    # without the option: the recipe's schedule, no step decay, no extra change listed
    plain = parse_args(["--data", str(tmp_path)])
    assert "lr-decay-strategy" not in yaml.safe_load(write_config(plain, tmp_path).read_text())
    assert len(recipe_changes(plain)) == len(recipe_changes(args)) - 1
    with pytest.raises(SystemExit):
        parse_args(["--data", str(tmp_path), "--decay-until", "600"])  # not past twice the warm-up


def test_marian_training_progress_from_its_log():
    from bench.peers.marian_baseline import training_progress

    log = """\
[2026-11-26 18:34:18] Ep. 1 : Up. 20 : Sen. 640 : Cost 6.44068050 * 4,599 @ 928 after 15,397 : Time 0.29s
[2026-11-26 18:34:19] Ep. 2 : Up. 40 : Sen. 1,280 : Cost 6.10000000 * 4,599 @ 928 after 30,000 : Time 0.29s
[2026-11-26 18:44:22] Training interrupted (via signal).
"""
    assert training_progress(log) == {"epochs": 2, "updates": 40, "last_train_cost": 6.1}
    assert training_progress("") == {"epochs": 0, "updates": 0}
    timed = """\
[2026-11-26 22:58:30] Ep. 1 : Up. 260 : Sen. 17,022 : Cost 5.13926792 : Time 10.00s : 1000.00 words/s
[2026-11-26 22:58:48] Ep. 1 : Up. 280 : Sen. 18,412 : Cost 5.12024498 : Time 30.00s : 2000.00 words/s
"""
    # (10 s × 1000 + 30 s × 2000) / 40 s: weighted by each display's time, not averaged per line
    assert training_progress(timed) == {"epochs": 1, "updates": 280, "last_train_cost": 5.12024498,
                                        "target_tokens_per_s": 1750.0}  # fmt: skip


@pytest.mark.parametrize("module", ["eole_baseline", "marian_baseline"])
def test_peer_baselines_skip_cleanly_without_the_corpus_and_name_bad_options(module, tmp_path, capsys):
    import importlib

    baseline = importlib.import_module(f"bench.peers.{module}")
    venv = tmp_path / "venv"
    assert baseline.main(["--data", str(tmp_path / "absent"), "--venv", str(venv), "--out",
                          str(tmp_path / "out")]) is None  # fmt: skip
    skipped = f"skipped: no Multi30k in {tmp_path / 'absent'} (missing train.de"
    assert capsys.readouterr().out.startswith(skipped)
    assert not venv.exists() and not (tmp_path / "out").exists()  # nothing installed, nothing written
    with pytest.raises(SystemExit):
        baseline.parse_args(["--batch-tokens", "0"])
    assert "--batch-tokens must be positive, got 0" in capsys.readouterr().err


def test_peer_scoring_names_the_split_and_refuses_a_missing_translation(tmp_path):
    from bench.peers.common import score_split

    refs, hyps = tmp_path / "val.en", tmp_path / "val.hyp.en"
    refs.write_text("A dog runs on the grass.\nTwo men are talking.\n", encoding="utf-8")
    hyps.write_text("A dog runs on the grass.\nTwo men are talking.\n", encoding="utf-8")
    scores = score_split(hyps, refs, "val")
    assert (scores["test_split"], scores["sentences"], scores["bleu"]) == ("val", 2, pytest.approx(100.0))
    hyps.write_text("A dog runs on the grass.\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="1 translations of 2 sentences"):
        score_split(hyps, refs, "val")



def test_peer_decodes_val_first_and_scores_it_then_returns_test2016(tmp_path):
    from bench.peers.common import decode_val_then_test

    data, out = tmp_path / "multi30k", tmp_path / "run"
    data.mkdir(), out.mkdir()
    splits = {"val": "Two men are talking.\nA dog runs on the grass.\n", "test2016": "A cat.\n"}
    for split, lines in splits.items():
        (data / f"{split}.de").write_text(lines, encoding="utf-8")
        (data / f"{split}.en").write_text(lines, encoding="utf-8")
    calls = []

    def translate(source, hyps):  # val: one word wrong of each sentence's; test2016: copied
        calls.append(source.name)
        text = source.read_text(encoding="utf-8")
        hyps.write_text(text.replace("men", "women").replace("dog", "cat") if source.stem == "val" else text,
                        encoding="utf-8")  # fmt: skip
        return 1.5 * len(calls)

    progress = {"updates": 7}
    hyps, seconds = decode_val_then_test(data, out, translate, progress)
    assert calls == ["val.de", "test2016.de"]
    assert (hyps, seconds) == (out / "test2016.hyp.en", 3.0)  # test2016's translations and time, not val's
    assert progress["updates"] == 7 and 0 < progress["val_bleu"] < 100 and 0 < progress["val_chrf"] < 100
    assert (out / "val.hyp.en").read_text(encoding="utf-8").startswith("Two women")

SAVES_THEN_DIES_BY_SIGTERM = """
import os, signal, sys, time
print("Training started", flush=True)
def save_and_exit(*_):
    print("saved", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # as Marian does: exit 143 after saving
signal.signal(signal.SIGTERM, save_and_exit)
while True:
    time.sleep(0.01)
"""


def test_peer_watchdog_sends_the_peers_signal_and_accepts_a_death_by_it(tmp_path):
    import signal
    import sys

    from bench.peers.common import train_with_budget

    log = tmp_path / "train.out"
    command = [sys.executable, "-c", SAVES_THEN_DIES_BY_SIGTERM]
    times = train_with_budget(command, dict(os.environ), log, 0.5, started="Training started", name="Marian",
                              stop_signal=signal.SIGTERM)  # fmt: skip
    assert times["stopped_by_budget"] is True and 0.5 <= times["train_seconds"] < 5
    assert log.read_text().splitlines() == ["Training started", "saved"]
    # a peer that never prints its start line failed, even with exit 0
    with pytest.raises(RuntimeError, match=f"Marian training failed \\(exit 0\\); see {log}"):
        train_with_budget([sys.executable, "-c", "print('loading')"], dict(os.environ), log, 5,
                          started="Training started", name="Marian")  # fmt: skip


@pytest.mark.skipif(not (EOLE_VENV / "bin" / "python").exists(), reason=f"no eole environment in {EOLE_VENV}")
def test_eole_venv_patches_apply_to_the_installed_eole():
    import subprocess

    code = ("import eole.trainer\nfrom eole.utils import optimizers\n"
            "from bench.peers.eole_venv import Budget, patch_trainer\npatch_trainer(Budget(60))\n"
            "assert eole.trainer.Trainer._accum_batches.__name__ == 'budgeted'\n"
            "print(optimizers.make_learning_rate_decay_fn.__name__)")  # fmt: skip
    done = subprocess.run([str(EOLE_VENV / "bin" / "python"), "-c", code], cwd=EOLE_VENV.parents[1],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "decay_fn"


@pytest.mark.skipif(not (MARIAN_VENV / "bin" / "pymarian").exists(),
                    reason=f"no Marian environment in {MARIAN_VENV}")
def test_marian_wheel_trains_on_the_cpu(tmp_path):
    """pymarian's trainer, built with CPU support, makes a few updates of a tiny model on one thread."""
    import subprocess

    src, tgt = tmp_path / "s.de", tmp_path / "s.en"
    src.write_text("ein Hund .\neine Katze .\nzwei Hunde .\n" * 20)
    tgt.write_text("a dog .\na cat .\ntwo dogs .\n" * 20)
    vocab, model = str(tmp_path / "v.yml"), tmp_path / "model.npz"
    command = [str(MARIAN_VENV / "bin" / "pymarian"), "--type", "transformer", "--cpu-threads", "1",
               "--train-sets", str(src), str(tgt), "--vocabs", vocab, vocab, "-m", str(model),
               "--enc-depth", "1", "--dec-depth", "1", "--dim-emb", "16", "--transformer-dim-ffn", "32",
               "--transformer-heads", "2", "--after", "3u", "--mini-batch", "8", "--workspace", "64",
               "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert model.is_file()
