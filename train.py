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

import os
import signal
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import yaml
from jsonargparse import Namespace
from lightning.fabric.utilities.seed import max_seed_value, min_seed_value
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
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
from training.checkpoints import (
    CHECKPOINT_FOLDER,
    RENAMED_DATA_OPTIONS,
    CheckpointError,
    newest_checkpoint,
    open_checkpoint,
    upgrade_data_settings,
)
from training.memory import HostMemory
from training.module import (
    NonFiniteLossError,
    TranslationModule,
    validation_bleu_line,
    validation_bleu_tokenizer,
)
from training.precision import PrecisionChoice, choose_precision, probe_hardware
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


def trainer_setting_problem(trainer: object) -> str | None:
    """What is wrong with the numeric ``--trainer.*`` settings that Lightning would trip over only once
    training began (a division by zero at the first logging step), or not at all (a negative clipping
    threshold flips the gradients); None if nothing. The others it refuses when the Trainer is built."""

    def get(name: str) -> object:
        return getattr(trainer, name, None)

    def is_number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    at_least_one = ("log_every_n_steps", "accumulate_grad_batches", "check_val_every_n_epoch")
    for name in at_least_one:
        value = get(name)
        if is_number(value) and value < 1:
            return f"--trainer.{name} must be at least 1, got {value}"
    interval = get("val_check_interval")
    if is_number(interval) and not interval > 0:
        return f"--trainer.val_check_interval must be positive (a share of an epoch or steps), got {interval}"
    clip = get("gradient_clip_val")
    if is_number(clip) and not 0 <= clip < float("inf"):
        return f"--trainer.gradient_clip_val must be a number >= 0 (0 or null: no clipping), got {clip}"
    seconds = time_limit_seconds(get("max_time"))
    if seconds is not None and seconds <= 0:
        return (
            f"--trainer.max_time {get('max_time')} is a time limit of {seconds:g} seconds: nothing would be "
            "trained (00:01:00:00 is one hour; null: no limit)"
        )
    return None


def time_limit_seconds(max_time: object) -> float | None:
    """``--trainer.max_time`` in seconds, read as Lightning's ``Timer`` reads it; None if it is not set, or
    not readable (the Trainer names a bad one when it is built)."""
    try:
        return Timer(duration=max_time).time_remaining()
    except (MisconfigurationException, TypeError):
        return None


def seed_problem(seed: object) -> str | None:
    """What is wrong with ``--seed_everything``, which numpy takes only from 0 to 2**32 - 1; None if
    nothing."""
    if isinstance(seed, bool) or not isinstance(seed, int) or min_seed_value <= seed <= max_seed_value:
        return None
    return (
        f"--seed_everything must be an integer from {min_seed_value} to {max_seed_value}, "
        f"true (a random seed) or false, got {seed}"
    )


CONFIG_SHAPE = "a config is a YAML mapping of sections (model:, data:, trainer:, ...)"


def config_paths(args: Sequence[str]) -> list[str]:
    """The existing files named by ``--config`` / ``-c`` in ``args`` (others are the parser's business:
    it reads a value that is no file as YAML text, and names a missing file)."""
    values = [args[i + 1] for i in range(len(args) - 1) if args[i] in ("-c", "--config")]
    values += [arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")]
    return [value for value in values if Path(value).is_file()]


def config_file_problem(path: Path, sections: Iterable[str]) -> str | None:
    """What is wrong with a config file that the parser would report with a traceback or without naming the
    file: not text, not YAML, not a mapping, or a ``sections`` entry (``model``, ``trainer``, ...) that is not
    a mapping; None if nothing (the parser checks the options themselves)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not a UTF-8 text file (byte 0x{error.object[error.start]:02x} at position {error.start})"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        return f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    except yaml.YAMLError as error:  # e.g. a control character, found before any YAML structure
        return "not valid YAML: " + " ".join(str(error).split())
    if root is None:
        return f"the file is empty; {CONFIG_SHAPE}"
    if not isinstance(root, yaml.MappingNode):
        return f"{CONFIG_SHAPE}, got {_yaml_kind(root)}"
    for key, value in root.value:
        # A string is the path of the section's own config file, which the parser reads.
        if isinstance(key, yaml.ScalarNode) and key.value in sections and not _is_section(value):
            return f"line {key.start_mark.line + 1}: {key.value} must be a mapping of its options, got " + (
                _yaml_kind(value)
            )
    return None


def renamed_option_problem(args: Sequence[str]) -> str | None:
    """The first data option of ``args`` or of its ``--config`` files spelt as before the toy's and the gold's
    options were grouped (``--data.toy_train_size``, now ``--data.toy.train_size``), with its spelling now;
    None if none. The parser would only say that it does not know the option."""
    for arg in args:
        name = arg.split("=", 1)[0].removeprefix("--data.")
        if arg.startswith("--data.") and name in RENAMED_DATA_OPTIONS:
            return f"--data.{name} is now --data.{'.'.join(RENAMED_DATA_OPTIONS[name])} (CHANGELOG.md)"
    for path in config_paths(args):
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")).get("data")  # checked: a mapping
        options = data.get("init_args", data) if isinstance(data, dict) else None
        if not isinstance(options, dict):
            continue
        old = next((name for name in RENAMED_DATA_OPTIONS if name in options), None)
        if old is not None:
            group, field = RENAMED_DATA_OPTIONS[old]
            return f"--config {path}: data: {old} is now data: {group}: {field} (CHANGELOG.md)"
    return None


def upgraded_run_config(path: Path) -> str:
    """A resumed run's ``config.yaml``: its path, or, where it spells data options as before the toy's and
    the gold's were grouped, its YAML text with today's spellings (``training.checkpoints``)."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return str(path)  # the parser names the problem
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, dict) or not RENAMED_DATA_OPTIONS.keys() & data.keys():
        return str(path)
    config = {**config, "data": upgrade_data_settings(data)}
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def _is_section(node: yaml.Node) -> bool:
    return isinstance(node, yaml.MappingNode) or node.tag == "tag:yaml.org,2002:str"


def _yaml_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.tag == "tag:yaml.org,2002:null":
        return "nothing"
    return node.value


def resolve_precision(precision: object, accelerator: object, devices: object = "auto") -> PrecisionChoice:
    """``--trainer.precision`` as given, or, when it is not given (None or "auto"), the precision the hardware
    of ``--trainer.accelerator`` and ``--trainer.devices`` trains best in
    (``training.precision.choose_precision``)."""
    if precision is None or precision == "auto":
        return choose_precision(probe_hardware(accelerator, devices))
    return PrecisionChoice(str(precision), "set by --trainer.precision or the config")


def accept_auto_precision(parser: LightningArgumentParser) -> None:
    """Let ``trainer.precision`` take "auto" (the hardware's choice, as null does) on the command line and in
    a YAML config: Lightning's own type of the option does not list it."""
    for action in parser._actions:
        if action.dest == "trainer.precision" and hasattr(action, "_typehint"):
            action._typehint = Literal["auto"] | action._typehint


def find_resume_checkpoint(target: str) -> tuple[Path, Path]:
    """The checkpoint to resume from and its run directory, from a checkpoint path, or a run directory: its
    newest weights (``training.checkpoints.newest_checkpoint``)."""
    path = Path(target)
    if not path.exists():
        raise SystemExit(f"error: --resume {target}: no such run directory or checkpoint")
    if path.is_file():
        try:  # refused at once, as evaluate.py and the ATTENTION tab refuse it: not a checkpoint, a zip bomb
            open_checkpoint(path).close()
        except CheckpointError as error:  # its message starts with the path
            raise SystemExit(f"error: --resume {error}") from None
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path, run_dir
    try:  # the rule evaluate.py and the ATTENTION tab apply too
        return newest_checkpoint(path / CHECKPOINT_FOLDER), path
    except CheckpointError as error:
        raise SystemExit(f"error: --resume {target}: {error}") from None


def write_into(config: Namespace, run_dir: Path) -> None:
    """Point the logger, the checkpoint callbacks and the root folder of a parsed ``config`` at ``run_dir``: a
    resumed run goes on in the folder it was resumed from, even one moved since or named from another working
    directory, not in the ``save_dir/name/version`` its config.yaml recorded."""
    run_dir = Path(os.path.abspath(run_dir))  # a relative path may have no parent to be save_dir/name
    logger = config.trainer.logger
    if isinstance(logger, Namespace) and "save_dir" in logger.get("init_args", {}):
        logger.init_args.save_dir, logger.init_args.name = str(run_dir.parent.parent), run_dir.parent.name
        logger.init_args.version = run_dir.name  # a string: the folder's own name, not version_{int}
    for callback in ("checkpoint", "recent"):
        config[callback].dirpath = str(run_dir / CHECKPOINT_FOLDER)
    config.trainer.default_root_dir = str(run_dir)


@rank_zero_only  # the other processes of a distributed run start when rank 0 has begun writing there
def refuse_a_folder_that_holds_a_run(trainer: Trainer) -> None:
    """Stop with one line if a new run would write into the folder of another (``--trainer.logger.init_args
    .version`` given one that exists): Lightning's config saving would stop it with a traceback, and a run
    folder without a config would have its checkpoints overwritten. Without a logger (``--trainer.logger
    false``) the run's folder is ``--trainer.default_root_dir``."""
    if trainer.logger is None:
        run_dir, option = Path(trainer.default_root_dir), "--trainer.default_root_dir"
    elif trainer.logger.log_dir is None:
        return
    else:
        run_dir, option = Path(trainer.logger.log_dir), "--trainer.logger.init_args.version"
    if (run_dir / "config.yaml").exists() or any((run_dir / CHECKPOINT_FOLDER).glob("*.ckpt")):
        raise SystemExit(
            f"error: {run_dir} already holds a run; pick another {option} "
            f"or resume it with --resume {run_dir}"
        )


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
    args, resume = _pop_resume(args)
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
