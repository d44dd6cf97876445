"""The benchmark runs, measures equal work on both sides, and its baseline is a correct seq2seq model."""

import contextlib
import gzip
import json
import math
import os
import random
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
import torch

from bench.speed import main
from bench.speed_common import BOS, EOS, QUICK, make_batches, our_model
from bench.speed_common import PAD as PAD_ID
from bench.tutorial_model import TutorialSeq2Seq
from model.attention import MultiHeadAttention
from tests.conftest import CORPORA
from tests.helpers.weight_surgery import suppress_eos

# The tutorial's own mix of float and boolean masks; pytest applies its own warning filters inside each test.
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")


def numbers(tree):
    """Every int or float leaf of nested dicts, with its path."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from ((f"{key}.{k}", v) for k, v in numbers(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value


def test_hour_sizes_tie_each_model_and_say_so(capsys):
    """--hour-sizes: the hours' d_ff (on --quick, quick's own) and one embedding for source, target and
    output: our model has 2 × V × D fewer parameters than untied; the tutorial's stays as the tutorial
    writes it."""
    threads = torch.get_num_threads()
    try:
        base = ["--quick", "--device", "cpu", "--threads", "1", "--steps", "1"]
        tied, untied = main([*base, "--hour-sizes"]), main(base)
    finally:
        torch.set_num_threads(threads)
    assert tied["config"]["tied"] is True and untied["config"]["tied"] is False
    assert tied["config"]["d_ff"] == QUICK.d_ff
    saved = untied["training"]["ours"]["params"] - tied["training"]["ours"]["params"]
    assert saved == 2 * QUICK.vocab_size * QUICK.d_model
    assert tied["training"]["tutorial"]["params"] == untied["training"]["tutorial"]["params"]
    assert tied["decoding"]["outputs_equal"] is True  # decoding untied, EOS suppressed as before
    assert "(tied: one embedding for source, target and output" in capsys.readouterr().out


def test_quick_run_reports_positive_figures_and_equal_decodings(tmp_path, capsys):
    path = tmp_path / "speed.json"
    threads = torch.get_num_threads()
    try:
        argv = ["--quick", "--device", "cpu", "--threads", "1", "--steps", "3", "--json", str(path)]
        results = main([*argv, "--decode-batch-sizes", "2", str(QUICK.batch_size)])
    finally:
        torch.set_num_threads(threads)  # the setting is process-wide

    figures = dict(numbers({k: results[k] for k in ("training", "decoding")}))
    figures["matmul_flop_per_s"] = results["matmul_flop_per_s"]
    assert {"training.ratio", "decoding.cache_ratio", "decoding.beam_over_greedy"} <= figures.keys()
    assert {"training.ours.matmul_peak_fraction", "training.tutorial.target_tokens_per_s"} <= figures.keys()
    for name, value in figures.items():
        assert math.isfinite(value) and value > 0, f"{name} = {value}"
    # The cached and the re-run decoder produced the same tokens, so the speed comparison compares equal work.
    assert results["decoding"]["outputs_equal"] is True
    assert results["decoding"]["cached_gflop"] < results["decoding"]["uncached_gflop"]
    by_size = results["decoding_by_batch_size"]
    assert [r["batch_size"] for r in by_size] == [2, QUICK.batch_size]
    assert by_size[1] == results["decoding"]  # the default batch size is measured once
    for r in by_size:
        assert r["outputs_equal"] is True and r["flop_ratio"] > 1
        for name, value in numbers(r):
            assert math.isfinite(value) and value > 0, f"batch {r['batch_size']}: {name} = {value}"
    assert results["machine"]["threads"] == 1
    assert results["config"]["train_iters"] == 3  # --steps
    assert json.loads(path.read_text())["decoding"]["outputs_equal"] is True
    printed = capsys.readouterr().out
    assert "ours / tutorial" in printed
    # fp32 on a CPU by default, and the packed-vs-padded row
    assert results["training"]["precision"] == results["packing"]["precision"] == "32-true"
    packing = results["packing"]
    assert packing["ratio"] == pytest.approx(
        packing["packed_target_tokens_per_s"] / packing["padded_target_tokens_per_s"]
    )
    assert 0 < packing["padding_share"] < 1
    assert f"packed / padded{packing['ratio']:>21.2f}x" in printed
    assert packing["outside_attention_ratio"] == pytest.approx(
        packing["outside_attention_target_tokens_per_s"] / packing["padded_target_tokens_per_s"]
    )
    assert f"packed outside attention{packing['outside_attention_ratio']:>12.2f}x" in printed
    # and bench/gpu.sh's rows of the same figures, both models side by side
    from bench.gpu_summary import speed_rows

    rows = speed_rows(results)
    ours = results["training"]["ours"]["target_tokens_per_s"]
    assert rows[0].startswith(f"| training: model.Transformer, 32-true | - | {ours:,.0f} tgt tok/s, ")
    assert rows[1].startswith("| training: nn.Transformer tutorial, 32-true | - | ")
    assert rows[2] == f"| training: ours / tutorial | - | {results['training']['ratio']:.2f}x |"
    assert rows[3].startswith(f"| training: packed / padded, 32-true | - | {packing['ratio']:.2f}x (")


def test_packing_outside_attention_computes_what_packing_inside_it_does():
    """The prototype ``bench_packing`` times against packing inside attention gives the same loss and
    gradients, so the two ways time the same work."""
    from bench.speed_training import attention_padded, packing, training_loss

    batch = make_batches(QUICK, 1, torch.device("cpu"))[0]
    seen = []  # per attention call: (packed inputs?, query, key and value one tensor?, key and value one?)
    project = MultiHeadAttention._project

    def recording(self, query, key, value, context, cache):
        seen.append((context.packing is not None, query is key is value, key is value))
        return project(self, query, key, value, context, cache)

    grads = []
    for outside in (False, True):
        torch.manual_seed(0)
        model = our_model(QUICK, torch.device("cpu")).eval()  # no dropout: the two passes must agree
        seen.clear()
        with (packing(True), attention_padded() if outside else contextlib.nullcontext(),
              mock.patch.object(MultiHeadAttention, "_project", recording)):
            loss = training_loss(model, batch)
        layers = QUICK.num_layers
        # encoder self, decoder self and cross per layer: packed inside attention, or padded and still one
        # tensor where one tensor came in (the one-matmul paths)
        expected = [(not outside, True, True)] * 2 * layers + [(not outside, False, True)] * layers
        assert sorted(seen) == sorted(expected)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_inside, inside), (loss_outside, outside_grads) = grads
    torch.testing.assert_close(loss_outside, loss_inside)
    for a, b in zip(outside_grads, inside, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_speed_precision_is_train_pys_choice_on_a_gpu_and_fp32_on_a_cpu_by_default(monkeypatch, capsys):
    from bench import speed

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(speed, "training_precision", lambda device: f"choice for {device.type}")
    assert speed.step_precision_name(None, cuda) == "choice for cuda"
    assert speed.step_precision_name(None, cpu) == "32-true"
    assert speed.step_precision_name("auto", cpu) == "choice for cpu"
    assert speed.step_precision_name("bf16-mixed", cuda) == "bf16-mixed"
    with pytest.raises(SystemExit):
        speed.parse_args(["--device", "cpu", "--precision", "16-mixed"])
    assert "--precision 16-mixed needs --device cuda" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        speed.parse_args(["--precision", "fp8"])
    assert speed.parse_args(["--device", "cpu", "--precision", "auto"]).precision == "auto"
    monkeypatch.undo()
    from training.precision import choose_precision, probe_hardware

    assert speed.training_precision(cpu) == choose_precision(probe_hardware("cpu")).precision


def test_speed_train_step_autocasts_and_scales_as_lightning_would():
    from bench import speed_training as speed

    batch = make_batches(QUICK, 1, torch.device("cpu"))[0]
    seen = []
    for precision, dtype in (("32-true", torch.float32), ("bf16-mixed", torch.bfloat16),
                             ("16-mixed", torch.float16)):
        model = speed.our_model(QUICK, torch.device("cpu"))
        hook = model.register_forward_hook(lambda m, args, out: seen.append(out.dtype))  # the logits
        before = [p.detach().clone() for p in model.parameters()]
        step = speed.StepPrecision(precision, torch.device("cpu"))
        assert (step.scaler is not None) == (precision == "16-mixed")  # a gradient scaler for fp16 only
        speed.train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), batch, step)
        hook.remove()
        assert seen[-1] == dtype
        assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))  # it stepped
    with pytest.raises(ValueError, match="precision must be one of"):
        speed.StepPrecision("fp8", torch.device("cpu"))


@pytest.mark.parametrize("on", [True, False])
def test_speed_packing_switch_forces_the_path(monkeypatch, on):
    from bench import speed_training as speed
    from model import transformer as transformer_module
    from model.packing import Packing

    calls = []  # packed layers pad their tokens around attention; padded ones never do
    real = Packing.pad
    monkeypatch.setattr(Packing, "pad", lambda self, x: calls.append(1) or real(self, x))
    saved = transformer_module.PACK_FROM
    batch = make_batches(QUICK, 1, torch.device("cpu"))[0]
    model = speed.our_model(QUICK, torch.device("cpu"))
    with speed.packing(on):
        speed.training_loss(model, batch)
    assert bool(calls) == on
    assert transformer_module.PACK_FROM == saved  # restored


def test_tutorial_baseline_is_causal_and_ignores_padding():
    torch.manual_seed(0)
    model = TutorialSeq2Seq(QUICK).eval()
    batch = make_batches(QUICK, 1, torch.device("cpu"))[0]
    src, tgt_in = batch.src[:1], batch.tgt_in[:1, :4]
    src = src[:, : int((src != PAD_ID).sum())]  # one sentence, no padding
    logits = model(src, tgt_in)

    changed_future = tgt_in.clone()
    changed_future[:, 3] = torch.where(tgt_in[:, 3] == 3, 4, 3)  # another ordinary token
    torch.testing.assert_close(model(src, changed_future)[:, :3], logits[:, :3])

    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt_in), logits, atol=1e-5, rtol=1e-5)


def test_baseline_greedy_decoding_is_the_teacher_forced_argmax_and_batch_independent():
    from bench.multi30k_baseline import greedy_rerun

    torch.manual_seed(0)
    model = TutorialSeq2Seq(QUICK).eval()
    src = make_batches(QUICK, 1, torch.device("cpu"))[0].src[:4]  # (4, S), padded
    rows = greedy_rerun(model, src)
    for i, row in enumerate(rows):
        one = src[i : i + 1, : int((src[i] != PAD_ID).sum())]
        assert greedy_rerun(model, one) == [row]
        limit = one.size(1) + 5  # the tutorial's: source tokens + 5
        assert len(row) <= limit
        prefix = torch.tensor([[BOS, *row]])
        with torch.no_grad():
            argmax = model(one, prefix).argmax(-1)[0].tolist()  # (T,)
        assert row == argmax[: len(row)]  # every chosen token was the most probable one
        if len(row) < limit:
            assert argmax[len(row)] == EOS  # it stopped because EOS came next


@pytest.mark.skipif(not (CORPORA / "multi30k").is_dir(), reason=f"Multi30k not found in {CORPORA}")
def test_baseline_quick_run_scores_every_test_split(tmp_path):
    from bench.multi30k_baseline import main as baseline_main

    argv = ["--quick", "--minutes", "0.02", "--data-path", str(CORPORA / "multi30k"), "--out", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        baseline_main(argv)
    finally:
        torch.set_num_threads(threads)
    written = (tmp_path / "results.json").read_text()
    results = json.loads(written)
    assert set(results["scores"]) == {"test2016", "test2017", "mscoco2017"}
    assert results["steps"] >= 1 and results["history"][-1]["steps"] == results["steps"]
    assert results["batch_size"] == 128 and results["lr"] == 1e-4  # the tutorial's recipe, as it ran
    assert results["model_sizes"]["d_model"] == 32  # --quick's model
    for split, scores in results["scores"].items():
        assert scores["sentences"] == 50
        assert 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100
        hypotheses = (tmp_path / f"{split}.hyp.en").read_text().splitlines()
        assert len(hypotheses) == 50

    # A second run into the same folder stops at once, naming the file, and leaves it as it was.
    with pytest.raises(SystemExit, match="results.json exists; pass --overwrite"):
        baseline_main(argv)
    assert (tmp_path / "results.json").read_text() == written


def test_positions_quick_table_shows_the_json_figures(tmp_path, capsys):
    """bench/positions.py --quick for two variants: the printed table holds exactly the figures of the JSON,
    and the figures are what they claim to be."""
    from bench.positions import COLUMNS, QUICK_TOY
    from bench.positions import main as positions_main
    from data.datamodule import TranslationDataModule

    path = tmp_path / "positions.json"
    threads = torch.get_num_threads()
    try:
        argv = ["--quick", "--variants", "sinusoidal", "alibi", "--threads", "1", "--json", str(path),
                "--maps", str(tmp_path / "maps")]
        results = positions_main(argv)
    finally:
        torch.set_num_threads(threads)
    assert json.loads(path.read_text()) == json.loads(json.dumps(results))
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| toy")]
    assert [[c.strip() for c in r[:2]] for r in rows] == [
        ["toy_length", "sinusoidal"], ["toy_length", "alibi"]
    ]

    datamodule = TranslationDataModule(seed=1234, **QUICK_TOY.data)
    tokenizer = datamodule.tgt_tokenizer
    references = [tokenizer.encode(p.target) for p in datamodule.pairs("test")]
    for row in rows:
        figures = results["datasets"]["toy_length"]["variants"][row[1].strip()]
        assert [c.strip() for c in row[2:]] == [fmt.format(figures[key]) for key, _, fmt in COLUMNS]
        assert figures["num_sentences"] == len(references) == 16
        assert figures["mean_reference_length"] == pytest.approx(sum(map(len, references)) / 16)
        # Forcing the right length never loses a sentence that greedy decoding got right.
        assert figures["oracle_length_exact_match"] >= figures["exact_match"]
        assert figures["exact_match"] + figures["stops_too_early"] <= 1.0
        assert figures["mean_output_length"] >= 0 and figures["train_seconds"] > 0
        # Mean distances between positions of the test sentences: above 0, below the longest sentence.
        sources = [datamodule.src_tokenizer.encode(p.source) for p in datamodule.pairs("test")]
        longest = max(map(len, references + sources)) + 1
        assert 0 < figures["encoder_distance"] < longest and 0 < figures["decoder_distance"] < longest
        drawn = [Path(name) for name in figures["maps"]]
        variant = row[1].strip()
        assert [p.name for p in drawn] == [f"toy_length_{variant}_{k}.png" for k in ("encoder", "cross")]
        assert all(p.read_bytes().startswith(b"\x89PNG") for p in drawn)


def test_oracle_length_decoding_is_greedy_without_eos_cut_at_the_reference_length():
    from bench.positions import oracle_length_greedy
    from model import Transformer
    from model.decoding import greedy_search
    from tests.conftest import random_ids, tiny_config

    torch.manual_seed(3)
    model = Transformer(tiny_config(positional="alibi", tie_output_embedding=False)).eval()
    with torch.no_grad():  # feature 0 carries nothing, so that suppress_eos below changes the EOS logit alone
        model.decoder_norm.weight[0], model.decoder_norm.bias[0] = 0.0, 1.0
        model.output_proj.weight[:, 0] = 0.0
    src = random_ids(3, 5, 13, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([2, 7, 4])
    oracle = oracle_length_greedy(model, src, lengths)
    suppress_eos(model)  # EOS never wins: greedy runs all 7 steps
    free = greedy_search(model, src, 7).tolist()
    assert oracle == [row[:n] for row, n in zip(free, lengths.tolist())]
    assert [len(o) for o in oracle] == [2, 7, 4]


# -- bench/cpu_parallel.py: one process on every core against single-threaded DDP processes ------------------


def test_cpu_parallel_rows_sum_the_processes_and_compare_tokens_per_second():
    from bench.cpu_parallel import Setup, combine, table

    one = combine(Setup("one process", 1, 2), [
        {"updates": 10, "batches": 10, "target_tokens": 5000, "seconds": 5.0},
    ])
    ddp = combine(Setup("DDP", 2, 1), [
        {"updates": 10, "batches": 10, "target_tokens": 4000, "seconds": 3.0},
        {"updates": 10, "batches": 10, "target_tokens": 5000, "seconds": 4.0},  # the slowest process counts
    ])
    assert (one["target_tokens_per_s"], one["updates_per_s"]) == (1000.0, 2.0)
    assert (ddp["batches"], ddp["target_tokens"], ddp["seconds"]) == (20, 9000, 4.0)
    assert (ddp["target_tokens_per_s"], ddp["updates_per_s"], ddp["batches_per_s"]) == (2250.0, 2.5, 5.0)
    lines = table([one, ddp]).splitlines()
    assert lines[2] == "| one process | 1 x 2 | 10 | 10 | 5000 | 5.00 | 2.00 | 2.00 | 1000 | 1.00x |"
    assert lines[3] == "| DDP | 2 x 1 | 10 | 20 | 9000 | 4.00 | 2.50 | 5.00 | 2250 | 2.25x |"


def test_cpu_parallel_commands(tmp_path):
    from bench.cpu_parallel import Setup, parse_args, train_command

    args = parse_args(
        ["--config", "configs/tiny.yaml", "--steps", "7", "--warmup", "2", "--", "--data.max_tokens", "512"]
    )
    one = train_command(Setup("one process", 1, 2), args, tmp_path)
    ddp = train_command(Setup("DDP", 3, 1), args, tmp_path)
    for command, devices in ((one, "1"), (ddp, "3")):
        text = " ".join(command)
        assert "--trainer.accelerator cpu" in text and f"--trainer.devices {devices}" in text
        assert "--trainer.max_steps 9" in text and "--trainer.limit_val_batches 0" in text
        assert command[-2:] == ["--data.max_tokens", "512"]
    assert "--trainer.strategy" not in one and ddp[ddp.index("--trainer.strategy") + 1] == "ddp"


def test_cpu_parallel_needs_a_corpus_for_multi30k(capsys):
    from bench.cpu_parallel import parse_args

    with pytest.raises(SystemExit):
        parse_args([])
    assert "configs/multi30k.yaml needs --data-path" in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_parallel_measures_one_process_and_two_process_ddp(tmp_path, capsys):
    """Both setups train configs/tiny.yaml: a two-process CPU DDP run of this project's CLI works."""
    from bench.cpu_parallel import main

    rows = main(["--config", "configs/tiny.yaml", "--processes", "2", "--threads", "1", "--steps", "3",
                 "--warmup", "1", "--json", str(tmp_path / "rows.json")])
    assert [(r["setup"], r["processes"], r["threads"]) for r in rows] == [
        ("one process", 1, 1), ("DDP", 2, 1)
    ]
    assert [r["updates"] for r in rows] == [3, 3]
    assert [r["batches"] for r in rows] == [3, 6]  # a DDP update takes a batch from each process
    assert all(r["seconds"] > 0 and r["target_tokens"] > 0 for r in rows)
    out = capsys.readouterr().out
    ratio = rows[1]["target_tokens_per_s"] / rows[0]["target_tokens_per_s"]
    assert f"| {ratio:.2f}x |" in out.splitlines()[-1]
    assert json.loads((tmp_path / "rows.json").read_text()) == rows


# -- bench/gpu.sh: its commands and its summary, checked without a GPU ---------------------------------------

GPU_SH = Path(__file__).resolve().parents[2] / "bench" / "gpu.sh"


def gpu_sh(*args, env=None):
    import subprocess

    return subprocess.run(["bash", str(GPU_SH), *args], check=False, cwd=GPU_SH.parents[1],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_gpu_sh_dry_run_prints_every_command_and_the_table_rows(tmp_path):
    done = gpu_sh("--dry-run", str(tmp_path / "absent"), env={"GPU_OUT": str(tmp_path / "out")})
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands == [
        "python -m pytest -m gpu tests/test_gpu.py -q -rs",
        f"python bench/speed.py --device cuda --json {out}/speed.json",
        (
            f"python train.py --trainer.logger.init_args.save_dir {out}/runs "
            "--trainer.logger.init_args.version gpu"
        ),
        f"python evaluate.py {out}/runs/toy/gpu/checkpoints/last.ckpt --quiet",
    ]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| what | wall time | metric |"
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == [
        "GPU tests", "bench/speed.py --device cuda",
        "training: model.Transformer, nn.Transformer tutorial, packed / padded", "toy: python train.py",
        "toy: evaluate.py last.ckpt", "Multi30k",
    ]
    assert rows[-1] == f"| Multi30k | - | skipped: no folder {tmp_path / 'absent'} |"
    assert not out.exists()  # a dry run writes nothing


def test_gpu_sh_dry_run_trains_and_evaluates_multi30k_when_its_folder_exists(tmp_path):
    done = gpu_sh("--dry-run", str(tmp_path), env={"GPU_OUT": "o"})
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands[4:] == [
        (
            f"python train.py --config configs/multi30k.yaml --data.path {tmp_path} "
            "--trainer.logger.init_args.save_dir o/runs --trainer.logger.init_args.version gpu"
        ),
        (
            "python evaluate.py o/runs/multi30k/gpu/checkpoints/last.ckpt --beam-size 5 --length-penalty 1.0 "
            "--quiet"
        ),
    ]


def test_gpu_sh_only_runs_the_named_steps_and_max_time_bounds_the_multi30k_run(tmp_path):
    done = gpu_sh("--dry-run", "--only", "multi30k,toy", "--max-time", "00:00:05:00", str(tmp_path),
                  env={"GPU_OUT": "o", "PYTHON": "python3"})
    assert done.returncode == 0, done.stderr
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands == [
        "python3 train.py --trainer.logger.init_args.save_dir o/runs --trainer.logger.init_args.version gpu",
        "python3 evaluate.py o/runs/toy/gpu/checkpoints/last.ckpt --quiet",
        (
            f"python3 train.py --config configs/multi30k.yaml --data.path {tmp_path} --trainer.max_time "
            "00:00:05:00 --trainer.logger.init_args.save_dir o/runs --trainer.logger.init_args.version gpu"
        ),
        (
            "python3 evaluate.py o/runs/multi30k/gpu/checkpoints/last.ckpt --beam-size 5 "
            "--length-penalty 1.0 --quiet"
        ),
    ]
    rows = [line.split(" | ")[0][2:] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["toy: python train.py", "toy: evaluate.py last.ckpt",
                        "Multi30k: train.py --config configs/multi30k.yaml --trainer.max_time 00:00:05:00",
                        "Multi30k: evaluate.py last.ckpt, beam 5"]


@pytest.mark.parametrize(("args", "message"), [
    (["--only", "tests,bleu"], "error: --only tests,bleu: unknown step 'bleu' (tests, speed, toy, multi30k)"),
    (["--max-time", "5m"], "error: --max-time 5m: expected DD:HH:MM:SS, e.g. 00:00:05:00"),
    (["--fast"], ("error: unknown option --fast; usage: bash bench/gpu.sh [--dry-run] "
                  "[--only tests,speed,toy,multi30k] [--max-time DD:HH:MM:SS] [MULTI30K_DIR]")),
])  # fmt: skip
def test_gpu_sh_refuses_a_bad_option_in_one_line(tmp_path, args, message):
    done = gpu_sh("--dry-run", *args, env={"GPU_OUT": str(tmp_path / "out")})
    assert done.returncode == 2
    assert done.stderr.strip() == message
    assert done.stdout == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_sh_refuses_to_run_without_cuda(tmp_path):
    done = gpu_sh(env={"GPU_OUT": str(tmp_path / "out")})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: bench/gpu.sh needs a CUDA device and torch sees none (--dry-run prints the commands)"
    )
    assert not (tmp_path / "out").exists()


def test_gpu_summary_cells(tmp_path):
    from bench.gpu_summary import cell

    log = tmp_path / "tests.log"
    log.write_text("....s\n=== short test summary ===\nSKIPPED [1] x: no\n4 passed, 1 skipped in 12.3s\n")
    assert cell("pytest", log) == "4 passed, 1 skipped"
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"training": {"ratio": 1.274}, "decoding": {"cache_ratio": 5.33}}))
    assert cell("speed", speed) == "training 1.27x nn.Transformer, KV cache 5.3x re-run"
    evaluated = tmp_path / "eval.log"
    result = {"bleu": 37.312, "chrf": 57.04, "exact_match": 0.125, "data": "test", "beam_size": 5}
    evaluated.write_text("test: 1000 sentences, beam 5\n" + json.dumps(result) + "\n")
    assert cell("evaluate", evaluated) == "BLEU 37.31, chrF 57.0, exact match 12.5% (test, beam 5)"
    assert cell("evaluate", tmp_path / "none.log") == f"missing {tmp_path / 'none.log'}"


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("ctranslate2") is None,
    reason="ctranslate2 is not installed (optional dependency: pip install ctranslate2)",
)
def test_ctranslate2_quick_run_table_matches_its_json(tmp_path, capsys):
    from bench.ctranslate2_speed import main as ct2_main

    path = tmp_path / "ct2.json"
    threads = torch.get_num_threads()
    try:
        returned = ct2_main(["--quick", "--threads", "1", "--json", str(path)])
    finally:
        torch.set_num_threads(threads)  # the setting is process-wide
    written = json.loads(path.read_text())
    assert written["rows"] == returned["rows"]
    assert written["settings"]["threads"] == 1 and written["settings"]["sentences"] == 48
    rows = {r["name"]: r for r in written["rows"]}
    assert list(rows) == ["PyTorch greedy", "PyTorch beam 5", "CTranslate2 fp32 greedy",
                          "CTranslate2 fp32 beam 5", "CTranslate2 int8 greedy", "CTranslate2 int8 beam 5"]
    for name in ("CTranslate2 fp32 greedy", "CTranslate2 fp32 beam 5"):
        assert rows[name]["same_tokens_as_pytorch"] == 1.0  # fp32 decodes exactly like PyTorch
        assert rows[name]["bleu"] == rows["PyTorch " + name.split(" ", 2)[2]]["bleu"]
    for r in rows.values():
        speed = r["sentences_per_second"]
        assert math.isfinite(speed) and speed > 0
        assert speed == pytest.approx(48 / r["seconds"])
        pytorch = rows["PyTorch greedy" if r["beam_size"] == 1 else "PyTorch beam 5"]["sentences_per_second"]
        assert r["ratio_to_pytorch"] == pytest.approx(speed / pytorch)

    # Every figure of the printed table is the JSON's, rounded as printed.
    lines = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    printed = {
        cells[0]: cells[1:]
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])
    }
    assert list(printed) == list(rows)
    for name, (speed, ratio, bleu, same) in printed.items():
        r = rows[name]
        assert float(speed) == pytest.approx(r["sentences_per_second"], abs=0.051)
        assert float(ratio.rstrip("x")) == pytest.approx(r["ratio_to_pytorch"], abs=0.0051)
        assert float(bleu) == pytest.approx(r["bleu"], abs=0.0051)
        assert float(same.rstrip("%")) == pytest.approx(100 * r["same_tokens_as_pytorch"], abs=0.051)


def test_speed_recipe_rows_skip_train_pys_batches_without_data():
    from bench.speed_training import recipe_lines

    training = {"ours": {"target_tokens_per_s": 1500.0}, "tutorial": {"target_tokens_per_s": 1000.0},
                "ratio": 1.5, "padding_share": 0.3}
    lines = recipe_lines({"config": {}, "training": training})
    assert lines[3] == f"{'random batches':26}{1500:>11}{1000:>10}{'1.50x':>8}{'30.0%':>9}"
    assert lines[4] == f"{'train.py batches':26}skipped: no --data given"


def test_speed_padding_share_counts_source_and_target_padding():
    from bench.speed_common import PAD, Batch, padding_share

    src = torch.tensor([[5, 6, 2], [7, 2, PAD]])  # 1 pad of 6
    tgt_out = torch.tensor([[5, 2, PAD, PAD], [8, 9, 6, 2]])  # 2 pads of 8
    batch = Batch(src, tgt_out, tgt_out)
    assert padding_share([batch]) == pytest.approx(3 / 14)


def test_speed_data_option_needs_the_corpus(tmp_path, capsys):
    from bench.speed import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--data", str(tmp_path)])
    assert f"--data {tmp_path}: no Multi30k there (train.de missing)" in capsys.readouterr().err


@pytest.mark.skipif(not (CORPORA / "multi30k").is_dir(), reason=f"Multi30k not found in {CORPORA}")
def test_speed_measures_the_ratio_on_the_recipe_batches(tmp_path):
    from bench.speed_decoding import decode_length
    from bench.speed_training import bench_recipe_training, recipe_data

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        recipe = recipe_data(CORPORA / "multi30k", 3, torch.device("cpu"))
        batches = recipe.batches
        assert recipe.vocab_size == 8000 and len(batches) == 3
        assert len(recipe.reference_lengths) == 1000  # test2016, the recipe's test split
        assert 10 <= decode_length(None, recipe.reference_lengths, 16) <= 20  # a short caption's tokens
        import yaml

        recipe_file = Path(__file__).resolve().parents[2] / "configs" / "multi30k.yaml"
        settings = yaml.safe_load(recipe_file.read_text())["data"]
        for b in batches:  # the recipe's token budget: sentences times the longest padded sequence
            assert b.src.numel() <= settings["max_tokens"] and b.tgt_out.numel() <= settings["max_tokens"]
            shifted = b.tgt_in[:, 1:] != PAD_ID  # train.py's shift: tgt_in is BOS + tgt_out's tokens
            assert torch.equal(b.tgt_in[:, 1:][shifted], b.tgt_out[:, :-1][shifted])
        result = bench_recipe_training(replace(QUICK, train_warmup=1, train_iters=1), torch.device("cpu"),
                                       recipe)
    finally:
        torch.set_num_threads(threads)
    assert result["batches"] == 1 and 0 <= result["padding_share"] < 0.5
    assert result["ratio"] == pytest.approx(
        result["ours"]["target_tokens_per_s"] / result["tutorial"]["target_tokens_per_s"]
    )


def test_speed_decode_length_is_the_one_asked_for_else_a_mean_reference_and_its_eos_else_the_default():
    from bench.speed_decoding import decode_length

    assert decode_length(40, [3, 4], 16) == 40
    assert decode_length(None, [14, 15, 16], 16) == 16  # mean 15 tokens, then EOS
    assert decode_length(None, [14, 15], 16) == 16  # 14.5 + 1 rounds to the even 16
    assert decode_length(None, [10, 11, 11], 16) == 12  # 10.67 + 1
    assert decode_length(None, None, 16) == 16
    with pytest.raises(ValueError, match="at least 1, got 0"):
        decode_length(0, None, 16)
    with pytest.raises(ValueError, match="no reference lengths"):
        decode_length(None, [], 16)


def test_speed_repeats_report_each_ratios_median_and_range_over_the_runs_that_all_measured_it():
    from bench.speed import ratio_spread, spread_lines

    def run(training: float, cache: float, joey: dict | None) -> dict:
        results = {"training": {"ratio": training}, "decoding": {"cache_ratio": cache}}
        return results if joey is None else {**results, "joeynmt": joey}

    runs = [
        run(1.5, 3.0, {"training_ratio": 1.2, "recipe": {"training_ratio": 1.1}}),
        run(1.1, 4.0, {"training_ratio": 1.0, "recipe": {"training_ratio": 1.3}}),
        run(1.3, 2.0, {"training_ratio": 1.4}),  # measured no train.py batches
    ]
    spread = ratio_spread(runs)
    assert [r["ratio"] for r in spread] == [
        "training / tutorial, random batches", "training / JoeyNMT, random batches",
        "greedy: KV cache / prefix re-run",
    ]  # fmt: skip
    assert spread[0] == {"ratio": "training / tutorial, random batches", "median": 1.3, "min": 1.1,
                         "max": 1.5, "values": [1.5, 1.1, 1.3]}  # fmt: skip
    assert (spread[1]["median"], spread[1]["min"], spread[1]["max"]) == (1.2, 1.0, 1.4)
    assert (spread[2]["median"], spread[2]["min"], spread[2]["max"]) == (3.0, 2.0, 4.0)
    assert ratio_spread(runs[:2])[2] == {"ratio": "training / JoeyNMT, train.py batches",
                                         "median": pytest.approx(1.2), "min": 1.1, "max": 1.3,
                                         "values": [1.1, 1.3]}  # fmt: skip
    assert ratio_spread([]) == []
    lines = spread_lines(spread, 3)
    assert lines[0] == "every ratio over 3 runs of the whole measurement"
    assert lines[2] == f"{'training / tutorial, random batches':40}{'1.30x':>8}{'1.10-1.50x':>15}"


def test_speed_options_for_decode_length_and_repeats_are_checked(capsys):
    from bench.speed import parse_args

    assert parse_args(["--decode-tokens", "40", "--repeats", "3"]).decode_tokens == 40
    assert parse_args([]).repeats == 1 and parse_args([]).decode_tokens is None
    assert parse_args(["--steps", "20"]).steps == 20 and parse_args([]).steps is None
    for argv, message in (
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--steps", "0"], "--steps must be at least 1, got 0"),
        (["--decode-tokens", "0"], "--decode-tokens must be at least 1, got 0"),
    ):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_explanation_curve_draws_every_logged_method(tiny_run, tmp_path, capsys):
    from bench.explanation_curve import main

    output = tmp_path / "curve.png"
    main([str(tiny_run), str(output)])
    assert output.stat().st_size > 1000 and capsys.readouterr().out.strip() == f"wrote {output}"
    with pytest.raises(SystemExit) as exit_:
        main([str(tiny_run), str(output)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: {output} exists; pass --overwrite to replace it"


# -- bench/multi30k_levers.py: the levers' commands, their configs and the EMA run's two sets of weights ----


def test_levers_dry_run_prints_both_trainings_and_every_evaluation_in_order(tmp_path, capsys):
    from bench.multi30k_levers import main

    out = tmp_path / "out"
    argv = ["--levers", "steps", "ema", "--test", "--dry-run", "--out", str(out), "--minutes", "90",
            "--max-tokens", "2048"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    trainings = [line for line in lines if " train.py " in line]
    assert len(trainings) == 2
    assert "--trainer.max_time 00:01:30:00" in trainings[0]
    assert "--trainer.callbacks.every_n_train_steps=200" in trainings[0]
    assert all("--data.max_tokens=2048 --trainer.callbacks+=" in line for line in trainings)
    assert "EMAWeightAveraging --trainer.callbacks.decay=0.999" in trainings[1]
    steps = out / "steps/runs/multi30k/version_0"
    ema = out / "ema/runs/multi30k/version_0"
    beam = "--beam-size 5 --length-penalty"
    assert [line.split(" evaluate.py ")[1] for line in lines if " evaluate.py " in line] == [
        f"{steps}/checkpoints/last.ckpt --split val {beam} 1.0 --quiet",
        f"{steps}/checkpoints/last.ckpt --split val {beam} 0.6 --quiet",
        f"{steps}/checkpoints/last.ckpt --split val {beam} 1.4 --quiet",
        f"{steps}/checkpoints/last.ckpt --split val {beam} 1.0 --average-last 3 --quiet",
        f"{steps}/checkpoints/last.ckpt --split val {beam} 1.0 --average-last 5 --quiet",
        f"{steps}/checkpoints/last.ckpt --split val {beam} 1.0 --average-last 10 --quiet",
        *(f"{steps}/checkpoints/last.ckpt --test-split {split} {beam} 1.0 --quiet"
          for split in ("test2016", "test2017", "mscoco2017")),
        f"{ema}/checkpoints/last.ckpt --split val {beam} 1.0 --quiet",
        f"{ema}/last_raw.ckpt --split val {beam} 1.0 --quiet",
        *(f"{ema}/checkpoints/last.ckpt --test-split {split} {beam} 1.0 --quiet"
          for split in ("test2016", "test2017", "mscoco2017")),
    ]  # fmt: skip
    assert not out.exists()
    assert main([*argv, "--score-only"]) == 0  # the same evaluations, no training
    again = capsys.readouterr().out.splitlines()
    assert again == [line for line in lines if " train.py " not in line]


@pytest.mark.parametrize(
    "peer, lever, train_option, recipe",
    [
        ("marian", "seed3", "--seed_everything=3", None),
        ("joeynmt", "fp32", "--trainer.precision=32-true", "cpu-hour"),
    ],
)
def test_levers_beside_a_peer_start_its_baseline_first_with_the_same_budget(
    tmp_path, capsys, peer, lever, train_option, recipe
):
    import importlib

    from bench.multi30k_levers import REPO, main

    out = tmp_path / "out"
    argv = ["--levers", lever, "--beside", peer, "--dry-run", "--out", str(out), "--minutes", "45"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    script = f"{peer}_baseline.py"
    started = [line for line in lines if script in line]
    trains = [i for i, line in enumerate(lines) if " train.py " in line]
    assert len(started) == 1 and lines.index(started[0]) < min(trains)  # the peer's clock starts first
    parse_args = importlib.import_module(f"bench.peers.{peer}_baseline").parse_args
    given = parse_args(started[0].split(f"{script} ")[1].split())
    assert (given.minutes, given.threads, given.out) == (45, 1, out / peer)
    assert given.data == REPO.parent / "shared" / "corpora" / "multi30k"
    assert getattr(given, "recipe", None) == recipe  # JoeyNMT's recipe for the hour, not its documented one
    assert train_option in next(line for line in lines if " train.py " in line)
    assert not out.exists()


def test_levers_read_a_peers_result_as_a_row_of_the_table(tmp_path):
    from bench.multi30k_levers import peer_row

    (tmp_path / "marian").mkdir()
    result = {"test_split": "test2016", "bleu": 12.5, "chrf": 40.25, "updates": 321}
    (tmp_path / "marian" / "result.json").write_text(json.dumps(result))
    row = peer_row("marian", tmp_path)
    assert (row["lever"], row["split"], row["bleu"], row["chrf"], row["updates"]) == (
        "marian", "test2016", 12.5, 40.25, 321)  # fmt: skip


PEER_SCRIPT = """
import signal, sys, time
from pathlib import Path
if "--venv-only" in sys.argv:
    sys.exit(0)
flag, code = Path(sys.argv[1]), int(sys.argv[2])
def terminated(*_):
    flag.write_text("terminated")
    sys.exit(143)
signal.signal(signal.SIGTERM, terminated)
flag.with_suffix(".ready").touch()  # the lever may fail from now on: the peer hears it
time.sleep(0.5 if code else 60)
sys.exit(code)
"""


def fake_levers_run(tmp_path, monkeypatch, lever_exit: int, peer_exit: int) -> list[str]:
    """``bench/multi30k_levers.py``'s arguments for one lever beside a peer, both of them small scripts that
    exit with the codes given (the peer, when it is to succeed, waits to be terminated); scoring is faked."""
    import bench.multi30k_levers as levers

    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "train.de").write_text("ein Hund\n")
    script = tmp_path / "peer.py"
    script.write_text(PEER_SCRIPT)
    flag = tmp_path / "peer.flag"
    python = sys.executable
    monkeypatch.setattr(levers, "peer_command", lambda *a: [python, str(script), str(flag), str(peer_exit)])
    ready = flag.with_suffix(".ready")  # the lever ends once the peer hears SIGTERM (or in 30 s)
    lever = (f"import time, sys, pathlib; deadline = time.time() + 30\n"
             f"while not pathlib.Path({str(ready)!r}).exists() and time.time() < deadline: time.sleep(0.05)\n"
             f"sys.exit({lever_exit})")  # fmt: skip
    monkeypatch.setattr(levers, "train_command", lambda *a: [python, "-c", lever])
    monkeypatch.setattr(levers, "last_checkpoint", lambda out, lever: out / lever / "last.ckpt")
    monkeypatch.setattr(levers, "score", lambda lever, weights, variant, split, env, dry_run: {
        "lever": lever, "variant": variant.name, "split": split, "bleu": 30.0, "chrf": 50.0})  # fmt: skip
    return ["--levers", "recipe", "--beside", "marian", "--corpora", str(tmp_path),
            "--out", str(tmp_path / "out")]  # fmt: skip


def test_a_failed_lever_stops_the_peer_beside_it_and_names_its_log(tmp_path, monkeypatch):
    import time

    from bench.multi30k_levers import main

    argv = fake_levers_run(tmp_path, monkeypatch, lever_exit=3, peer_exit=0)
    with pytest.raises(SystemExit, match=r"error: training lever recipe failed \(exit 3\): .*out/recipe.log"):
        main(argv)
    flag = tmp_path / "peer.flag"
    for _ in range(100):  # the peer is terminated, not left training for the rest of its hour
        if flag.exists() and flag.read_text():  # written whole, not only made
            break
        time.sleep(0.1)
    assert flag.read_text() == "terminated"


def test_a_failed_peer_keeps_the_levers_scores_and_names_its_log(tmp_path, monkeypatch, capsys):
    from bench.multi30k_levers import main

    assert main(fake_levers_run(tmp_path, monkeypatch, lever_exit=0, peer_exit=2)) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith(f"error: marian's run failed (exit 2): {tmp_path / 'out' / 'marian.log'}")
    rows = [json.loads(line) for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert [(r["lever"], r["variant"], r["split"]) for r in rows] == [
        ("recipe", "last", "val"), ("recipe", "last, lp 0.6", "val"), ("recipe", "last, lp 1.4", "val")]
    assert not (tmp_path / "peer.flag").exists()


def test_levers_skip_without_the_corpus_and_refuse_bad_options(tmp_path, capsys):
    from bench.multi30k_levers import main

    assert main(["--levers", "recipe", "--corpora", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == f"skipped: no Multi30k in {tmp_path / 'multi30k'} " \
        "(give the corpora folder with --corpora)"  # fmt: skip
    bad_options = (
        (["--levers", "ema", "ema"], "--levers names a lever twice: ema ema"),
        (["--levers", "ema", "--minutes", "0"], "--minutes must be from 1 to 1439, got 0"),
        (["--levers", "ema", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["--levers", "ema", "--max-tokens", "0"], "--max-tokens must be at least 1, got 0"),
    )
    for bad, message in bad_options:
        with pytest.raises(SystemExit) as exit_:
            main(bad)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.strip().endswith(message)


def test_every_lever_makes_a_config_that_train_py_accepts_and_changes_what_it_names(capsys):
    from bench.multi30k_levers import LEVERS
    from train import main

    recipe_file = Path(__file__).resolve().parents[2] / "configs" / "multi30k.yaml"

    def config(*args):
        with pytest.raises(SystemExit) as exit_:
            main(["--config", str(recipe_file), *args, "--print_config"])
        assert exit_.value.code in (0, None)
        import yaml

        return yaml.safe_load(capsys.readouterr().out)

    # Measured from the recipe with 2048-token batches (`--max-tokens 2048`); the kept lever is the recipe.
    assert config()["data"]["max_tokens"] == 1024
    recipe = config("--data.max_tokens=2048")
    changed = {}
    for lever, args in LEVERS.items():
        lever_config = config("--data.max_tokens=2048", *args)
        changed[lever] = {
            f"{section}.{key}": value
            for section in ("model", "data")
            for key, value in lever_config[section].items()
            if recipe[section][key] != value
        }
        added = lever_config["trainer"]["callbacks"] or []
        changed[lever].update({c["class_path"].split(".")[-1]: c.get("init_args", {}) for c in added})
    assert changed["recipe"] == {}
    for k in (1, 2, 3):  # the recipe itself, another seed
        assert changed[f"seed{k}"] == {}
        assert config("--data.max_tokens=2048", *LEVERS[f"seed{k}"])["seed_everything"] == k
    assert changed["fp32"] == {}  # the recipe itself, in fp32
    assert recipe["trainer"]["precision"] != "32-true"
    assert config("--data.max_tokens=2048", *LEVERS["fp32"])["trainer"]["precision"] == "32-true"
    assert changed["tokens1024"] == {"data.max_tokens": 1024}
    assert changed["dropout0.1"] == {"model.dropout": 0.1}
    assert changed["vocab10k"] == {"data.vocab_size": 10000}
    assert changed["vocab6k"] == {"data.vocab_size": 6000}
    assert changed["ema"]["EMAWeightAveraging"]["decay"] == 0.999
    steps = changed["steps"]["ModelCheckpoint"]
    assert (steps["every_n_train_steps"], steps["save_top_k"], steps["monitor"]) == (200, 10, "step")
    assert set(changed["ema"]) == {"EMAWeightAveraging"} and set(changed["steps"]) == {"ModelCheckpoint"}


def test_an_ema_run_keeps_the_average_and_the_raw_weights_and_evaluate_reads_each(tmp_path, tiny_run):
    from bench.multi30k_levers import LEVERS, raw_weights
    from tests.conftest import train_tiny
    from training.checkpoints import load_run

    run = train_tiny(tmp_path, *LEVERS["ema"], "--attention.every_n_epochs", "0")  # weights, not figures
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    raw = raw_weights(checkpoint)
    assert raw == run / "last_raw.ckpt"  # outside checkpoints/, where --average-last looks
    raw_saved = torch.load(raw, map_location="cpu", weights_only=True)
    assert "current_model_state" not in raw_saved and "averaging_state" not in raw_saved
    names = list(saved["state_dict"])
    assert any(not torch.equal(saved["state_dict"][n], saved["current_model_state"][n]) for n in names)
    for path, expected in ((checkpoint, saved["state_dict"]), (raw, saved["current_model_state"])):
        module = load_run(path, device="cpu").module
        assert all(torch.equal(module.state_dict()[n], expected[n]) for n in names), path

    with pytest.raises(SystemExit, match="holds no raw weights .* not an EMA run"):
        raw_weights(tiny_run / "checkpoints" / "last.ckpt")


KFTT_ROWS = ["forward", "reverse", "intersection", "union", "grow-diag-final-and"]


def synthetic_kftt(root: Path, *, train_pairs: int, gold_pairs: int) -> Path:
    """A KFTT-shaped folder: a word-for-word language, source word ``jK`` translated as target word ``eK``
    in the same order, so every correct link is known."""
    rng = random.Random(0)
    lengths = [rng.randint(3, 7) for _ in range(train_pairs + gold_pairs)]
    sentences = [[rng.randrange(15) for _ in range(length)] for length in lengths]

    def side(words: list[int], prefix: str) -> str:
        return " ".join(f"{prefix}{word}" for word in words)

    kftt = root / "kftt-ja-en"
    (kftt / "gold").mkdir(parents=True)
    train, gold = sentences[:train_pairs], sentences[train_pairs:]
    for lang, prefix in (("ja", "j"), ("en", "E")):  # capitals in training English: the bench lowercases it
        text = "".join(side(words, prefix) + "\n" for words in train)
        (kftt / f"train.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    (kftt / "gold" / "ja-en.src-tgt").write_text(
        "".join(f"{side(words, 'j')} ||| {side(words, 'e')}\n" for words in gold), encoding="utf-8"
    )
    links = [" ".join(f"{k}-{k}" for k in range(1, len(words) + 1)) for words in gold]
    links[0] += " 9-9"  # past the end of a sentence of at most 7 words: dropped
    (kftt / "gold" / "ja-en.gold").write_text("".join(line + "\n" for line in links), encoding="utf-8")
    return root


def test_kftt_eflomal_aligns_and_scores_a_small_synthetic_corpus(tmp_path, capsys):
    """bench/kftt_eflomal.py: eflomal aligns a corpus laid out like KFTT and analysis.aer scores it."""
    pytest.importorskip("eflomal")
    from bench.kftt_eflomal import main

    corpora = synthetic_kftt(tmp_path / "corpora", train_pairs=300, gold_pairs=20)
    results = main(["--corpora", str(corpora), "--samplers", "1", "--json", str(tmp_path / "out.json")])

    assert results["train_pairs"] == 300 and results["gold_pairs"] == 20
    assert results["dropped_gold_links"] == 1
    assert list(results["scores"]) == KFTT_ROWS
    scores = results["scores"]
    # A word-for-word language is easy: each row finds (nearly) every gold link, and nothing else.
    for name in KFTT_ROWS:
        assert scores[name]["aer"] < 0.1, (name, scores[name])
    # the intersection keeps only what both directions agree on: never less precise than either direction
    directions = scores["forward"], scores["reverse"]
    assert scores["intersection"]["precision"] >= max(score["precision"] for score in directions)
    assert scores["union"]["recall"] >= max(score["recall"] for score in directions)
    assert json.loads((tmp_path / "out.json").read_text())["scores"] == scores
    printed = capsys.readouterr().out
    assert "dropped 1 past the end of their sentence (lines 1)" in printed
    for name in KFTT_ROWS:
        score = scores[name]
        row = f"{name:<22}{score['precision']:>10.1%}{score['recall']:>10.1%}{100 * score['aer']:>8.1f}"
        assert row in printed.splitlines()
    assert results["pairs"] == "all gold pairs" and results["scored_pairs"] == 20
    reported = main(["--corpora", str(corpora), "--samplers", "1", "--report-from", "11"])
    assert reported["pairs"] == "gold pairs 11–20" and reported["scored_pairs"] == 10
    printed = capsys.readouterr().out
    assert "AER on gold pairs 11–20" in printed and "English words whole, OMP_NUM_THREADS" in printed


def test_kftt_eflomal_grid_is_chosen_on_the_first_gold_pairs_and_reported_on_the_rest(
    tmp_path, capsys, monkeypatch
):
    import bench.kftt_eflomal
    from bench.kftt_eflomal import main

    corpora = synthetic_kftt(tmp_path / "corpora", train_pairs=30, gold_pairs=20)
    seen = []

    def align(sources, targets, *, samplers, length):
        """Made-up links: the diagonal on the gold's first ten pairs only when the English is cut to 2
        characters, on the others only with whole words at length 3: the choice and the report disagree."""
        stem = 2 if all(len(word) <= 2 for line in targets for word in line.split()) else 0
        seen.append((stem, length))
        links = []
        for k, line in enumerate(targets):
            gold_k = k - 30
            right = (stem == 2) if gold_k < 10 else (stem == 0 and length == 3)
            links.append({(i, i) for i in range(len(line.split()))} if right else {(0, 0)})
        return links, links

    monkeypatch.setattr(bench.kftt_eflomal, "align", align)
    grid = ["--stem", "0", "2", "--length", "1", "3", "--report-from", "11"]
    results = main(["--corpora", str(corpora), *grid])

    assert seen == [(0, 1), (0, 3), (2, 1), (2, 3)]
    assert [(s["stem"], s["length"]) for s in results["grid"]] == seen
    chosen = {(s["stem"], s["length"]): s["chosen_aer"] for s in results["grid"]}
    assert chosen[(2, 1)] == chosen[(2, 3)] == 0 < chosen[(0, 3)]
    # the pick is the first setting with the best AER on pairs 1-10, whatever it scores on 11-20
    assert (results["stem"], results["length"]) == (2, 1)
    assert results["scores"]["grow-diag-final-and"]["aer"] > 0.5
    assert results["grid"][1]["aer"] == 0  # the best on the reported pairs was not the one chosen
    printed = capsys.readouterr().out
    assert "stem 2, length 1: grow-diag-final-and AER 0.0 on gold pairs 1–10" in printed
    assert "English cut to 2 characters; the setting chosen on gold pairs 1–10" in printed

    with pytest.raises(SystemExit):
        main(["--corpora", str(corpora), "--stem", "0", "4"])  # a grid needs pairs to choose on
    assert "needs --report-from N" in capsys.readouterr().err


def test_kftt_eflomal_without_the_corpus_says_so_and_returns(tmp_path, capsys):
    from bench.kftt_eflomal import main

    assert main(["--corpora", str(tmp_path)]) is None
    assert capsys.readouterr().out.startswith(f"skipped: the KFTT corpus is not in {tmp_path}")


KFTT = CORPORA / "kftt-ja-en"


@pytest.mark.slow
@pytest.mark.skipif(not KFTT.is_dir(), reason=f"KFTT not found in {KFTT} (set CORPORA_DIR)")
def test_kftt_eflomal_on_the_real_gold_set():
    """5,000 training pairs and one sampler, to stay within a minute; the full run is the bench's."""
    pytest.importorskip("eflomal")
    from bench.kftt_eflomal import main

    results = main(["--corpora", str(CORPORA), "--train-pairs", "5000", "--samplers", "1"])
    scores = results["scores"]
    assert results["gold_pairs"] == 582 and results["dropped_gold_links"] == 6
    assert scores["grow-diag-final-and"]["aer"] < min(scores["forward"]["aer"], scores["reverse"]["aer"])
    assert scores["intersection"]["precision"] > 0.7
    assert 0.3 < scores["grow-diag-final-and"]["aer"] < 0.7


# -- bench/cjk_pieces.py: the two pre-tokenizations side by side, chosen on validation --------------------


def test_cjk_pieces_dry_run_trains_both_pre_tokenizations_and_scores_each_on_validation(tmp_path, capsys):
    from bench.cjk_pieces import main

    assert main(["--direction", "en_zh", "--minutes", "75", "--dry-run", "--out", str(tmp_path / "o")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    for line, pre_tokenize in zip(lines[:2], ("cjk", "whitespace"), strict=True):
        assert "--config configs/tatoeba_en_zh.yaml" in line and f"--data.pre_tokenize {pre_tokenize}" in line
        assert "--trainer.max_time 00:01:15:00" in line
        assert f"--trainer.logger.init_args.name en_zh_{pre_tokenize}" in line
    for line, pre_tokenize in zip(lines[2:], ("cjk", "whitespace"), strict=True):
        assert f"en_zh_{pre_tokenize}/version_0/checkpoints/last.ckpt --split val" in line
        assert "test" not in line.split("last.ckpt")[1]


def test_cjk_pieces_skips_without_the_corpus_and_refuses_bad_options(tmp_path, capsys):
    from bench.cjk_pieces import main

    assert main(["--direction", "zh_en", "--corpora", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.startswith("skipped: no cmn.txt in")
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        main(["--direction", "zh_en", "--minutes", "0"])
    assert "--minutes must be from 1 to 1439, got 0" in capsys.readouterr().err


# -- bench/kftt_alignment.py: the lab on KFTT's gold beside eflomal and the published table ------------------


def test_kftt_alignment_dry_run_trains_four_runs_two_at_a_time_then_scores_each_and_eflomal(tmp_path, capsys):
    from bench.kftt_alignment import main

    out = tmp_path / "o"
    corpora = str(tmp_path / "c")
    assert main(["--dry-run", "--out", str(out), "--corpora", corpora, "--max-time", "00:00:05:00"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 + 4 + 1
    names = ("sup_ja_en", "unsup_ja_en", "sup_en_ja", "unsup_en_ja")
    supervision = "--data.alignment_labels eflomal --model.alignment_layer 2 --model.alignment_head 1"
    for line, name in zip(lines[:4], names, strict=True):
        source, target = name.split("_")[1:]
        assert "train.py --config configs/kftt_ja_en.yaml" in line and "--data.gold.alignments" in line
        assert f"--data.source_lang {source} --data.target_lang {target}" in line
        assert (f"{supervision} --model.alignment_weight 0.5" in line) == name.startswith("sup"), line
        assert "--trainer.max_time 00:00:05:00" in line and f"--trainer.logger.init_args.name {name}" in line
    methods = "attention shift_att value_norms rollout grad_x_input integrated_gradients"
    for name, evaluate in zip(names, lines[4:8], strict=True):
        checkpoint = f"{out}/runs/{name}/version_0/checkpoints/last.ckpt"
        assert f"evaluate.py explain {checkpoint} --gold-alignments" in evaluate
        assert f"--methods {methods}" in evaluate
        assert f"--analysis-out {out}/figures/{name} --links-out {out}/links/{name}" in evaluate
    assert lines[-1].endswith(f"bench/kftt_eflomal.py --corpora {tmp_path / 'c'} --report-from 101 "
                              "--stem 0 4 5 6 --length 1 4")
    (out / "runs" / "sup_ja_en" / "version_0" / "checkpoints").mkdir(parents=True)
    (out / "runs" / "sup_ja_en" / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert main(["--dry-run", "--out", str(out), "--corpora", corpora, "--no-eflomal"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"reusing {out}/runs/sup_ja_en/version_0/checkpoints/last.ckpt"
    assert [name for name in names if any(f"name {name} " in line for line in lines[1:4])] == list(names[1:])
    assert main(["--dry-run", "--checkpoint", "x.ckpt", "--no-eflomal", "--methods", "attention"]) == 0
    (evaluate,) = capsys.readouterr().out.splitlines()
    assert "evaluate.py explain x.ckpt" in evaluate and "--methods attention --ig-steps" in evaluate


def test_kftt_alignment_shift_supervises_only_the_supervised_runs_at_the_step_that_reads_each_word(
    tmp_path, capsys
):
    from bench.kftt_alignment import main

    out, corpora = tmp_path / "o", str(tmp_path / "c")
    argv = ["--dry-run", "--shift", "--out", str(out), "--corpora", corpora, "--no-eflomal",
            "--runs", "sup_ja_en", "unsup_ja_en"]
    assert main(argv) == 0
    supervised, unsupervised = capsys.readouterr().out.splitlines()[:2]
    assert "--model.alignment_weight 0.5 --model.alignment_shift true" in supervised
    assert "--model.alignment_" not in unsupervised and "--data.alignment_labels" not in unsupervised
    assert main([*argv, "--full-context"]) == 0
    supervised, unsupervised = capsys.readouterr().out.splitlines()[:2]
    assert "--model.alignment_shift true --model.alignment_full_context true" in supervised
    assert "--model.alignment_" not in unsupervised


def test_kftt_alignment_symmetrises_two_directions_forward_arg_max_on_the_reporting_pairs(tmp_path):
    """The supervised runs' ``attention.argmax.links`` of each direction (1-based, in the gold's ja-en
    orientation) joined by grow-diag-final-and, scored on the pairs from the reporting one on: the first pair
    is left out of the score, the others score as their joined links against the gold."""
    from analysis.aer import score_links
    from analysis.symmetrise import grow_diag_final_and
    from bench.kftt_alignment import symmetrised

    files = {"sentences": tmp_path / "gold.src-tgt", "links": tmp_path / "gold.links"}
    files["sentences"].write_text("a b c ||| x y z\nd e ||| u v\nf g ||| s t\n", encoding="utf-8")
    files["links"].write_text("1-1\n1-1 2-2\n1-2 2-1\n", encoding="utf-8")
    forward = ["3-3", "1-1 2-1", "1-2 2-1"]
    reverse = ["1-1", "1-1 2-2", "2-1"]
    for name, lines in (("sup_ja_en", forward), ("sup_en_ja", reverse)):
        (tmp_path / "links" / name).mkdir(parents=True)
        (tmp_path / "links" / name / "attention.argmax.links").write_text("\n".join(lines) + "\n")
    scores = symmetrised(tmp_path, files, ["attention"], True, 2)
    joined = [grow_diag_final_and({(0, 0), (1, 0)}, {(0, 0), (1, 1)}),  # 0-based, ja-en, pairs 2 and 3
              grow_diag_final_and({(0, 1), (1, 0)}, {(1, 0)})]
    expected = score_links(joined, [{(0, 0), (1, 1)}, {(0, 1), (1, 0)}], [set(), set()])
    assert scores["attention"] == vars(expected)
    assert scores != symmetrised(tmp_path, files, ["attention"], True, 1)  # pair 1 joins (3-3 is wrong)


def test_kftt_alignment_table_rows_come_from_the_scores_and_skip_without_the_corpus(tmp_path, capsys):
    from bench.kftt_alignment import PUBLISHED, main, table

    best = {"argmax": {"layer": "layer 2", "head": None, "precision": 0.5, "recall": 0.25, "aer": 0.6,
                       "chosen_aer": 0.55},
            "threshold": {"layer": "layer 1", "head": 3, "precision": 0.4, "recall": 0.3, "aer": 0.65,
                          "chosen_aer": 0.5}}
    parts = {"choose": [1, 100], "report": [101, 582], "apart": True,
             "about": "chosen on gold pairs 1–100, reported on pairs 101–582 (482)"}
    diagonal = {"precision": 0.11, "recall": 0.1, "aer": 0.889}
    eflomal = {"pairs": "gold pairs 101–582",
               "scores": {"forward": {"precision": 0.536, "recall": 0.374, "aer": 0.559}}}
    symmetric = {"both directions, supervised heads": {"attention": {"precision": 0.7, "recall": 0.6,
                                                                     "aer": 0.35}}}
    run = {"best": {"attention": best}, "parts": parts, "diagonal": diagonal}
    rows = table({"ja→en, supervised head": run}, symmetric, eflomal)
    assert rows[0] == "Maps chosen on gold pairs 1–100, reported on pairs 101–582 (482)."
    assert rows[2] == ("| aligner | extraction | map chosen on pairs 1–100 | precision | recall | "
                       "AER (pairs 101–582) | AER where chosen |")
    assert rows[4] == ("| ja→en, supervised head: attention | forward arg-max | layer 2 | 50.0% | 25.0% "
                       "| 60.0 | 55.0 |")
    assert rows[5] == ("| ja→en, supervised head: attention | threshold, each target word's row "
                       "| layer 1 head 3 | 40.0% | 30.0% | 65.0 | 50.0 |")
    assert rows[6] == ("| both directions, supervised heads: attention | grow-diag-final-and of the two "
                       "directions' forward arg-max | | 70.0% | 60.0% | 35.0 | |")
    assert rows[7] == "| diagonal: target word j to source word ⌊(j + ½)·S/T⌋ | | | 11.0% | 10.0% | 88.9 | |"
    assert rows[8] == "| eflomal, 30k pairs (gold pairs 101–582) | forward | | 53.6% | 37.4% | 55.9 | |"
    assert len(rows) == 9 + len(PUBLISHED) and rows[-1].endswith("| 37.4–38.4 | |")
    gridded = {**eflomal, "grid": [{"stem": 0}, {"stem": 4}], "stem": 4, "length": 4.0}
    assert table({"ja→en, supervised head": run}, symmetric, gridded)[8] == (
        "| eflomal, 30k pairs (gold pairs 101–582; English cut to 4 characters, 4× its length, chosen on "
        "pairs 1–100) | forward | | 53.6% | 37.4% | 55.9 | |")
    assert main(["--corpora", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.startswith("skipped: the KFTT corpus is not in")


def test_corpus_growth_recombines_pairs_and_reports_the_growth(tmp_path):
    from bench.corpus_growth import make_corpus, report

    multi30k = tmp_path / "multi30k"
    multi30k.mkdir()
    for split, n in (("train", 5), ("val", 2), ("test2016", 3)):
        (multi30k / f"{split}.de").write_text("".join(f"ein hund {split} {i}\n" for i in range(n)))
        (multi30k / f"{split}.en").write_text("".join(f"a dog {split} {i}\n" for i in range(n)))
    make_corpus(multi30k, tmp_path / "c", 40)
    train = (tmp_path / "c" / "train.tsv").read_text().splitlines()
    assert len(train) == 40
    for line in train:  # two training pairs joined, the same two on both sides
        source, target = line.split("\t")
        left, right = source.split(" ein hund ")[0].split()[-1], source.split()[-1]
        assert target == f"a dog train {left} a dog train {right}"
    assert (tmp_path / "c" / "test.tsv").read_text().count("\n") == 3
    names = ("read", "tokenizer", "encode", "first batch")
    stages = {s: {"seconds": 1.0, "resident_mb": 100.0} for s in names}
    lines = report([{"pairs": 1_000_000, "stages": stages, "seconds": 4.0, "peak_mb": 2048.0},
                    {"pairs": 2_000_000, "stages": stages, "seconds": 8.0, "peak_mb": 3072.0}])
    assert lines[2].startswith("| 1,000,000 | 1.0 (100) |")
    assert "grows 1.00 GB per million training pairs" in lines[-1]
    assert "about 5.5 GB, extrapolated linearly" in lines[-1]  # 3 GB + 2.5M pairs at 1 GB a million


def test_kftt_alignment_reads_a_runs_last_validation_bleu_updates_and_median_speed(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from bench.kftt_alignment import bleu_rows, training_figures

    writer = SummaryWriter(str(tmp_path))
    for step, bleu, speed in ((401, 0.4, 1400.0), (803, 1.0, 500.0), (1327, 1.96, 1450.0)):
        writer.add_scalar("val/bleu", bleu, step)
        writer.add_scalar("val/chrf", 10 * bleu, step)
        writer.add_scalar("train/tokens_per_s", speed, step)
    writer.close()
    figures = training_figures(tmp_path)
    assert figures == pytest.approx({"bleu": 1.96, "chrf": 19.6, "steps": 1328, "tokens_per_s": 1400.0})
    assert bleu_rows({"ja→en": figures})[2] == "| ja→en | 1,328 | 1,400 | 1.96 | 19.60 |"
