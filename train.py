"""Train the Transformer. With no options: the default model on the built-in toy translation data.

    python train.py                                   # toy data, default model
    python train.py --config configs/multi30k.yaml    # a real corpus
    python train.py --model.num_heads 8 --trainer.max_epochs 3
    python train.py --resume runs/toy/version_0       # continue a run from its newest checkpoint
    python train.py --help                            # every option

The run is assembled here, at the top of the import graph: LightningCLI over ``TranslationModule``
(training/) and ``TranslationDataModule`` (data/), with viz/'s ``AttentionLogger`` among the callbacks.
Every option comes from a typed ``__init__`` argument (``--model.*``, ``--data.*``, ``--trainer.*``,
``--checkpoint.*`` (the best), ``--recent.*`` (the latest epochs and last.ckpt), ``--attention.*``);
``--config FILE.yaml`` reads them from a file. Vocabulary sizes and special ids are linked from the data to
the model, so they are never typed twice. One extra option, ``--resume RUN``, continues a run from its newest
checkpoint. ``main(args)`` runs the same in-process (the tests and the tour notebook call it).
"""

import signal
import sys
import warnings
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from analysis.metrics import bleu_metric
from data.corpora import CorpusError
from data.datamodule import TranslationDataModule
from training.callbacks import (
    EpochLength,
    SaveTokenizers,
    plain_progress_unless_terminal,
)
from training.checkpoint_io import (
    AtomicCheckpointIO,
    ExactResume,
    InterruptCheckpoint,
    check_resume_checkpoint,
    check_save_folders,
    install_sigterm_handling,
)
from training.checkpoints import CheckpointError
from training.cli import (
    accept_auto_precision,
    config_file_problem,
    config_paths,
    find_resume_checkpoint,
    pop_resume,
    refuse_a_folder_that_holds_a_run,
    renamed_option_problem,
    resolve_precision,
    seed_problem,
    trainer_setting_problem,
    upgraded_run_config,
    write_into,
)
from training.memory import HostMemory, bound_kernel_cache
from training.module import (
    NonFiniteLossError,
    TranslationModule,
    validation_bleu_line,
    validation_bleu_tokenizer,
)
from viz.logger import AttentionLogger

# Head statistics are computed and logged by rank 0 alone, on purpose.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('heads/")

LINKED_FROM_DATA = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")


class TrainCLI(LightningCLI):
    def __init__(self, *args, resume_dir: Path | None = None, **kwargs) -> None:
        self.resume_dir = resume_dir  # the run --resume continues: it writes there, whatever its config says
        super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs) -> LightningArgumentParser:
        parser = super().init_parser(**kwargs)
        # A refused setting is its one error line (after jsonargparse's tip to run --help), not the usage of
        # every option first: about 130 lines that push the reason off the screen.
        parser.print_usage = lambda file=None: None
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-epoch{epoch}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        # The most recent epoch checkpoints too, for averaging (evaluate.py --average-last K), and last.ckpt.
        # last.ckpt belongs here: Lightning rewrites it only where its callback saved a top-k checkpoint at
        # that step, so with the val/loss callback it would stay at the best epoch when the last is worse.
        parser.add_lightning_class_args(ModelCheckpoint, "recent")
        parser.set_defaults(
            {
                "recent.monitor": "step",
                "recent.mode": "max",
                "recent.save_last": True,
                "recent.save_top_k": 5,
                "recent.filename": "epoch{epoch}-step{step}",
                "recent.auto_insert_metric_name": False,
            }
        )
        parser.add_lightning_class_args(AttentionLogger, "attention")
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")
        accept_auto_precision(parser)

    def parse_arguments(self, parser: LightningArgumentParser, args: list[str]) -> None:
        # The files first: the parser would stop on a broken one with a traceback, or without naming it.
        for path in config_paths(args):
            problem = config_file_problem(Path(path), sections=parser.groups)
            if problem is not None:
                parser.error(f"--config {path}: {problem}")
        problem = renamed_option_problem(args)
        if problem is not None:
            parser.error(problem)
        # main() always hands over the command line itself (sys.argv less --resume, plus the run's config):
        # Lightning's warning about args given beside a command line is for callers who give both by mistake.
        self.config = parser.parse_args(args)
        # Here: LightningCLI seeds before before_instantiate_classes, and numpy refuses with a traceback.
        problem = seed_problem(self.config.get("seed_everything"))
        if problem is not None:
            parser.error(problem)

    def before_instantiate_classes(self) -> None:
        config = self.config
        decoded = ("val/bleu", "val/chrf", "val/exact_match")
        if config.checkpoint.monitor in decoded and config.model.decode_every_n_epochs != 1:
            # ModelCheckpoint would stop the run at the first epoch without the metric.
            self.parser.error(
                f"--checkpoint.monitor {config.checkpoint.monitor} needs --model.decode_every_n_epochs 1 "
                f"(got {config.model.decode_every_n_epochs}): it is computed only in epochs that decode"
            )
        if config.model.schedule == "cosine_time" and config.trainer.max_time is None:
            self.parser.error(
                "--model.schedule cosine_time decays the learning rate over the time budget: "
                "set --trainer.max_time too (e.g. 00:01:00:00 for one hour)"
            )
        problem = trainer_setting_problem(config.trainer)
        if problem is not None:
            self.parser.error(problem)
        if self.resume_dir is not None:
            write_into(config, self.resume_dir)
        if config.trainer.fast_dev_run:
            # A fast dev run saves nothing, but Lightning's save_last writes last.ckpt at its end all the
            # same, under the working folder (the run has no log folder).
            config.checkpoint.save_last = config.recent.save_last = False
        # Resolved here, in the launching process, and handed to the Trainer alone: the saved config keeps
        # "auto" (or null), so that --resume on another machine chooses again for that machine's hardware.
        self.precision_choice = resolve_precision(
            config.trainer.precision, config.trainer.accelerator, config.trainer.devices
        )
        rank_zero_info(self.precision_choice.describe())

    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**{"precision": self.precision_choice.precision, **kwargs})
        # Last, so that its release and reading at a validation's end follow the attention logger's work.
        trainer.callbacks.append(HostMemory())
        plain_progress_unless_terminal(trainer)  # a redirected log gets lines: the rich bar writes none there
        install_sigterm_handling(trainer)
        return trainer

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ValueError, CorpusError, FileNotFoundError, MisconfigurationException) as error:
            self.parser.error(str(error))


def trainer_defaults() -> dict:
    return {
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": "runs", "name": "toy", "default_hp_metric": False},
        },
        "accelerator": "auto",
        "devices": "auto",
        "precision": None,  # None: chosen by the hardware (resolve_precision)
        "max_epochs": 6,
        "gradient_clip_val": 1.0,
        "log_every_n_steps": 20,
        "use_distributed_sampler": False,  # the token-bucket batch sampler shards batches across ranks itself
        "callbacks": [InterruptCheckpoint(), ExactResume(), SaveTokenizers(), EpochLength()],
        # Each checkpoint written whole or not at all: a full disk never truncates the last good one.
        "plugins": [{"class_path": f"{AtomicCheckpointIO.__module__}.{AtomicCheckpointIO.__qualname__}"}],
    }


def main(args: list[str] | None = None) -> TrainCLI:
    """Parse the command line (``args``, default ``sys.argv[1:]``), build everything and train; the CLI.

    Exits with 130 or 143 (128 + the signal's number, the shell's convention) when Ctrl-C or SIGTERM stopped
    the run (after saving ``interrupted.ckpt``), with 2 and a one-line message on a bad option, with 1 and one
    on bad input found later (a corpus line, a checkpoint).
    """
    try:
        return _main(list(sys.argv[1:] if args is None else args))
    except KeyboardInterrupt:  # before or after training; one during training is handled by Lightning
        print("Interrupted.", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None


def _main(args: list[str]) -> TrainCLI:
    bound_kernel_cache()  # before the first matrix product
    args, resume = pop_resume(args)
    checkpoint, run_dir, save_config_kwargs = None, None, {}
    # Not LightningCLI's `fit --ckpt_path` (subcommands): it reloads state, not the run's config or logs.
    if resume is not None:
        checkpoint, run_dir = find_resume_checkpoint(resume)
        config = run_dir / "config.yaml"
        if not config.is_file():
            raise SystemExit(f"error: --resume {resume}: {config} is missing")
        # The run's own config first, so that options given now override it; logs go to run_dir (write_into).
        args = ["--config", upgraded_run_config(config), *args]
        resumed = sorted(run_dir.glob("config.resumed-*.yaml"))
        save_config_kwargs = {"config_filename": f"config.resumed-{len(resumed) + 1}.yaml"}

    cli = TrainCLI(
        TranslationModule,
        TranslationDataModule,
        args=args,
        run=False,
        trainer_defaults=trainer_defaults(),
        seed_everything_default=1234,
        save_config_kwargs=save_config_kwargs,
        resume_dir=run_dir,
        auto_configure_optimizers=False,
        parser_kwargs={"description": "Train an encoder-decoder Transformer for translation."},
    )
    # Checked here: fit writes the (resumed) config and opens an event file in the run's directory at once.
    if checkpoint is None:
        refuse_a_folder_that_holds_a_run(cli.trainer)
        start_step = 0
    else:
        start_step = check_resume_checkpoint(checkpoint, cli.model)
    check_save_folders(cli.trainer)
    problem = cli.model.alignment_problem(cli.datamodule)  # guided alignment's head and labels, together
    if problem is not None:
        raise SystemExit(f"error: {problem}")
    try:  # validation's BLEU: ja-mecab and ko-mecab need packages of their own
        bleu_metric(validation_bleu_tokenizer(cli.datamodule))
        rank_zero_info(validation_bleu_line(cli.datamodule))
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    interrupt = next((c for c in cli.trainer.callbacks if isinstance(c, InterruptCheckpoint)), None)
    try:
        cli.trainer.fit(
            cli.model, datamodule=cli.datamodule, ckpt_path=None if checkpoint is None else str(checkpoint)
        )
    except (NonFiniteLossError, CorpusError, CheckpointError) as error:
        # Every rank of a distributed run raises together (see TranslationModule); rank 0 alone says why.
        raise SystemExit(f"error: {error}" if cli.trainer.is_global_zero else 1) from None
    except SystemExit:  # Lightning's after Ctrl-C (status 1) or SIGTERM (status 0)
        if interrupt is not None and interrupt.signal is not None:
            raise SystemExit(128 + interrupt.signal) from None
        raise
    if cli.trainer.is_global_zero:
        print(_outcome(cli.trainer, start_step))
    return cli


def _outcome(trainer, start_step: int) -> str:
    """The line a finished run ends with: where it was saved, or that nothing was trained and why."""
    if trainer.fast_dev_run:
        runs = int(trainer.fast_dev_run)
        times = "once" if runs == 1 else f"{runs} times"
        return (
            f"Fast dev run (--trainer.fast_dev_run {runs}): a training and a validation step ran {times} "
            "each; nothing was saved."
        )
    if trainer.global_step == start_step:
        limits = f"--trainer.max_epochs {trainer.max_epochs}, --trainer.max_steps {trainer.max_steps}"
        if start_step == 0:
            return f"Nothing was trained ({limits}): no checkpoint was saved."
        return (
            f"Nothing was trained: the run had already reached its limits ({limits}) at step {start_step}; "
            "raise them to train on."
        )
    # The best by a metric: not trainer.checkpoint_callback, the first ModelCheckpoint, which may be one added
    # with --trainer.callbacks that keeps checkpoints by step (and calls the newest "best").
    by_metric = [c for c in trainer.checkpoint_callbacks if c.monitor not in (None, "step")]
    best = by_metric[0].best_model_path if by_metric else ""
    where = trainer.logger.log_dir if trainer.logger is not None else trainer.default_root_dir
    return f"Run saved in {where}" + (f"; best checkpoint {best}" if best else "")


if __name__ == "__main__":
    main()
