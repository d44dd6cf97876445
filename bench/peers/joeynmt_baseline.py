"""JoeyNMT's Transformer on Multi30k de→en, trained for a fixed wall-clock budget, decoded with its own beam
search and scored with this project's sacreBLEU.

    python bench/peers/joeynmt_baseline.py --data ../shared/corpora/multi30k --minutes 60 --threads 1
    python bench/peers/joeynmt_baseline.py --recipe cpu-hour --minutes 60 --split val     # one tuning run
    python bench/peers/joeynmt_baseline.py --data ../shared/corpora/multi30k --minutes 3    # a smoke run
    python bench/peers/joeynmt_baseline.py --decode-only --out RUN --split test2016   # a finished run, again

JoeyNMT (``joeynmt`` 2.3.0) pins ``protobuf<3.21``, so it lives in a virtual environment of its own
(``--venv``, default ``bench/.joeynmt-venv``), created on first use with ``--system-site-packages``: the
system's torch is reused, and pip installs JoeyNMT with its own pins into the venv, where they shadow the
system's versions without touching them.

Two recipes (``--recipe``; ``RECIPES`` holds their settings, ``docs/peers.md`` says why):

- ``documented`` (the default): JoeyNMT 2.3.0's ``configs/iwslt14_deen_bpe.yaml`` (named
  ``transformer_iwslt14_deen_bpe``; its Transformer de→en recipe, 33.73 BLEU on IWSLT14 in JoeyNMT's
  benchmarks), a GPU recipe, untuned for a CPU hour: 6+6 layers, d_ff 1024, dropout 0.3, a constant 3e-4;
- ``cpu-hour``: the same Transformer built for one CPU hour as this project's recipe was: 3+3 layers, d_ff
  512, dropout 0.1, JoeyNMT's ``warmupexponentialdecay`` schedule (300 warm-up updates to a peak of 1e-3,
  then an exponential decay sized so that the rate is 1% of the peak when the budget ends), gradient norm
  clipped at 1.0, 2048-token batches, no validation inside the budget.

The tuning knobs (``--layers``, ``--d-ff``, ``--dropout``, ``--lr``, ``--warmup``, ``--schedule``,
``--decay-to``, ``--updates-per-minute``, ``--clip-grad-norm``, ``--batch-tokens``, ``--validation-freq``,
``--length-blocks``)
override the recipe's values. Either way these changes to JoeyNMT's shipped config are made
(``RECIPE_CHANGES`` and ``setting_changes`` list them, and the result line records them):

- data: Multi30k ``train``/``val``/``test2016``; raw text, so JoeyNMT's Moses pre-tokenizer (``pretokenizer:
  moses``) does what the recipe's data script did with Moses' ``tokenizer.perl``, and detokenizes the output;
- case kept (``lowercase: False``, recipe: True): this project's sacreBLEU is cased;
- joint BPE learnt on Multi30k's training set with subword-nmt, ``--merges`` (8000) instead of the 32000 of
  IWSLT14's 160k pairs, so that the vocabulary is about this project's 8000; one vocabulary for both sides,
  as ``tied_embeddings`` needs;
- CPU, fp32 (``use_cuda: False``; JoeyNMT turns ``fp16`` off on a CPU), ``--threads`` torch threads;
- the budget: training stops after ``--minutes`` of training (validations included, data preparation not),
  by a watchdog that interrupts JoeyNMT as Ctrl-C does; JoeyNMT then saves the current weights as
  ``latest.ckpt``. ``epochs`` is only an upper bound.

Decoding: ``joeynmt translate`` with the recipe's testing section (beam 5, alpha 1.0, batches of 1024
tokens) of ``--split`` (test2016; ``val`` for tuning), or its first ``--sentences``, of ``latest.ckpt`` (the
weights at the end of the budget, as this project's recipe uses its ``last.ckpt``; ``--checkpoint best``
takes JoeyNMT's ``best.ckpt``, chosen by greedy validation BLEU). The detokenized output is scored by
``analysis.metrics.score_translations``, as ``evaluate.py`` scores. ``--cross-check`` then runs JoeyNMT's own
``test`` mode on the same checkpoint and split and sets its BLEU beside this project's scoring of the same
translations (``cross_check``). The last line printed is one JSON object (``RESULT_PREFIX``), also written to
``<out>/result.json``.
"""

import argparse
import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers import common
from bench.peers.common import REPO

VENV = REPO / "bench" / ".joeynmt-venv"
JOEYNMT = "joeynmt==2.3.0"
EXTRA_PACKAGES = ("importlib_metadata",)  # JoeyNMT 2.3.0 imports it without declaring it
RECIPE = "JoeyNMT 2.3.0 configs/iwslt14_deen_bpe.yaml (transformer_iwslt14_deen_bpe)"
RECIPE_CHANGES = (
    "data: Multi30k train/val/test2016, raw text, Moses pre-tokenization by JoeyNMT (pretokenizer: moses)",
    "lowercase: False (recipe: True), sacrebleu_cfg lowercase: False: this project scores cased BLEU",
    "joint subword-nmt BPE learnt on Multi30k train: num_merges {merges} (recipe: 32000 on IWSLT14)",
    "CPU fp32 (use_cuda: False), {threads} torch thread(s)",
    "training stops after {minutes:g} min (a watchdog's Ctrl-C, which JoeyNMT handles); epochs: a bound",
)
LANGS = ("de", "en")  # Multi30k de→en: the suffixes of its files
NO_VALIDATION = 10**9  # a validation_freq no budget reaches: no validation inside the hour


@dataclass(frozen=True)
class Recipe:
    """The settings a recipe fixes and the tuning knobs (the options of the same names) override."""

    layers: int  # encoder and decoder layers each
    d_ff: int  # the feed-forward layers' width
    dropout: float  # on residual branches, the feed-forward layer and attention weights (JoeyNMT's one knob)
    lr: float  # the constant rate (plateau) or the peak after warm-up
    warmup: int  # warm-up updates (0: none)
    schedule: str  # JoeyNMT's ``scheduling``
    decay_to: float  # warmupexponentialdecay only: the share of the peak left when the budget ends
    updates_per_minute: float  # warmupexponentialdecay only: the expected pace, which sizes the decay
    clip_grad_norm: float  # 0: no clipping
    batch_tokens: int  # sentences × the longest of them (JoeyNMT counts padding), source or target
    validation_freq: int  # updates between validations
    # 0: JoeyNMT's own order (shuffled each epoch, batches of any lengths); N: the training pairs shuffled
    # once and sorted by length within blocks of N pairs, read in that order (`shuffle: False`), so that each
    # batch holds sentences of similar lengths and less padding (JoeyNMT has no length bucketing of its own)
    length_blocks: int = 0
    # warmupexponentialdecay only: what its decay counts. "updates": updates_per_minute × the budget, as
    # JoeyNMT does; "time": the budget's seconds since the first update (bench/peers/joeynmt_venv.py), so that
    # the rate is decay_to × the peak as the budget ends whatever the machine's pace, like eole's and this
    # project's cosine_time
    decay_clock: str = "updates"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if not 0 < self.decay_to < 1:
            raise ValueError(f"decay_to must be between 0 and 1, got {self.decay_to}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.length_blocks < 0:
            raise ValueError(f"length_blocks must not be negative, got {self.length_blocks}")


# JoeyNMT 2.3.0's schedulers (joeynmt/builders.py) that a budget can use: "plateau" acts after validations,
# "warmupinversesquareroot" warms up then decays as 1/sqrt(update) (never near zero), and
# "warmupexponentialdecay" warms up then decays exponentially, the only one that reaches a chosen rate at a
# chosen update ("noam" is the inverse square root with its rate tied to d_model; "decaying" and
# "exponential" step once per epoch).
SCHEDULES = ("plateau", "warmupinversesquareroot", "warmupexponentialdecay")
DECAY_CLOCKS = ("updates", "time")
# Updates per minute of the cpu-hour recipe (3+3 layers, d_ff 512, 2048-token batches) on one thread of the
# 2-core AMD EPYC beside a second one-thread run of it: 40.2 in the 5-minute pace runs of 2026-11-27
# (docs/peers.md). Another machine has another pace: bench/peers/joeynmt_tune.py --pace-from measures it.
CPU_HOUR_UPDATES_PER_MINUTE = 40.0
RECIPES = {
    # the documented recipe's decay_to and updates_per_minute act only if --schedule warmupexponentialdecay
    "documented": Recipe(layers=6, d_ff=1024, dropout=0.3, lr=3e-4, warmup=0, schedule="plateau",
                         decay_to=0.01, updates_per_minute=CPU_HOUR_UPDATES_PER_MINUTE, clip_grad_norm=0.0,
                         batch_tokens=4096, validation_freq=1000),
    "cpu-hour": Recipe(layers=3, d_ff=512, dropout=0.1, lr=1e-3, warmup=300,
                       schedule="warmupexponentialdecay", decay_to=0.01,
                       updates_per_minute=CPU_HOUR_UPDATES_PER_MINUTE, clip_grad_norm=1.0,
                       batch_tokens=2048, validation_freq=NO_VALIDATION),
}  # fmt: skip
KNOBS = tuple(f.name for f in fields(Recipe))
RESULT_PREFIX = "joeynmt result: "
TRAINING_STARTED = "EPOCH 1"  # JoeyNMT's log line when its first epoch starts: the budget counts from here
SPLITS = ("test2016", "val")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_run_args(p, "JoeyNMT", VENV, Path("runs/joeynmt"))
    p.add_argument("--recipe", choices=tuple(RECIPES), default="documented",
                   help="JoeyNMT's documented GPU recipe, or the one built for a CPU hour (docs/peers.md)")
    p.add_argument("--merges", type=int, default=8000, help="joint BPE merges (subword-nmt)")
    knobs = p.add_argument_group("tuning knobs (default: the recipe's)")
    knobs.add_argument("--layers", type=int, help="encoder and decoder layers each")
    knobs.add_argument("--d-ff", type=int, help="feed-forward width")
    knobs.add_argument("--dropout", type=float, help="dropout (residual, feed-forward and attention)")
    knobs.add_argument("--lr", type=float, help="the constant learning rate, or the peak after warm-up")
    knobs.add_argument("--warmup", type=int, help="warm-up updates")
    knobs.add_argument("--schedule", choices=SCHEDULES, help="JoeyNMT's learning rate schedule")
    knobs.add_argument("--decay-to", type=float, help="warmupexponentialdecay: share of the peak at the end")
    knobs.add_argument("--updates-per-minute", type=float,
                       help="warmupexponentialdecay: the expected pace, which sizes the decay to the budget")
    knobs.add_argument("--decay-clock", choices=DECAY_CLOCKS,
                       help="warmupexponentialdecay: decay over the expected updates (JoeyNMT's way) or over "
                            "the budget's seconds, whatever the pace")  # fmt: skip
    knobs.add_argument("--clip-grad-norm", type=float, help="gradient norm clipping (0: none)")
    knobs.add_argument("--batch-tokens", type=int, help="training batch in tokens, padding included")
    knobs.add_argument("--validation-freq", type=int, help="updates between validations")
    knobs.add_argument("--length-blocks", type=int, metavar="N",
                       help="train on a file sorted by length within shuffled blocks of N pairs, in order "
                            "(0: JoeyNMT's shuffled batches)")  # fmt: skip
    p.add_argument("--split", choices=SPLITS, default="test2016", help="the split decoded and scored")
    p.add_argument("--sentences", type=int, help="decode only the split's first N sentences (smoke runs)")
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest", help="checkpoint to decode")
    p.add_argument("--cross-check", action="store_true",
                   help="also score the checkpoint with JoeyNMT's own test mode, beside this project's BLEU")
    p.add_argument("--decode-only", action="store_true",
                   help="no training: decode --split with the run already in --out (a tuning run's weights "
                        "on the test set); its result goes to <out>/result_<split>.json")  # fmt: skip
    args = p.parse_args(argv)
    common.check_positive(p, args, "minutes", "threads", "merges", "layers", "d_ff", "batch_tokens",
                         "validation_freq", "lr", "updates_per_minute", "sentences")  # fmt: skip
    for name in ("warmup", "clip_grad_norm", "length_blocks"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}")
    knobs = [k for k in KNOBS if getattr(args, k, None) is not None]
    if args.decode_only and knobs:
        p.error(f"--decode-only decodes the run in --out as it was trained; --{knobs[0].replace('_', '-')} "
                "would be ignored")  # fmt: skip
    try:
        args.settings = recipe_settings(args)
    except ValueError as e:
        p.error(str(e))
    return args


def recipe_settings(args: argparse.Namespace) -> Recipe:
    """The ``--recipe``'s settings with the knobs given on the command line in their place."""
    given = {k: getattr(args, k) for k in KNOBS if getattr(args, k, None) is not None}
    return replace(RECIPES[args.recipe], **given)


def expected_updates(settings: Recipe, minutes: float) -> int:
    """The updates the budget is expected to hold at ``settings.updates_per_minute`` (at least one)."""
    return max(round(settings.updates_per_minute * minutes), 1)


def exponential_decay(settings: Recipe, updates: int, seconds: float | None = None) -> dict:
    """JoeyNMT's ``warmupexponentialdecay`` settings for ``updates`` updates in all (or ``seconds``).

    Its rate is ``peak * step / warmup`` during the warm-up, then ``peak * decay ** ((step - warmup) /
    decay_length)`` (``WarmupExponentialDecayScheduler``): with ``decay = decay_to`` and ``decay_length =
    updates - warmup`` it is ``decay_to * peak`` at update ``updates``, and keeps falling after it. The rate's
    floor, ``learning_rate_min``, is the documented recipe's 1e-8 (JoeyNMT stops training below it). With
    ``seconds``, ``learning_rate_decay_seconds`` (this harness's key, read by ``joeynmt_venv.py``) counts the
    decay in seconds instead: ``decay_to * peak`` when ``seconds`` have passed since the first update.
    """
    clock = {} if seconds is None else {"learning_rate_decay_seconds": seconds}
    return {
        "learning_rate_peak": settings.lr,
        "learning_rate_warmup": settings.warmup,
        "learning_rate_decay": settings.decay_to,
        "learning_rate_decay_length": max(updates - settings.warmup, 1),
        "learning_rate_min": 1.0e-8,
        **clock,
    }


def schedule_config(settings: Recipe, minutes: float) -> dict:
    """The ``training`` section's learning rate settings of ``settings`` for a budget of ``minutes``.

    ``learning_rate`` is the rate of the first update, before JoeyNMT's per-update schedulers take over
    (they set the rate after each update): the warm-up's first step.
    """
    first = settings.lr / settings.warmup if settings.warmup else settings.lr
    if settings.schedule == "plateau":  # the documented recipe's: x0.7 after 5 validations without gain
        return {"scheduling": "plateau", "patience": 5, "decrease_factor": 0.7,
                "learning_rate": settings.lr, "learning_rate_min": 1.0e-8}  # fmt: skip
    if settings.schedule == "warmupinversesquareroot":
        return {"scheduling": settings.schedule, "learning_rate": first, "learning_rate_peak": settings.lr,
                "learning_rate_warmup": settings.warmup, "learning_rate_min": 1.0e-8}  # fmt: skip
    seconds = minutes * 60 if settings.decay_clock == "time" else None
    return {"scheduling": settings.schedule, "learning_rate": first,
            **exponential_decay(settings, expected_updates(settings, minutes), seconds)}  # fmt: skip


# -- the config ----------------------------------------------------------------------------------------------


def write_config(args: argparse.Namespace, out: Path) -> Path:
    """Write ``<out>/config.yaml`` for the run described by ``args`` (and, with ``length_blocks``, its
    training file ``<out>/train.{de,en}``); returns its path."""
    if args.settings.length_blocks:
        write_length_blocks(Path(args.data) / "train", out / "train", args.settings.length_blocks)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(joeynmt_config(args, out), sort_keys=False), encoding="utf-8")
    return path


def length_blocks(pairs: list[tuple[str, str]], block: int, seed: int = 42) -> list[int]:
    """The order ``--length-blocks`` trains in: the pairs shuffled once (``seed``), cut into blocks of
    ``block`` pairs, each block sorted by its pairs' longer side in words; blocks stay in shuffled order.

    Read in this order, JoeyNMT's token batches (sentences × the longest of them) take neighbours of similar
    lengths, as a length-bucketing iterator would; every epoch reads the same order.
    """
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)

    def longer(k: int) -> int:
        return max(len(pairs[k][0].split()), len(pairs[k][1].split()))

    return [k for i in range(0, len(order), block) for k in sorted(order[i : i + block], key=longer)]


def write_length_blocks(corpus: Path, out: Path, block: int) -> None:
    """``<out>.de`` and ``<out>.en``: the training pairs of ``<corpus>.de``/``.en`` in ``length_blocks``
    order (the corpus's own files untouched; the joint BPE is still learnt on them)."""
    sides = [Path(f"{corpus}.{lang}").read_text(encoding="utf-8").splitlines() for lang in LANGS]
    if len(sides[0]) != len(sides[1]):
        raise SystemExit(f"error: {corpus}.de has {len(sides[0])} lines, {corpus}.en {len(sides[1])}")
    order = length_blocks(list(zip(*sides, strict=True)), block)
    for lang, lines in zip(LANGS, sides, strict=True):
        Path(f"{out}.{lang}").write_text("".join(lines[k] + "\n" for k in order), encoding="utf-8")


def joeynmt_config(args: argparse.Namespace, out: Path) -> dict:
    """The recipe of ``configs/iwslt14_deen_bpe.yaml`` with the changes of ``RECIPE_CHANGES`` and the
    settings of ``args.settings`` (``setting_changes``).

    Training data, vocabulary and BPE codes are absolute paths, as JoeyNMT resolves them from its working
    directory. JoeyNMT's ``model_dir`` is ``<out>/model``; the BPE codes and joint vocabulary are in ``out``.
    """
    data, out = Path(args.data).resolve(), Path(out).resolve()

    def side(lang: str) -> dict:
        return {
            "lang": lang, "max_length": 62, "lowercase": False, "normalize": False, "level": "bpe",
            "voc_min_freq": 1, "voc_file": str(out / "vocab.txt"), "tokenizer_type": "subword-nmt",
            "tokenizer_cfg": {"num_merges": args.merges, "codes": str(out / "bpe.codes"),
                              "pretokenizer": "moses"},
        }  # fmt: skip

    settings = args.settings

    def coder() -> dict:
        return {
            "type": "transformer", "num_layers": settings.layers, "num_heads": 4,
            "embeddings": {"embedding_dim": 256, "scale": True, "dropout": 0.0},
            "hidden_size": 256, "ff_size": settings.d_ff, "dropout": settings.dropout, "layer_norm": "pre",
            "activation": "relu",
        }  # fmt: skip

    clipping = {"clip_grad_norm": settings.clip_grad_norm} if settings.clip_grad_norm else {}

    return {
        "name": "transformer_multi30k_deen_bpe",
        "joeynmt_version": "2.3.0",
        "model_dir": str(out / "model"),
        "use_cuda": False,
        "fp16": False,
        "random_seed": 42,
        "data": {
            "train": str((out if settings.length_blocks else data) / "train"), "dev": str(data / "val"),
            "test": str(data / "test2016"),
            "dataset_type": "plain", "src": side("de"), "trg": side("en"),
            "special_symbols": {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>", "pad_id": 1,
                                "bos_token": "<s>", "bos_id": 2, "eos_token": "</s>", "eos_id": 3},
        },
        "testing": {
            "n_best": 1, "beam_size": 5, "beam_alpha": 1.0, "batch_size": 1024, "batch_type": "token",
            "max_output_length": 100, "eval_metrics": ["bleu"], "return_prob": "none",
            "return_attention": False, "sacrebleu_cfg": {"tokenize": "13a", "lowercase": False},
        },
        "training": {
            "optimizer": "adamw", "normalization": "tokens", "adam_betas": [0.9, 0.999],
            **schedule_config(settings, args.minutes), **clipping, "loss": "crossentropy",
            "weight_decay": 0.0, "label_smoothing": 0.1,
            "batch_size": settings.batch_tokens, "batch_type": "token", "early_stopping_metric": "bleu",
            "epochs": 100, "validation_freq": settings.validation_freq, "logging_freq": 100,
            "overwrite": False, "shuffle": not settings.length_blocks, "print_valid_sents": [0, 1, 2, 3, 4],
            "keep_best_ckpts": 5,
        },
        "model": {
            "initializer": "xavier_uniform", "embed_initializer": "xavier_uniform", "embed_init_gain": 1.0,
            "init_gain": 1.0, "bias_initializer": "zeros", "tied_embeddings": True, "tied_softmax": True,
            "encoder": coder(), "decoder": coder(),
        },
    }


def recipe_changes(args: argparse.Namespace) -> list[str]:
    """``RECIPE_CHANGES`` filled in with this run's settings, then ``setting_changes``."""
    return [c.format(**vars(args)) for c in RECIPE_CHANGES] + setting_changes(args.settings, args.minutes)


def setting_changes(settings: Recipe, minutes: float) -> list[str]:
    """One line for each setting that differs from JoeyNMT's documented recipe, naming both values."""
    shipped = RECIPES["documented"]
    names = {"layers": "encoder/decoder layers", "d_ff": "ff_size", "dropout": "dropout",
             "lr": "learning rate", "warmup": "warm-up updates", "schedule": "scheduling",
             "clip_grad_norm": "clip_grad_norm", "batch_tokens": "batch tokens",
             "validation_freq": "validation_freq", "length_blocks": "training order"}  # fmt: skip

    def shown(key: str, value) -> str:
        if key == "clip_grad_norm" and not value:
            return "none"
        if key == "length_blocks":
            return f"length-sorted blocks of {value} pairs, read in order" if value else "shuffled"
        return "never" if key == "validation_freq" and value >= NO_VALIDATION else str(value)

    lines = [
        f"{label} {shown(k, getattr(settings, k))} (recipe: {shown(k, getattr(shipped, k))})"
        for k, label in names.items()
        if getattr(settings, k) != getattr(shipped, k)
    ]
    if settings.schedule == "warmupexponentialdecay" and settings.decay_clock == "time":
        lines.append(f"decay to {settings.decay_to:g} x the peak as the {minutes:g} min end (by the clock, "
                     "whatever the pace)")
    elif settings.schedule == "warmupexponentialdecay":
        updates = expected_updates(settings, minutes)
        lines.append(f"decay to {settings.decay_to:g} x the peak at update {updates} "
                     f"({settings.updates_per_minute:g} updates/min x {minutes:g} min, the expected pace)")
    return lines


# -- the result line, the environment and the watchdog (bench/peers/common.py, with JoeyNMT's names) -----


def result_line(result: dict) -> str:
    return common.result_line(RESULT_PREFIX, result)


def parse_result(text: str) -> dict:
    """The last ``RESULT_PREFIX`` line of a run's output, as a dict (``common.parse_result``)."""
    return common.parse_result(text, RESULT_PREFIX, "JoeyNMT")


def ensure_venv(venv: Path) -> Path:
    """JoeyNMT's virtual environment, created and filled if missing (``common.ensure_venv``); its Python."""
    return common.ensure_venv(venv, [JOEYNMT, *EXTRA_PACKAGES], "import joeynmt.training, joeynmt.prediction",
                             "JoeyNMT")  # fmt: skip


def joeynmt_command(python: Path) -> list[str]:
    """``python -m joeynmt``, through ``bench/peers/joeynmt_venv.py``'s fixes for today's torch."""
    return [str(python), str(REPO / "bench" / "peers" / "joeynmt_venv.py"), "joeynmt"]


def train_with_budget(
    command: list[str], env: dict, log: Path, budget_s: float, grace_s: float = 600
) -> dict:
    """JoeyNMT's training, interrupted (SIGINT, as Ctrl-C) ``budget_s`` after its first epoch starts.

    JoeyNMT catches the interrupt in its training loop and saves the current weights as ``latest.ckpt``
    before it returns (``common.train_with_budget``).
    """
    return common.train_with_budget(command, env, log, budget_s, grace_s, started=TRAINING_STARTED,
                                   name="JoeyNMT")  # fmt: skip


def training_progress(log_text: str) -> dict:
    """Updates, epochs and the last validation of JoeyNMT's training log."""
    import re

    steps = [int(m) for m in re.findall(r"Step:\s*(\d+)", log_text)]
    epochs = [int(m) for m in re.findall(r"EPOCH (\d+)", log_text)]
    interrupted = re.findall(r"Interrupt at epoch\s*(\d+), step\s*(\d+)", log_text)
    valid = re.findall(r"Evaluation result \(greedy\):?.*?bleu:\s*([\d.]+)", log_text)
    rates = re.findall(r"Lr:\s*([\d.eE+-]+)", log_text)
    progress = {"epochs": max(epochs, default=0), "updates": max(steps, default=0)}
    if rates:
        progress["last_logged_lr"] = float(rates[-1])
    if interrupted:
        progress["updates"] = int(interrupted[-1][1])
    if valid:
        progress["last_validation_bleu_greedy"] = float(valid[-1])
    return progress


# -- decoding and scoring ------------------------------------------------------------------------------------


def translate(python: Path, config: Path, checkpoint: Path, sources: Path, hyps: Path, env: dict) -> float:
    """JoeyNMT's ``translate`` mode (beam search of the config's testing section) of ``sources``; seconds.

    Hypotheses are read from its standard output, one per line (its ``-o`` option fails in 2.3.0:
    ``translate`` reads ``args.n_best`` where the setting is ``args.test.n_best``); its log goes to
    ``<hyps>.log``.
    """
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    cfg["testing"]["load_model"] = str(checkpoint.resolve())
    decode_config = config.with_name("decode.yaml")
    decode_config.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    start = time.perf_counter()
    log = hyps.with_name(hyps.name + ".log")
    with open(sources, encoding="utf-8") as stdin, open(hyps, "w") as stdout, open(log, "w") as stderr:
        done = subprocess.run([*joeynmt_command(python), "translate", str(decode_config)],
                              stdin=stdin, stdout=stdout, stderr=stderr, env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"JoeyNMT decoding failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - start


def split_files(args: argparse.Namespace, out: Path) -> tuple[Path, Path]:
    """The source and reference files of ``--split``: the corpus's own, or its first ``--sentences`` lines
    written to ``<out>/subset/``."""
    src, ref = (args.data / f"{args.split}.{lang}" for lang in ("de", "en"))
    if args.sentences is None:
        return src, ref
    (out / "subset").mkdir(exist_ok=True)
    subset = []
    for path in (src, ref):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)[: args.sentences]
        subset.append(out / "subset" / path.name)
        subset[-1].write_text("".join(lines), encoding="utf-8")
    return subset[0], subset[1]


def cross_check(python: Path, config: Path, checkpoint: Path, src: Path, ref: Path, hyps: Path,
                env: dict) -> dict:  # fmt: skip
    """JoeyNMT's own ``test`` mode on ``checkpoint`` and the split of ``src``/``ref``, beside this project's
    scoring of the same translations.

    ``test`` decodes the split again (the config's testing section: beam 5) and scores it with sacreBLEU
    (``sacrebleu_cfg``: 13a, cased) against its references, which are the reference lines Moses-tokenized and
    detokenized (``bench/peers/joeynmt_venv.py references``). Returned: JoeyNMT's BLEU, this project's BLEU of
    ``test``'s translations against the raw references and against JoeyNMT's, how many references the Moses
    round trip changed, and how many of ``test``'s translations differ from ``translate``'s (``hyps``).
    """
    import re

    from analysis.metrics import bleu_tokenizer, score_translations

    folder = config.parent / "cross_check"
    folder.mkdir(exist_ok=True)
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    cfg["data"].pop("dev")  # JoeyNMT's test mode decodes dev and test; the split alone is asked for here
    cfg["data"]["test"] = str(src.resolve().with_suffix(""))
    cfg["testing"]["load_model"] = str(checkpoint.resolve())
    cfg["testing"]["eval_metrics"] = ["bleu"]
    test_config = folder / "test.yaml"
    test_config.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    command = [*joeynmt_command(python), "test", str(test_config), "--output-path", str(folder / "hyp")]
    done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    log = folder / "test.out"
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    found = re.findall(r"Evaluation result \(beam search\): bleu:\s*([\d.]+)", done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"JoeyNMT's test mode failed (exit {done.returncode}); see {log}")
    joey_refs = folder / "references.en"
    changed = subprocess.run([str(python), str(REPO / "bench" / "peers" / "joeynmt_venv.py"), "references",
                              str(test_config), str(ref), str(joey_refs)],
                             env=env, check=True, capture_output=True, text=True)  # fmt: skip
    test_hyps = (folder / "hyp.test").read_text(encoding="utf-8").splitlines()
    translate_hyps = hyps.read_text(encoding="utf-8").splitlines()
    tokenize = bleu_tokenizer("en")
    ours = score_translations(test_hyps, ref.read_text(encoding="utf-8").splitlines(), tokenize=tokenize)
    ours_joey_refs = score_translations(test_hyps, joey_refs.read_text(encoding="utf-8").splitlines(),
                                        tokenize=tokenize)  # fmt: skip
    return {
        "joeynmt_test_bleu": float(found[-1]),
        "project_bleu": ours.bleu,
        "project_bleu_on_joeynmt_references": ours_joey_refs.bleu,
        "references_changed_by_moses": json.loads(changed.stdout.strip().splitlines()[-1])["lines_changed"],
        "translations_differing_from_translate_mode": sum(
            a != b for a, b in zip(test_hyps, translate_hyps, strict=True)
        ),
        "sentences": len(test_hyps),
    }


def decode_and_score(args: argparse.Namespace, out: Path, python: Path, env: dict, config: Path,
                     run: dict, times: dict, progress: dict, name: str = "result.json") -> dict:  # fmt: skip
    """Decode ``--split`` with the run's ``--checkpoint`` (``latest.ckpt`` where there is no ``best.ckpt``),
    score it, cross-check it if asked, and report it as ``<out>/<name>`` (``common.report``)."""
    checkpoint = out / "model" / f"{args.checkpoint}.ckpt"
    if not checkpoint.exists():  # no validation within the budget: no best.ckpt
        checkpoint = out / "model" / "latest.ckpt"
    src, ref = split_files(args, out)
    hyps = out / f"{args.split}.hyp.en"
    decode_seconds = translate(python, config, checkpoint, src, hyps, env)
    scores = common.score_split(hyps, ref, args.split)
    if args.cross_check:
        progress = {**progress, "cross_check": cross_check(python, config, checkpoint, src, ref, hyps, env)}
    run = {**run, "checkpoint": checkpoint.name}
    return common.report(args, out, RESULT_PREFIX, run, hyps, times, decode_seconds, progress, scores, name)


def decode_again(args: argparse.Namespace) -> dict:
    """``--decode-only``: the finished run in ``--out`` (its ``result.json``, config and weights), decoded on
    ``--split`` as after its training; what it was trained with comes from its ``result.json``."""
    trained = args.out / "result.json"
    if not (trained.is_file() and (args.out / "model" / "latest.ckpt").is_file()):
        sys.exit(f"error: --decode-only: no finished JoeyNMT run in {args.out} "
                 "(its result.json and model/latest.ckpt)")
    earlier = json.loads(trained.read_text(encoding="utf-8"))
    args.minutes = earlier.get("budget_minutes", args.minutes)
    python = ensure_venv(args.venv)
    run = {key: earlier[key] for key in ("model", "recipe", "settings", "recipe_changes")}
    times = {"train_seconds": earlier["train_minutes"] * 60,
             "prepare_seconds": earlier["prepare_minutes"] * 60,
             "stopped_by_budget": earlier["stopped_by_budget"]}  # fmt: skip
    progress = training_progress((args.out / "model" / "train.log").read_text(encoding="utf-8"))
    if "expected_updates" in earlier:
        progress["expected_updates"] = earlier["expected_updates"]
    return decode_and_score(args, args.out, python, common.thread_env(args.threads), args.out / "config.yaml",
                            run, times, progress, name=f"result_{args.split}.json")  # fmt: skip


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.decode_only:
        return decode_again(args)
    started = common.start_run(args, "JoeyNMT", ensure_venv, write_config, recipe_changes(args))
    if started is None:
        return None
    out, python, env, config = started
    print(f"recipe: {args.recipe}", flush=True)
    helper = REPO / "bench" / "peers" / "joeynmt_venv.py"
    train = Path(args.data).resolve() / "train"  # the BPE learnt on the corpus's file, whatever the order
    vocab = subprocess.run([str(python), str(helper), "vocab", str(config), "--train", str(train)],
                           env=env, check=True, capture_output=True, text=True)  # fmt: skip
    print(f"joint BPE and vocabulary: {vocab.stdout.strip()}", flush=True)
    model_dir = out / "model"  # JoeyNMT's train mode makes it, and refuses one that exists
    times = train_with_budget([*joeynmt_command(python), "train", str(config), "--skip-test"],
                              env, out / "train.out", args.minutes * 60)  # fmt: skip
    progress = training_progress((model_dir / "train.log").read_text(encoding="utf-8"))
    if args.settings.schedule == "warmupexponentialdecay":
        progress["expected_updates"] = expected_updates(args.settings, args.minutes)
    run = {"model": "JoeyNMT Transformer, " + RECIPE, "recipe": args.recipe,
           "settings": asdict(args.settings), "recipe_changes": recipe_changes(args)}  # fmt: skip
    return decode_and_score(args, out, python, env, config, run, times, progress)


if __name__ == "__main__":
    main()
