"""The parts of the eole comparison that import eole: run with the Python of eole's virtual environment
(``bench/peers/eole_baseline.py`` creates it), never with the project's own.

    VENV/bin/python bench/peers/eole_venv.py spm CONFIG                 # the joint SentencePiece BPE
    VENV/bin/python bench/peers/eole_venv.py train CONFIG --minutes 60  # `eole train`, stopped in time
    VENV/bin/python bench/peers/eole_venv.py speed BATCHES.pt OUT.json  # speed beside model.Transformer

``spm`` learns the SentencePiece model that the config's ``sentencepiece`` transform reads, on the training
sentences of both languages (the role of ``spm_train`` in eole's ``recipes/wmt17/prepare_wmt_ende_data.sh``).

``train`` runs ``eole train --config CONFIG`` with two changes to eole's training loop, for this process only:

- a time budget: eole has none (``train_steps`` only). The clock starts when the first batch is drawn (the
  line ``TRAINING_STARTED`` is printed then); once ``--minutes`` have passed, or on SIGINT (the watchdog of
  ``bench/peers/common.py``), no more batches are drawn, and eole's loop ends as at ``train_steps``: it
  saves the current weights. (On an uncaught SIGINT eole logs "Training interrupted" and saves nothing.)
- the learning rate: linear warm-up for ``warmup_steps``, then this project's ``cosine_time`` schedule
  (``training/schedule.py``), a cosine that reaches zero when the time budget runs out, its length in updates
  estimated from the pace so far. eole's own ``cosine`` decays over ``train_steps``, a number of updates that
  cannot be known before the hour.

``speed`` times eole's training step (its ``Trainer``'s: forward, loss, backward, optimiser step) on the
batches ``bench/speed.py`` saved, with this project's ``model.Transformer`` at the same sizes, their steps
alternating (the venv sees the system's packages, so this project's model imports here too).

Shape legend: B batch, S source length, T target length, V vocabulary size.
"""

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/peers/eole_venv.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TRAINING_STARTED = "eole training clock started"  # eole_baseline.py's watchdog waits for this line


def learn_spm(config_path: Path) -> dict:
    """Learn the config's SentencePiece model on both training sides; returns sizes for the log."""
    import sentencepiece as spm
    import yaml

    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    corpus = cfg["data"]["corpus_1"]
    model = Path(cfg["transforms_configs"]["sentencepiece"]["src_subword_model"])
    size = cfg["src_vocab_size"]
    spm.SentencePieceTrainer.train(
        input=f"{corpus['path_src']},{corpus['path_tgt']}", model_prefix=str(model.with_suffix("")),
        vocab_size=size, model_type="bpe", character_coverage=1.0, input_sentence_size=0,
        minloglevel=2,
    )  # fmt: skip
    return {"model": str(model), "vocab_size": size, "model_type": "bpe"}


class Budget:
    """The training clock: started at the first batch, spent after ``seconds`` or when ``stop`` is called."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start: float | None = None
        self._stopped = threading.Event()

    def begin(self) -> None:
        self.start = time.perf_counter()
        print(TRAINING_STARTED, flush=True)

    def fraction(self) -> float:
        """Share of the budget spent: 0 before the clock starts."""
        return 0.0 if self.start is None else (time.perf_counter() - self.start) / self.seconds

    def stop(self, *_) -> None:
        self._stopped.set()

    def spent(self) -> bool:
        return self._stopped.is_set() or self.fraction() >= 1.0


def lr_factor(step: int, warmup: int, fraction: float) -> float:
    """eole's multiplier of the peak rate at update ``step`` (1-based): warm-up, then ``cosine_time``."""
    from training.schedule import cosine_decay, time_budget_steps

    if step <= warmup:
        return step / warmup
    return cosine_decay(step, warmup, time_budget_steps(step, fraction))


def patch_trainer(budget: Budget) -> None:
    """The two changes of the module docstring, made to eole's classes before ``eole train`` runs."""
    import eole.trainer
    from eole.utils import optimizers

    draw = eole.trainer.Trainer._accum_batches

    def budgeted(self, iterator):
        for item in draw(self, iterator):
            if budget.start is None:
                budget.begin()
            elif budget.spent():
                print(f"time budget spent at update {self.optim.training_step - 1}", flush=True)
                return
            yield item

    def decay_fn(config, running_config=None):
        warmup = (running_config or config.training).warmup_steps
        return lambda step: lr_factor(step, warmup, budget.fraction())

    eole.trainer.Trainer._accum_batches = budgeted
    optimizers.make_learning_rate_decay_fn = decay_fn


def run_train(config: Path, minutes: float) -> None:
    budget = Budget(minutes * 60)
    signal.signal(signal.SIGINT, budget.stop)
    patch_trainer(budget)
    from eole.bin.main import main as eole_main

    sys.argv = ["eole", "train", "--config", str(config)]
    eole_main()


# -- speed ---------------------------------------------------------------------------------------------------


def eole_trainer(sizes: dict, vocab_size: int, folder: Path):
    """eole's Transformer (pre-LN, eole's default) at ``sizes`` with its ``Trainer``: embeddings and output
    tied or not as ``bench/speed.py``'s models (``sizes["tied"]``), biases where ``model.Transformer`` has
    them (so the same parameters), dropout on attention weights too, plain cross-entropy, AdamW at a
    constant 1e-4, fp32 on the CPU. ``folder`` holds the vocabulary file eole reads: ``vocab_size`` entries
    with eole's specials (ids 0-3: unk, pad, bos, eos)."""
    import torch
    from eole.config.run import TrainConfig
    from eole.inputters.inputter import build_vocab
    from eole.models.model import get_model_class
    from eole.trainer import build_trainer
    from eole.utils.optimizers import Optimizer

    tied = sizes.get("tied", False)
    vocab = folder / "vocab.txt"
    vocab.write_text("".join(f"w{i}\t1\n" for i in range(4, vocab_size)), encoding="utf-8")
    config = TrainConfig(
        src_vocab=str(vocab), tgt_vocab=str(vocab), share_vocab=True, src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size, vocab_size_multiple=1, save_data=str(folder / "data"),
        data={"corpus_1": {"path_src": str(vocab), "path_tgt": str(vocab)}},  # never read
        training={
            "model_path": str(folder / "model"), "world_size": 1, "gpu_ranks": [], "compute_dtype": "fp32",
            "use_amp": False, "optim": "adamw", "learning_rate": 1e-4, "decay_method": "none",
            "max_grad_norm": 0, "dropout": [sizes["dropout"]], "attention_dropout": [sizes["dropout"]],
            "label_smoothing": 0.0, "normalization": "tokens", "param_init_method": "xavier_uniform",
        },
        model={
            "architecture": "transformer", "hidden_size": sizes["d_model"], "heads": sizes["num_heads"],
            "layers": sizes["num_layers"], "transformer_ff": sizes["d_ff"],
            "share_embeddings": tied, "share_decoder_embeddings": tied, "generator_bias": False,
            # biases in attention and feed-forward layers (eole's default has none), as model.Transformer has
            "add_qkvbias": True, "add_final_linear_bias": True, "add_ffnbias": True, "embeddings": {
                "word_vec_size": sizes["d_model"], "position_encoding_type": "SinusoidalInterleaved"},
        },
    )  # fmt: skip
    vocabs = build_vocab(config, {"src": [], "tgt": []})
    assert len(vocabs["src"]) == vocab_size, (len(vocabs["src"]), vocab_size)
    torch.manual_seed(sizes.get("seed", 0))
    model = get_model_class(config.model).for_training(config.model, vocabs, config.training, device_id=-1)
    return build_trainer(config, -1, model, vocabs, Optimizer.from_config(model, config))


def eole_batch(batch) -> tuple[dict, int]:
    """eole's batch dictionary of ``bench/speed.py``'s batch (the keys its step reads, as its collate makes
    them), and its normalisation (as ``Trainer._accum_batches`` counts: target tokens after BOS, less one a
    sentence)."""
    import torch

    from bench.peers.timing import peer_target, to_peer_ids

    src, tgt = to_peer_ids(batch.src), peer_target(batch)  # (B, S), (B, T + 1)
    n = src.size(0)
    out = {"src": src, "srclen": (src != 1).sum(1), "tgt": tgt, "tgtlen": (tgt != 1).sum(1), "images": None,
           "prefix_len": None, "ind_in_bucket": list(range(n)), "cid": ["bench"] * n,
           "cid_line_number": list(range(n)), "sco": torch.ones(n), "left_pad": False}  # fmt: skip
    return out, int((tgt[:, 1:] != 1).sum()) - n


def time_training(config: dict, saved_batches: list[dict]) -> dict:
    """Training target tokens/s of eole's model and of ours on the same batches, steps alternating."""
    import tempfile

    import eole.utils
    import torch

    from bench.peers.timing import alternate_training
    from bench.speed_common import Batch, BenchConfig, our_model
    from bench.speed_training import train_step

    cfg = BenchConfig(**config)
    batches = [Batch(**b) for b in saved_batches]
    eole_batches = [eole_batch(b) for b in batches]
    ours = our_model(cfg, torch.device("cpu")).train()
    optimizer = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    with tempfile.TemporaryDirectory() as folder:
        trainer = eole_trainer(config, cfg.vocab_size, Path(folder))

    def eole_step(i: int) -> None:
        batch, normalization = eole_batches[i]
        trainer._train_step([batch], normalization, eole.utils.Statistics(), eole.utils.Statistics())

    rates = alternate_training({"ours": lambda i: train_step(ours, optimizer, batches[i]), "eole": eole_step},
                               batches, cfg.train_warmup)  # fmt: skip
    models = {"ours": ours, "eole": trainer.model}
    return {name: {"params": sum(p.numel() for p in m.parameters()), "target_tokens_per_s": rates[name]}
            for name, m in models.items()}  # fmt: skip


def time_speed(saved: dict) -> dict:
    """Training target tokens/s of eole's model and of ours on the saved random batches and, where saved, on
    ``train.py``'s own (``recipe``)."""
    import torch

    result = time_training(saved["config"], saved["batches"])
    if "recipe" in saved:
        result["recipe"] = time_training(saved["recipe"]["config"], saved["recipe"]["batches"])
    result["threads"] = torch.get_num_threads()
    return result


def main(argv: list[str] | None = None) -> None:
    from bench.peers.timing import add_speed_command, run_speed_command

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("spm", help="learn the joint SentencePiece BPE model of a config")
    s.add_argument("config", type=Path)
    t = sub.add_parser("train", help="eole train, stopped and decayed by a time budget")
    t.add_argument("config", type=Path)
    t.add_argument("--minutes", type=float, required=True)
    add_speed_command(sub, "eole")
    args = p.parse_args(argv)
    if args.command == "spm":
        print(json.dumps(learn_spm(args.config)), flush=True)
    elif args.command == "train":
        run_train(args.config, args.minutes)
    else:
        run_speed_command(args, time_speed)


if __name__ == "__main__":
    main()
