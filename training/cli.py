"""The command line of ``train.py``: LightningCLI over ``TranslationModule`` and ``TranslationDataModule``.

Every option comes from a typed ``__init__`` argument (``--model.*``, ``--data.*``, ``--trainer.*``,
``--checkpoint.*`` (the best), ``--recent.*`` (the latest epochs and last.ckpt), ``--attention.*``);
``--config FILE.yaml`` reads them from a file. Vocabulary sizes and special ids are linked from the data to
the model, so they are never typed twice. One extra option, ``--resume RUN``, continues a run from its newest
checkpoint.
"""

import sys
import warnings
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from data.corpora import CorpusError
from data.datamodule import TranslationDataModule
from evaluation.run_checkpoints import CHECKPOINT_FOLDER, CheckpointError, newest_checkpoint
from training.attention_logging import AttentionLogger
from training.callbacks import InterruptCheckpoint, SaveTokenizers
from training.module import NonFiniteLossError, TranslationModule
from training.precision import PrecisionChoice, choose_precision, probe_hardware

# Head statistics are computed and logged by rank 0 alone, on purpose.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('heads/")

LINKED_FROM_DATA = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")


class TrainCLI(LightningCLI):
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
        self.precision_choice = resolve_precision(config.trainer.precision, config.trainer.accelerator)
        config.trainer.precision = self.precision_choice.precision
        rank_zero_info(self.precision_choice.describe())

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ValueError, CorpusError, FileNotFoundError) as error:
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
        "callbacks": [InterruptCheckpoint(), SaveTokenizers()],
    }


def resolve_precision(precision: object, accelerator: object) -> PrecisionChoice:
    """``--trainer.precision`` as given, or, when it is not given (None or "auto"), the precision the hardware
    of ``--trainer.accelerator`` trains best in (``training.precision.choose_precision``)."""
    if precision is None or precision == "auto":
        return choose_precision(probe_hardware(accelerator))
    return PrecisionChoice(str(precision), "set by --trainer.precision or the config")


def find_resume_checkpoint(target: str) -> tuple[Path, Path]:
    """The checkpoint to resume from and its run directory, from a checkpoint path, or a run directory: its
    newest weights (``evaluation.run_checkpoints.newest_checkpoint``)."""
    path = Path(target)
    if not path.exists():
        raise SystemExit(f"error: --resume {target}: no such run directory or checkpoint")
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path, run_dir
    try:  # the rule evaluate.py and the ATTENTION tab apply too
        return newest_checkpoint(path / CHECKPOINT_FOLDER), path
    except CheckpointError as error:
        raise SystemExit(f"error: --resume {target}: {error}") from None


def _pop_resume(args: list[str]) -> tuple[list[str], str | None]:
    rest, resume, i = [], None, 0
    while i < len(args):
        if args[i] == "--resume":
            if i + 1 >= len(args):
                raise SystemExit("error: --resume needs a run directory or a checkpoint file")
            resume, i = args[i + 1], i + 2
        elif args[i].startswith("--resume="):
            resume, i = args[i].split("=", 1)[1], i + 1
        else:
            rest.append(args[i])
            i += 1
    return rest, resume


def _auto_precision(args: list[str]) -> list[str]:
    """``--trainer.precision auto`` spelled as Lightning's parser accepts it: null, the hardware's choice."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--trainer.precision=auto":
            out[i] = "--trainer.precision=null"
        elif arg == "auto" and i > 0 and out[i - 1] == "--trainer.precision":
            out[i] = "null"
    return out


def main(args: list[str] | None = None) -> TrainCLI:
    """Parse the command line (``args``, default ``sys.argv[1:]``), build everything and train; the CLI."""
    args, resume = _pop_resume(_auto_precision(list(sys.argv[1:] if args is None else args)))
    checkpoint, save_config_kwargs = None, {}
    # Not LightningCLI's `fit --ckpt_path` (subcommands): it reloads state, not the run's config or logs.
    if resume is not None:
        checkpoint, run_dir = find_resume_checkpoint(resume)
        config = run_dir / "config.yaml"
        if not config.is_file():
            raise SystemExit(f"error: --resume {resume}: {config} is missing")
        version = run_dir.name.removeprefix("version_")
        # The run's own config first, so that options given now override it; logs go to the same directory.
        args = ["--config", str(config), "--trainer.logger.init_args.version", version, *args]
        resumed = sorted(run_dir.glob("config.resumed-*.yaml"))
        save_config_kwargs = {"config_filename": f"config.resumed-{len(resumed) + 1}.yaml"}

    cli = TrainCLI(
        TranslationModule,
        TranslationDataModule,
        args=None if args == sys.argv[1:] else args,  # None: LightningCLI reads sys.argv itself
        run=False,
        trainer_defaults=trainer_defaults(),
        seed_everything_default=1234,
        save_config_kwargs=save_config_kwargs,
        auto_configure_optimizers=False,
        parser_kwargs={"description": "Train an encoder-decoder Transformer for translation."},
    )
    try:
        cli.trainer.fit(
            cli.model, datamodule=cli.datamodule, ckpt_path=None if checkpoint is None else str(checkpoint)
        )
    except (NonFiniteLossError, CorpusError) as error:
        raise SystemExit(f"error: {error}") from None
    if cli.trainer.is_global_zero and cli.trainer.checkpoint_callback is not None:
        best = cli.trainer.checkpoint_callback.best_model_path
        print(f"Run saved in {cli.trainer.logger.log_dir}" + (f"; best checkpoint {best}" if best else ""))
    return cli
