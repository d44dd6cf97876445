"""What the training-curve figures (``alignment_curve.py``, ``explanation_curve.py``) share: their command
line, a run's logged scalars, and the figure written whole.

A bad argument (a folder that is not a run, an output that exists or cannot be drawn) ends in one line on
stderr and exit 2, before anything is read; a figure that cannot be written (a full disk), in one line
naming it and exit 1, with nothing left at its name but what was there before.
"""

import argparse
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import NoReturn

import matplotlib
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EVENT_FILES = "events.out.tfevents.*"  # the names TensorBoard's writers give, Lightning's logger among them
A_RUN = "give a run's folder, such as runs/toy/version_0"


def refuse(message: str) -> NoReturn:
    """A bad argument: one line on stderr, exit 2 (argparse's status for a bad command line)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_arguments(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """``run_dir``, ``output`` (a Path, checked: see ``figure_format``) and ``--overwrite``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run's folder, the one that holds its event files (version_N)")
    parser.add_argument("output", help="the figure's file; its extension is the format (.png, .svg, .pdf)")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    args.output = Path(args.output)
    if args.output.is_dir():
        refuse(f"{args.output} is a folder; give the figure's file name, such as {args.output / 'curve.png'}")
    if args.output.exists() and not args.overwrite:
        refuse(f"{args.output} exists; pass --overwrite to replace it")
    figure_format(args.output)
    return args


def figure_format(output: Path) -> str:
    """The format ``output``'s extension names (matplotlib's default without one); one it cannot write is
    refused."""
    name = output.suffix[1:].lower() or matplotlib.rcParams["savefig.format"]
    known = FigureCanvasBase.get_supported_filetypes()
    if name not in known:
        refuse(f"{output} has an unknown figure format .{name}; use one of .{', .'.join(sorted(known))}")
    return name


def read_scalars(run_dir: str) -> tuple[EventAccumulator, set[str]]:
    """The run's event files, read, and the scalar tags they hold; a folder that is missing, a file, or
    holds no event file is refused in one line naming it (and the runs one or two levels below, if any)."""
    folder = Path(run_dir)
    if not folder.exists():
        refuse(f"{folder}: no such folder; {A_RUN}")
    if not folder.is_dir():
        refuse(f"{folder}: not a folder; {A_RUN}")
    try:
        if not any(folder.glob(EVENT_FILES)):
            below = sorted({str(p.parent.relative_to(folder)) for depth in ("*/", "*/*/")
                            for p in folder.glob(depth + EVENT_FILES)})  # fmt: skip
            runs = f"the runs in it: {', '.join(below[:5])}{', ...' if len(below) > 5 else ''}"
            refuse(f"{folder} holds no TensorBoard event file; {runs if below else A_RUN}")
    except OSError as error:  # a folder one may not list
        refuse(f"{folder}: cannot read it ({error.strerror or error})")
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return events, set(events.Tags()["scalars"])


def save_figure(figure: Figure, output: Path) -> None:
    """Write ``figure`` to ``output`` whole: drawn into a hidden file beside it, which then takes its name.
    A write that fails (a full disk, no permission) is one line naming ``output``, exit 1; the hidden file
    and any folder made for it are removed, and a file already at ``output`` is kept as it was."""
    made = [p for p in (output.parent, *output.parent.parents) if not p.exists()]
    partial = output.with_name(f".{output.name}.{os.getpid()}.part")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(partial, format=figure_format(output))
        os.replace(partial, output)
    except OSError as error:
        with suppress(OSError):
            partial.unlink(missing_ok=True)
            for folder in made:  # deepest first; only those this call made, and only while empty
                folder.rmdir()
        print(f"error: cannot write {output}: {error.strerror or error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"wrote {output}")
