"""train.py's command line around LightningCLI: what is refused before Lightning or jsonargparse would trip
over it (with a traceback, at the first logging step, or not at all), the precision the hardware chooses, and
``--resume``, which continues a run in its own folder.

Each ``*_problem`` function returns the one line that says what is wrong, or None; train.py turns it into the
parser's error.
"""

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import yaml
from jsonargparse import Namespace
from lightning.fabric.utilities.seed import max_seed_value, min_seed_value
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from training.checkpoints import (
    CHECKPOINT_FOLDER,
    RENAMED_DATA_OPTIONS,
    CheckpointError,
    newest_checkpoint,
    open_checkpoint,
    upgrade_data_settings,
)
from training.precision import PrecisionChoice, choose_precision, probe_hardware


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


def config_paths(argv: Sequence[str]) -> list[str]:
    """The existing files named by ``--config`` / ``-c`` in ``argv`` (others are the parser's business:
    it reads a value that is no file as YAML text, and names a missing file)."""
    values = [argv[i + 1] for i in range(len(argv) - 1) if argv[i] in ("-c", "--config")]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
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


def renamed_option_problem(argv: Sequence[str]) -> str | None:
    """The first data option of ``argv`` or of its ``--config`` files spelt as before the toy's and the gold's
    options were grouped (``--data.toy_train_size``, now ``--data.toy.train_size``), with its spelling now;
    None if none. The parser would only say that it does not know the option."""
    for arg in argv:
        name = arg.split("=", 1)[0].removeprefix("--data.")
        if arg.startswith("--data.") and name in RENAMED_DATA_OPTIONS:
            return f"--data.{name} is now --data.{'.'.join(RENAMED_DATA_OPTIONS[name])} (CHANGELOG.md)"
    for path in config_paths(argv):
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


def pop_resume(argv: list[str]) -> tuple[list[str], str | None]:
    rest, resume, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--resume":
            if i + 1 >= len(argv):
                raise SystemExit("error: --resume needs a run directory or a checkpoint file")
            resume, i = argv[i + 1], i + 2
        elif argv[i].startswith("--resume="):
            resume, i = argv[i].split("=", 1)[1], i + 1
        else:
            rest.append(argv[i])
            i += 1
    return rest, resume
