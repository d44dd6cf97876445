"""JoeyNMT's Transformer recipe on Multi30k de→en, trained for a fixed wall-clock budget, decoded with its own
beam search and scored with this project's sacreBLEU.

    python bench/joeynmt_baseline.py --data ../shared/corpora/multi30k --minutes 60 --threads 1
    python bench/joeynmt_baseline.py --data ../shared/corpora/multi30k --minutes 3    # a smoke run

JoeyNMT (``joeynmt`` 2.3.0) pins ``protobuf<3.21``, so it lives in a virtual environment of its own
(``--venv``, default ``bench/.joeynmt-venv``), created on first use with ``--system-site-packages``: the
system's torch is reused, and pip installs JoeyNMT with its own pins into the venv, where they shadow the
system's versions without touching them.

The config is JoeyNMT 2.3.0's ``configs/iwslt14_deen_bpe.yaml`` (named ``transformer_iwslt14_deen_bpe``; its
Transformer de→en recipe, 33.73 BLEU on IWSLT14 in JoeyNMT's benchmarks), with these changes, and no other
(``RECIPE_CHANGES`` lists them; ``docs/joeynmt.md`` says why):

- data: Multi30k ``train``/``val``/``test2016``; raw text, so JoeyNMT's Moses pre-tokenizer (``pretokenizer:
  moses``) does what the recipe's data script did with Moses' ``tokenizer.perl``, and detokenizes the output;
- case kept (``lowercase: False``, recipe: True): this project's sacreBLEU is cased;
- joint BPE learnt on Multi30k's training set with subword-nmt, ``--merges`` (8000) instead of the 32000 of
  IWSLT14's 160k pairs, so that the vocabulary is about this project's 8000; one vocabulary for both sides,
  as ``tied_embeddings`` needs;
- CPU, fp32 (``use_cuda: False``), ``--threads`` torch threads;
- the budget: training stops after ``--minutes`` of training (validations included, data preparation not),
  by a watchdog that interrupts JoeyNMT as Ctrl-C does; JoeyNMT then saves the current weights as
  ``latest.ckpt``. ``epochs`` is only an upper bound;
- ``--layers`` (default 6, the recipe's) and ``--batch-tokens`` (default 4096, the recipe's) and
  ``--validation-freq`` (default 1000, the recipe's) can be changed; each run records what it used.

Decoding: ``joeynmt translate`` with the recipe's testing section (beam 5, alpha 1.0, batches of 1024
tokens) on test2016, of ``latest.ckpt`` (the weights at the end of the budget, as this project's recipe uses
its ``last.ckpt``; ``--checkpoint best`` takes JoeyNMT's ``best.ckpt``, chosen by greedy validation BLEU).
The detokenized output is scored by ``analysis.metrics.score_translations``, as ``evaluate.py`` scores. The
last line printed is one JSON object (``RESULT_PREFIX``), also written to ``<out>/result.json``.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import peers
from bench.peers import REPO

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
    "encoder/decoder layers {layers} (recipe: 6), batch {batch_tokens} tokens (recipe: 4096)",
    "validation every {validation_freq} updates (recipe: 1000)",
)
RESULT_PREFIX = "joeynmt result: "
TRAINING_STARTED = "EPOCH 1"  # JoeyNMT's log line when its first epoch starts: the budget counts from here


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peers.add_run_args(p, "JoeyNMT", VENV, Path("runs/joeynmt"))
    p.add_argument("--merges", type=int, default=8000, help="joint BPE merges (subword-nmt)")
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers each (recipe: 6)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="training batch in tokens (recipe: 4096)")
    p.add_argument("--validation-freq", type=int, default=1000, help="updates between validations (recipe)")
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest", help="checkpoint to decode")
    args = p.parse_args(argv)
    peers.check_positive(p, args, "minutes", "threads", "merges", "layers", "batch_tokens", "validation_freq")
    return args


# -- the config ----------------------------------------------------------------------------------------------


def write_config(args: argparse.Namespace, out: Path) -> Path:
    """Write ``<out>/config.yaml`` for the run described by ``args``; returns its path."""
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(joeynmt_config(args, out), sort_keys=False), encoding="utf-8")
    return path


def joeynmt_config(args: argparse.Namespace, out: Path) -> dict:
    """The recipe of ``configs/iwslt14_deen_bpe.yaml`` with the changes of ``RECIPE_CHANGES``.

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

    def coder() -> dict:
        return {
            "type": "transformer", "num_layers": args.layers, "num_heads": 4,
            "embeddings": {"embedding_dim": 256, "scale": True, "dropout": 0.0},
            "hidden_size": 256, "ff_size": 1024, "dropout": 0.3, "layer_norm": "pre", "activation": "relu",
        }  # fmt: skip

    return {
        "name": "transformer_multi30k_deen_bpe",
        "joeynmt_version": "2.3.0",
        "model_dir": str(out / "model"),
        "use_cuda": False,
        "fp16": False,
        "random_seed": 42,
        "data": {
            "train": str(data / "train"), "dev": str(data / "val"), "test": str(data / "test2016"),
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
            "scheduling": "plateau", "patience": 5, "decrease_factor": 0.7, "loss": "crossentropy",
            "learning_rate": 0.0003, "learning_rate_min": 1.0e-8, "weight_decay": 0.0, "label_smoothing": 0.1,
            "batch_size": args.batch_tokens, "batch_type": "token", "early_stopping_metric": "bleu",
            "epochs": 100, "validation_freq": args.validation_freq, "logging_freq": 100, "overwrite": False,
            "shuffle": True, "print_valid_sents": [0, 1, 2, 3, 4], "keep_best_ckpts": 5,
        },
        "model": {
            "initializer": "xavier_uniform", "embed_initializer": "xavier_uniform", "embed_init_gain": 1.0,
            "init_gain": 1.0, "bias_initializer": "zeros", "tied_embeddings": True, "tied_softmax": True,
            "encoder": coder(), "decoder": coder(),
        },
    }


def recipe_changes(args: argparse.Namespace) -> list[str]:
    """``RECIPE_CHANGES`` filled in with this run's settings."""
    return [c.format(**vars(args)) for c in RECIPE_CHANGES]


# -- the result line and the watchdog (bench/peers.py, with JoeyNMT's names) ---------------------------------


def result_line(result: dict) -> str:
    return peers.result_line(RESULT_PREFIX, result)


def parse_result(text: str) -> dict:
    """The last ``RESULT_PREFIX`` line of a run's output, as a dict (``peers.parse_result``)."""
    return peers.parse_result(text, RESULT_PREFIX, "JoeyNMT")


def ensure_venv(venv: Path) -> Path:
    """JoeyNMT's virtual environment, created and filled if missing (``peers.ensure_venv``); its Python."""
    return peers.ensure_venv(venv, [JOEYNMT, *EXTRA_PACKAGES], "import joeynmt.training, joeynmt.prediction",
                             "JoeyNMT")  # fmt: skip


def joeynmt_command(python: Path) -> list[str]:
    """``python -m joeynmt``, through ``bench/joeynmt_venv.py``'s fixes for today's torch."""
    return [str(python), str(REPO / "bench" / "joeynmt_venv.py"), "joeynmt"]


def train_with_budget(
    command: list[str], env: dict, log: Path, budget_s: float, grace_s: float = 600
) -> dict:
    """JoeyNMT's training, interrupted (SIGINT, as Ctrl-C) ``budget_s`` after its first epoch starts.

    JoeyNMT catches the interrupt in its training loop and saves the current weights as ``latest.ckpt``
    before it returns (``peers.train_with_budget``).
    """
    return peers.train_with_budget(command, env, log, budget_s, grace_s, started=TRAINING_STARTED,
                                   name="JoeyNMT")  # fmt: skip


def training_progress(log_text: str) -> dict:
    """Updates, epochs and the last validation of JoeyNMT's training log."""
    import re

    steps = [int(m) for m in re.findall(r"Step:\s*(\d+)", log_text)]
    epochs = [int(m) for m in re.findall(r"EPOCH (\d+)", log_text)]
    interrupted = re.findall(r"Interrupt at epoch\s*(\d+), step\s*(\d+)", log_text)
    valid = re.findall(r"Evaluation result \(greedy\):?.*?bleu:\s*([\d.]+)", log_text)
    progress = {"epochs": max(epochs, default=0), "updates": max(steps, default=0)}
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


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    started = peers.start_run(args, "JoeyNMT", ensure_venv, write_config, recipe_changes(args))
    if started is None:
        return None
    out, python, env, config = started
    vocab = subprocess.run([str(python), str(REPO / "bench" / "joeynmt_venv.py"), "vocab", str(config)],
                           env=env, check=True, capture_output=True, text=True)  # fmt: skip
    print(f"joint BPE and vocabulary: {vocab.stdout.strip()}", flush=True)
    model_dir = out / "model"  # JoeyNMT's train mode makes it, and refuses one that exists
    times = train_with_budget([*joeynmt_command(python), "train", str(config), "--skip-test"],
                              env, out / "train.out", args.minutes * 60)  # fmt: skip
    progress = training_progress((model_dir / "train.log").read_text(encoding="utf-8"))

    checkpoint = model_dir / f"{args.checkpoint}.ckpt"
    if not checkpoint.exists():  # no validation within the budget: no best.ckpt
        checkpoint = model_dir / "latest.ckpt"
    hyps = out / "test2016.hyp.en"
    decode_seconds = translate(python, config, checkpoint, args.data / "test2016.de", hyps, env)

    run = {"model": "JoeyNMT Transformer, " + RECIPE, "recipe_changes": recipe_changes(args),
           "checkpoint": checkpoint.name}  # fmt: skip
    return peers.report(args, out, RESULT_PREFIX, run, hyps, times, decode_seconds, progress)


if __name__ == "__main__":
    main()
