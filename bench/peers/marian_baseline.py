"""Marian's Transformer recipe on Multi30k de→en, sized like this project's recipe, trained on the CPU for a
fixed wall-clock budget, decoded with Marian's beam search and scored with this project's sacreBLEU.

    python bench/peers/marian_baseline.py --data ../shared/corpora/multi30k --minutes 60 --threads 1
    python bench/peers/marian_baseline.py --data ../shared/corpora/multi30k --minutes 3    # a smoke run

Marian (C++) comes as the ``pymarian`` wheel (1.12.31: Marian built with CPU support for AVX2 and AVX-512 and
linked with MKL; it needs no torch). Its ``pymarian`` command is Marian's trainer, ``--cpu-threads N``
trains on the CPU. It gets a virtual environment of its own (``--venv``, default ``bench/.marian-venv``).

The config is marian-examples' ``transformer/run-me.sh`` (its Transformer for WMT17 en→de) with the changes
of ``RECIPE_CHANGES`` and no others; ``docs/peers.md`` says why. It is written as a Marian YAML config
(``marian -c``), which Marian reads with the same option names as its command line.

Training stops when the budget is spent: Marian has no time limit (``--after`` counts epochs, updates or
labels), so the watchdog of ``bench/peers/common.py`` sends SIGTERM, on which Marian saves its model and exits
(``--sigterm save-and-exit``, its default). Decoding: ``bench/peers/marian_venv.py translate`` (``pymarian``'s
``Translator``, beam 5) of the saved model on val (where a tuning chooses: ``val_bleu``) and test2016;
Marian's SentencePiece detokenizes, and ``analysis.metrics`` scores as ``evaluate.py`` does. The last line
printed is one JSON object (``RESULT_PREFIX``), also in ``<out>/result.json``.
"""

import argparse
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers import common
from bench.peers.common import REPO

VENV = REPO / "bench" / ".marian-venv"
PYMARIAN = "pymarian==1.12.31"  # its --build-info: COMPILE_AVX2=ON, COMPILE_AVX512=ON, USE_MKL=ON
RECIPE = "marian-examples transformer/run-me.sh (Marian 1.12, pymarian 1.12.31)"
RECIPE_CHANGES = (
    "data: Multi30k train (de→en), raw text; no validation set (recipe: validation every 5000, early stop)",
    (
        "joint SentencePiece BPE of {vocab_size} learnt by Marian on Multi30k train (recipe: Moses "
        "tokenization, truecasing and subword-nmt BPE, vocabulary 36000)"
    ),
    "model: {layers}+{layers} layers, width 256, 4 heads, feed-forward 512 (recipe: 6+6, 512, 8, 2048)",
    "dropout 0.15 (recipe: 0.1)",
    "batches of {batch_tokens} target tokens (recipe: as many as fit 10 GB of GPU memory, --mini-batch-fit)",
    (
        "learning rate: peak {lr:g} after {warmup} warm-up updates, then 1/sqrt(step) (recipe: a peak of "
        "3e-4 after 16000 warm-up updates, then the same decay)"
    ),
    "gradient norm clipped at 1.0 (recipe: 5)",
    "CPU, {threads} thread(s) (--cpu-threads; recipe: GPUs)",
    "training stops after {minutes:g} min (the watchdog's SIGTERM: Marian saves the model and exits)",
)
RESULT_PREFIX = "marian result: "
TRAINING_STARTED = "Training started"  # Marian's log line when its first epoch starts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_run_args(p, "Marian", VENV, Path("runs/marian"))
    p.add_argument("--vocab-size", type=int, default=8000, help="joint SentencePiece BPE vocabulary")
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--batch-tokens", type=int, default=1024, help="training batch in target tokens")
    p.add_argument("--warmup", type=int, default=300, help="warm-up updates")
    # 1e-3 as this project's and eole's peak: the recipe's 3e-4 goes with 16000 warm-up updates at a GPU's
    # pace, and 1/sqrt(step) from update 300 would leave it at 6e-5 after the hour's few thousand updates.
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (the recipe's is 3e-4)")
    p.add_argument(
        "--decay-until", type=int, metavar="UPDATES",
        help="the update the budget is expected to end at (a pace run's count): Marian's step decay then "
        "takes the rate down to 1%% of its peak there (default: none, 1/sqrt(step) only, as the recipe)",
    )  # fmt: skip
    args = p.parse_args(argv)
    positive = ("minutes", "threads", "vocab_size", "layers", "batch_tokens", "warmup", "lr")
    common.check_positive(p, args, *positive)
    if args.decay_until is not None and args.decay_until <= 2 * args.warmup:
        p.error(f"--decay-until must be more than twice --warmup ({args.warmup}), got {args.decay_until}")
    return args


# -- the config ----------------------------------------------------------------------------------------------


def write_config(args: argparse.Namespace, out: Path) -> Path:
    """Write ``<out>/config.yml`` for the run described by ``args``; returns its path."""
    path = out / "config.yml"
    path.write_text(yaml.safe_dump(marian_config(args, out), sort_keys=False), encoding="utf-8")
    (out / "model").mkdir(exist_ok=True)
    return path


def marian_config(args: argparse.Namespace, out: Path) -> dict:
    """The options of marian-examples' ``transformer/run-me.sh`` with the changes of ``RECIPE_CHANGES``.

    Paths are absolute: the model ``<out>/model/model.npz``, the SentencePiece vocabulary ``<out>/vocab.spm``
    (Marian learns it when training starts, if missing), the training log ``<out>/model/train.log``.
    """
    data, out = Path(args.data).resolve(), Path(out).resolve()
    vocab = str(out / "vocab.spm")
    return {
        "model": str(out / "model" / "model.npz"), "type": "transformer",
        "train-sets": [str(data / "train.de"), str(data / "train.en")],
        "max-length": 100,
        "vocabs": [vocab, vocab], "dim-vocabs": [args.vocab_size, args.vocab_size],
        "sentencepiece-options": "--model_type=bpe --character_coverage=1.0",
        "mini-batch-words": args.batch_tokens, "maxi-batch": 1000,
        "cost-type": "ce-mean-words",
        "save-freq": "5000u", "disp-freq": "20u",
        "log": str(out / "model" / "train.log"),
        "enc-depth": args.layers, "dec-depth": args.layers, "dim-emb": 256,
        "transformer-heads": 4, "transformer-dim-ffn": 512,
        "transformer-postprocess-emb": "d", "transformer-postprocess": "dan",
        "transformer-dropout": 0.15, "label-smoothing": 0.1,
        "learn-rate": args.lr, "lr-warmup": args.warmup, "lr-decay-inv-sqrt": [args.warmup],
        **({} if args.decay_until is None else step_decay(args.warmup, args.decay_until)),
        "lr-report": True,
        "optimizer-params": [0.9, 0.98, 1e-09], "clip-norm": 1.0,
        "tied-embeddings-all": True,
        "cpu-threads": args.threads, "seed": 1111,
        "exponential-smoothing": 1e-4,  # the recipe's flag, Marian's value for it
        "sigterm": "save-and-exit",
    }  # fmt: skip


def step_decay(warmup: int, until: int, steps: int = 20, end: float = 0.01) -> dict:
    """Marian's step decay (``--lr-decay-strategy batches``) sized so that the rate at update ``until`` is
    ``end`` × the peak: ``steps`` equal factors, every ``--lr-decay-freq`` updates from a third of the way on.

    Marian multiplies its 1/sqrt(step) schedule (``--lr-decay-inv-sqrt warmup``, already
    ``sqrt(warmup / until)`` of the peak at ``until``) by the product of the factors so far, so the factor
    makes up the rest. It is the nearest Marian comes to this project's cosine that reaches zero when the
    time runs out: Marian knows updates, not time, so ``until`` comes from a pace run.
    """
    start = until // 3
    freq = max(1, (until - start) // steps)
    decays = (until - start) // freq + 1  # at start, start + freq, ... up to until
    factor = (end / (warmup / until) ** 0.5) ** (1 / decays)
    # one start only: Marian refuses a second value for a single strategy ("Single decay strategies require
    # only one value specified with --lr-decay-start")
    return {"lr-decay-strategy": "batches", "lr-decay": round(factor, 6), "lr-decay-start": [start],
            "lr-decay-freq": freq}  # fmt: skip


def decay_change(args: argparse.Namespace) -> str:
    d = step_decay(args.warmup, args.decay_until)
    return (
        f"step decay: × {d['lr-decay']:g} every {d['lr-decay-freq']} updates from update "
        f"{d['lr-decay-start'][0]}, 1% of the peak at update {args.decay_until}, the hour's expected last "
        "(recipe: none)"
    )


def recipe_changes(args: argparse.Namespace) -> list[str]:
    """``RECIPE_CHANGES`` filled in with this run's settings."""
    changes = [c.format(**vars(args)) for c in RECIPE_CHANGES]
    return changes if args.decay_until is None else [*changes, decay_change(args)]


def training_progress(log_text: str) -> dict:
    """Updates, epochs and the last reported cost of Marian's training log, and the target tokens per second
    of its training (each display's ``Time Ns : R words/s``: Marian's words are target labels, here
    SentencePiece pieces), where the log gives them."""
    reports = re.findall(r"Ep\. (\d+) : Up\. (\d+) : .*?Cost ([\d.]+)", log_text)
    if not reports:
        return {"epochs": 0, "updates": 0}
    epoch, update, cost = reports[-1]
    progress = {"epochs": int(epoch), "updates": int(update), "last_train_cost": float(cost)}
    rates = [(float(t), float(r)) for t, r in re.findall(r"Time ([\d.]+)s : ([\d.]+) words/s", log_text)]
    seconds = sum(t for t, _ in rates)
    if seconds > 0:
        progress["target_tokens_per_s"] = round(sum(t * r for t, r in rates) / seconds, 1)
    return progress


# -- the run -------------------------------------------------------------------------------------------------


def ensure_venv(venv: Path) -> Path:
    """Marian's virtual environment, created and filled if missing (``common.ensure_venv``); its Python."""
    return common.ensure_venv(venv, [PYMARIAN], "import pymarian; pymarian.Trainer", "Marian")


def translate(python: Path, out: Path, sources: Path, hyps: Path, env: dict, threads: int) -> float:
    """Marian's beam search of ``sources`` (``bench/peers/marian_venv.py translate``); seconds."""
    log = hyps.with_name(hyps.name + ".log")
    model, vocab = out / "model" / "model.npz", out / "vocab.spm"
    helper = REPO / "bench" / "peers" / "marian_venv.py"
    command = [str(python), str(helper), "translate", str(model), str(vocab),
               str(sources), str(hyps), "--threads", str(threads)]  # fmt: skip
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Marian decoding failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    started = common.start_run(args, "Marian", ensure_venv, write_config, recipe_changes(args))
    if started is None:
        return None
    out, python, env, config = started
    marian = python.with_name("pymarian")  # the trainer's command line
    times = common.train_with_budget([str(marian), "-c", str(config)], env, out / "train.out",
                                    args.minutes * 60, started=TRAINING_STARTED, name="Marian",
                                    stop_signal=signal.SIGTERM)  # fmt: skip
    progress = training_progress((out / "model" / "train.log").read_text(encoding="utf-8"))

    def decode(source: Path, hyps: Path) -> float:
        return translate(python, out, source, hyps, env, args.threads)

    hyps, decode_seconds = common.decode_val_then_test(args.data, out, decode, progress)
    run = {"model": "Marian Transformer, " + RECIPE, "recipe_changes": recipe_changes(args),
           "checkpoint": "model.npz, saved on SIGTERM (exponentially smoothed weights)"}  # fmt: skip
    return common.report(args, out, RESULT_PREFIX, run, hyps, times, decode_seconds, progress)


if __name__ == "__main__":
    main()
