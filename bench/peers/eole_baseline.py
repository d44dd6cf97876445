"""eole's Transformer recipe on Multi30k de→en, sized like this project's recipe, trained for a fixed
wall-clock budget, decoded with eole's beam search and scored with this project's sacreBLEU.

    python bench/peers/eole_baseline.py --data ../shared/corpora/multi30k --minutes 60 --threads 1
    python bench/peers/eole_baseline.py --data ../shared/corpora/multi30k --minutes 3    # a smoke run

eole (``eole`` 0.6.4, the successor of OpenNMT-py) pins ``protobuf==7.36.2`` and ``numpy>=2``, so it lives
in a virtual environment of its own (``--venv``, default ``bench/.eole-venv``), made on first use with
``--system-site-packages`` so that the system's torch is reused (``bench/peers/common.py``).

The config is eole's ``recipes/wmt17/wmt17_ende_spm.yaml`` (in its repository: a Transformer on raw text
with an on-the-fly SentencePiece transform) with the changes of ``RECIPE_CHANGES`` and no others;
``docs/peers.md`` says why: the recipe's big Transformer for a GPU becomes this project's
``configs/multi30k.yaml`` in eole's terms (3+3 layers, width 256, 4 heads, feed-forward 512, dropout 0.15,
1024-token batches, warm-up then a decay that ends with the hour, gradient norm clipped at 1, label smoothing
0.1, one SentencePiece BPE of 8000 learnt on the training set), on the CPU in fp32, without validation.

Training: ``bench/peers/eole_venv.py train`` (eole's own ``train``, stopped by the time budget and with the
learning rate decayed over it; each report's rate goes into the result). Decoding: ``eole predict`` with the
recipe README's settings (beam 5, batches of 4096 tokens) and this project's length penalty (GNMT's, alpha
1.0; ``--length-penalty avg`` for eole's default) of the weights at the end of the budget, on val (where a
tuning chooses: ``val_bleu``) and test2016 (the row); eole's SentencePiece transform detokenizes its output,
which ``analysis.metrics`` scores as ``evaluate.py`` does. The last line printed is one JSON object
(``RESULT_PREFIX``), also in ``<out>/result.json``.
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers import common
from bench.peers.common import REPO

VENV = REPO / "bench" / ".eole-venv"
EOLE = "eole==0.6.4"
RECIPE = "eole recipes/wmt17/wmt17_ende_spm.yaml, run with eole 0.6.4"
RECIPE_CHANGES = (
    "data: Multi30k train (de→en), raw text; no validation set (recipe: newstest, validated every 5000)",
    (
        "joint SentencePiece BPE of {vocab_size} learnt on Multi30k train (recipe: unigram 32000 on WMT17; "
        "vocabulary 36000, words seen once kept: min frequency 1, recipe: 2)"
    ),
    "model: {layers}+{layers} layers, width 256, 4 heads, feed-forward 512 (recipe: 6+6, 1024, 16, 4096)",
    "dropout 0.15, attention dropout 0.0 (recipe: 0.1, 0.1)",
    "batches of {batch_tokens} tokens, no accumulation (recipe: 5000 tokens x 10)",
    (
        "learning rate: peak 1e-3 after {warmup} warm-up updates, then cosine to 0 at the end of the "
        "time budget (recipe: noam, learning_rate 2 at width 1024, 4000 warm-up updates: peak 9.9e-4, "
        "then 1/sqrt(step))"
    ),
    "gradient norm clipped at 1.0 (recipe: no clipping)",
    "CPU fp32, {threads} torch thread(s), no data-loading workers (recipe: GPU bf16, 4 workers)",
    (
        "training stops after {minutes:g} min (no more batches are drawn, eole saves the weights); "
        "train_steps 50000 stays as an upper bound"
    ),
)
RESULT_PREFIX = "eole result: "
LENGTH_PENALTIES = ("wu", "avg", "none")  # eole predict's --length_penalty
BIASES = {"add_qkvbias": True, "add_ffnbias": True, "add_final_linear_bias": True}  # as model.Transformer
DEFAULTS = {"lr": 1e-3, "adam_beta2": 0.998, "dropout": 0.15, "biases": False}  # the run of 2026-11-27


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_run_args(p, "eole", VENV, Path("runs/eole"))
    p.add_argument("--vocab-size", type=int, default=8000, help="joint SentencePiece BPE vocabulary")
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--batch-tokens", type=int, default=1024, help="training batch in tokens")
    p.add_argument("--warmup", type=int, default=300, help="warm-up updates")
    tuning = p.add_argument_group("tuning knobs (docs/peers.md: eole's diagnosis)")
    tuning.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3, as ours)")
    tuning.add_argument("--adam-beta2", type=float, default=0.998, help="AdamW's beta2 (the recipe's 0.998)")
    tuning.add_argument("--dropout", type=float, default=0.15, help="dropout (default 0.15, as ours)")
    tuning.add_argument("--biases", action="store_true",
                        help="biases in attention and feed-forward layers, as this project's model has "
                             "(eole's default has none)")  # fmt: skip
    tuning.add_argument("--length-penalty", choices=LENGTH_PENALTIES, default="wu",
                        help="beam search's: wu, GNMT's ((5 + |Y|) / 6) ** alpha, as this project's "
                             "(default); avg, eole's default; none")  # fmt: skip
    tuning.add_argument("--alpha", type=float, default=1.0, help="wu's exponent (default 1.0, as ours)")
    args = p.parse_args(argv)
    positive = ("minutes", "threads", "vocab_size", "layers", "batch_tokens", "warmup", "lr")
    common.check_positive(p, args, *positive)
    if not 0 < args.adam_beta2 < 1:
        p.error(f"--adam-beta2 must be between 0 and 1, got {args.adam_beta2}")
    if not 0 <= args.dropout < 1:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    return args


# -- the config ----------------------------------------------------------------------------------------------


def write_config(args: argparse.Namespace, out: Path) -> Path:
    """Write ``<out>/config.yaml`` for the run described by ``args``; returns its path."""
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(eole_config(args, out), sort_keys=False), encoding="utf-8")
    return path


def eole_config(args: argparse.Namespace, out: Path) -> dict:
    """The recipe of ``recipes/wmt17/wmt17_ende_spm.yaml`` with the changes of ``RECIPE_CHANGES``.

    Paths are absolute. The SentencePiece model is ``<out>/spm.model``, the shared vocabulary
    ``<out>/vocab.shared``, the transformed-data samples ``<out>/data``, the model ``<out>/model``.
    """
    data, out = Path(args.data).resolve(), Path(out).resolve()
    vocab, spm = str(out / "vocab.shared"), str(out / "spm.model")
    return {
        "save_data": str(out / "data"),
        "overwrite": True,
        "seed": 1234,
        "report_every": 100,
        "src_vocab": vocab, "tgt_vocab": vocab,
        "src_vocab_size": args.vocab_size, "tgt_vocab_size": args.vocab_size,  # also SentencePiece's size
        "vocab_size_multiple": 8,
        "src_words_min_frequency": 1, "tgt_words_min_frequency": 1,
        "share_vocab": True,
        "n_sample": 0,
        "data": {"corpus_1": {"path_src": str(data / "train.de"), "path_tgt": str(data / "train.en")}},
        "transforms": ["sentencepiece", "filtertoolong"],
        "transforms_configs": {
            "sentencepiece": {"src_subword_model": spm, "tgt_subword_model": spm},
            "filtertoolong": {"src_seq_length": 512, "tgt_seq_length": 512},
        },
        "training": {
            "model_path": str(out / "model"),
            "keep_checkpoint": 50, "save_checkpoint_steps": 5000, "average_decay": 0, "train_steps": 50000,
            "world_size": 1, "gpu_ranks": [],
            "batch_type": "tokens", "batch_size": args.batch_tokens, "batch_size_multiple": 8,
            "accum_count": [1], "accum_steps": [0],
            "compute_dtype": "fp32", "optim": "adamw", "use_amp": False,
            "learning_rate": args.lr, "warmup_steps": args.warmup, "decay_method": "cosine",
            "adam_beta2": args.adam_beta2,
            "bucket_size": 262144, "num_workers": 0,
            "dropout_steps": [0], "dropout": [args.dropout], "attention_dropout": [0.0],
            "max_grad_norm": 1.0, "label_smoothing": 0.1,
            "param_init_method": "xavier_uniform", "normalization": "tokens",
        },
        "model": {
            "architecture": "transformer",
            "hidden_size": 256, "share_decoder_embeddings": True, "share_embeddings": True,
            "layers": args.layers, "heads": 4, "transformer_ff": 512,
            **(BIASES if args.biases else {}),
            "embeddings": {"word_vec_size": 256, "position_encoding_type": "SinusoidalInterleaved"},
        },
    }  # fmt: skip


def recipe_changes(args: argparse.Namespace) -> list[str]:
    """``RECIPE_CHANGES`` filled in with this run's settings, then the tuning knobs set away from the first
    hour's values and the decoding's length penalty."""
    changes = [c.format(**vars(args)) for c in RECIPE_CHANGES]
    changes += [f"tuned: {name.replace('_', ' ')} {getattr(args, name)} (first hour: {value})"
                for name, value in DEFAULTS.items() if getattr(args, name) != value]  # fmt: skip
    penalty = f"wu (GNMT), alpha {args.alpha:g}" if args.length_penalty == "wu" else args.length_penalty
    return [*changes, f"decoding: length penalty {penalty} (eole's default: avg)"]


def decode_options(args: argparse.Namespace) -> list[str]:
    """``eole predict``'s length penalty options of the run."""
    return ["--length_penalty", args.length_penalty, "--alpha", str(args.alpha)]


def training_progress(log_text: str) -> dict:
    """Updates made, the last reported training accuracy, the learning rate at each report (``[update,
    rate]``: the schedule as it took effect) and the target tokens a second over the reports (each report's
    target ``tok/s`` weighted by the seconds since the one before) of eole's training output."""
    steps = [int(m) for m in re.findall(r"Step\s+(\d+)\s*/", log_text)]
    saved = re.findall(r"Saving optimizer and weights to step_(\d+)", log_text)
    progress = {"updates": max([*steps, *(int(s) for s in saved)], default=0)}
    accuracy = re.findall(r"Step\s+\d+\s*/.*?acc:\s*([\d.]+)", log_text)
    if accuracy:
        progress["last_train_accuracy"] = float(accuracy[-1])
    rates = re.findall(r"Step\s+(\d+)\s*/.*?lr:\s*([\d.]+(?:e[-+]?\d+)?)", log_text)
    if rates:
        progress["learning_rates"] = [[int(step), float(rate)] for step, rate in rates]
    speeds = re.findall(r"Step\s+\d+\s*/.*?\d+/\s*(\d+) tok/s;\s*(\d+) sec", log_text)
    if speeds:
        seconds = [int(s) for _, s in speeds]
        spans = [b - a for a, b in zip([0, *seconds[:-1]], seconds, strict=True)]
        tokens = sum(int(rate) * span for (rate, _), span in zip(speeds, spans, strict=True))
        progress["target_tokens_per_second"] = round(tokens / seconds[-1]) if seconds[-1] else None
    return progress


# -- the run -------------------------------------------------------------------------------------------------


def ensure_venv(venv: Path) -> Path:
    """eole's virtual environment, created and filled if missing (``common.ensure_venv``); its Python."""
    return common.ensure_venv(venv, [EOLE], "import eole.trainer, eole.bin.main", "eole")


def eole_cli(python: Path) -> list[str]:
    return [str(python), "-m", "eole.bin.main"]


def translate(python: Path, model: Path, sources: Path, hyps: Path, env: dict, options: list[str]) -> float:
    """``eole predict`` of ``sources`` with the recipe README's settings and ``options``; seconds. Log in
    ``<hyps>.log``."""
    log = hyps.with_name(hyps.name + ".log")
    command = [*eole_cli(python), "predict", "--model_path", str(model), "--src", str(sources),
               "--output", str(hyps), "--beam_size", "5", "--batch_size", "4096", "--batch_type", "tokens",
               *options]
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"eole decoding failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    started = common.start_run(args, "eole", ensure_venv, write_config, recipe_changes(args))
    if started is None:
        return None
    out, python, env, config = started
    helper = [str(python), str(REPO / "bench" / "peers" / "eole_venv.py")]
    spm = subprocess.run([*helper, "spm", str(config)], env=env, check=True, capture_output=True, text=True)
    print(f"joint SentencePiece: {spm.stdout.strip()}", flush=True)
    subprocess.run([*eole_cli(python), "build_vocab", "--config", str(config), "--n_sample", "-1"], env=env,
                   check=True, capture_output=True)  # fmt: skip
    entries = len((out / "vocab.shared").read_text(encoding="utf-8").splitlines())
    print(f"eole vocabulary: {entries} pieces counted in {out / 'vocab.shared'}", flush=True)

    from bench.peers.eole_venv import TRAINING_STARTED

    log = out / "train.out"
    command = [*helper, "train", str(config), "--minutes", str(args.minutes)]
    times = common.train_with_budget(command, env, log,
                                     args.minutes * 60, started=TRAINING_STARTED, name="eole")  # fmt: skip
    progress = training_progress(log.read_text(encoding="utf-8"))

    options = decode_options(args)

    def decode(source: Path, hyps: Path) -> float:
        return translate(python, out / "model", source, hyps, env, options)

    hyps, decode_seconds = common.decode_val_then_test(args.data, out, decode, progress)
    run = {"model": "eole Transformer, " + RECIPE, "recipe_changes": recipe_changes(args),
           "checkpoint": "the weights at the end of the budget"}  # fmt: skip
    return common.report(args, out, RESULT_PREFIX, run, hyps, times, decode_seconds, progress)


if __name__ == "__main__":
    main()
