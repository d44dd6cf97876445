"""The parts of the eole comparison that import eole: run with the Python of eole's virtual environment
(``bench/eole_baseline.py`` creates it), never with the project's own.

    VENV/bin/python bench/eole_venv.py spm CONFIG                 # the joint SentencePiece BPE of a config
    VENV/bin/python bench/eole_venv.py train CONFIG --minutes 60  # `eole train`, stopped and decayed in time

``spm`` learns the SentencePiece model that the config's ``sentencepiece`` transform reads, on the training
sentences of both languages (the role of ``spm_train`` in eole's ``recipes/wmt17/prepare_wmt_ende_data.sh``).

``train`` runs ``eole train --config CONFIG`` with two changes to eole's training loop, for this process only:

- a time budget: eole has none (``train_steps`` only). The clock starts when the first batch is drawn (the
  line ``TRAINING_STARTED`` is printed then); once ``--minutes`` have passed, or on SIGINT (the watchdog of
  ``bench/peers.py``), no more batches are drawn, and eole's loop ends as it does at ``train_steps``: it saves
  the current weights. (On an uncaught SIGINT eole logs "Training interrupted" and saves nothing.)
- the learning rate: linear warm-up for ``warmup_steps``, then this project's ``cosine_time`` schedule
  (``training/schedule.py``), a cosine that reaches zero when the time budget runs out, its length in updates
  estimated from the pace so far. eole's own ``cosine`` decays over ``train_steps``, a number of updates that
  cannot be known before the hour.
"""

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/eole_venv.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TRAINING_STARTED = "eole training clock started"  # bench/eole_baseline.py's watchdog waits for this line


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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("spm", help="learn the joint SentencePiece BPE model of a config")
    s.add_argument("config", type=Path)
    t = sub.add_parser("train", help="eole train, stopped and decayed by a time budget")
    t.add_argument("config", type=Path)
    t.add_argument("--minutes", type=float, required=True)
    args = p.parse_args(argv)
    if args.command == "spm":
        import json

        print(json.dumps(learn_spm(args.config)), flush=True)
    else:
        run_train(args.config, args.minutes)


if __name__ == "__main__":
    main()
