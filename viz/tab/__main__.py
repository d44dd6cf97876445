"""Start TensorBoard with the ATTENTION tab, whether or not the project is installed.

    python -m viz.tab --logdir runs [--host 127.0.0.1] [--port 6006] [any tensorboard option]

TensorBoard keeps only a sample of the steps of a plugin's summaries (10 or 100 per tag, by loader); this
launcher keeps every logged step of the ATTENTION tab (``--samples_per_plugin attention=0``) unless told
otherwise, so the step slider reaches every validation. With plain ``tensorboard``, pass that option yourself
for runs with more validations than that.
"""

import sys
from importlib.metadata import entry_points

from tensorboard import default, program
from tensorboard.plugins.base_plugin import FlagsError

from viz.tab.metadata import PLUGIN_NAME
from viz.tab.plugin import AttentionPlugin


def other_plugins() -> list:
    """TensorBoard's own plugins and every installed one but this tab, which ``main`` adds from this source.

    An installed project brings the tab through its entry point too; that one is never loaded, so that the tab
    is added once, and so that an install older than the source (one whose entry point names a module that has
    since moved) cannot stop TensorBoard from starting.
    """
    installed = [ep.load() for ep in entry_points(group="tensorboard_plugins") if ep.name != PLUGIN_NAME]
    installed = [p for p in installed if getattr(p, "plugin_name", None) != PLUGIN_NAME]
    return default.get_static_plugins() + installed


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--samples_per_plugin" or a.startswith("--samples_per_plugin=") for a in args):
        args += ["--samples_per_plugin", f"{PLUGIN_NAME}=0"]
    board = program.TensorBoard(plugins=[*other_plugins(), AttentionPlugin])
    try:
        board.configure(argv=[sys.argv[0], *args])
    except FlagsError as error:  # no --logdir, or options that contradict each other
        print(f"python -m viz.tab: error: {error} (usage: python -m viz.tab --logdir runs)", file=sys.stderr)
        sys.exit(2)
    sys.exit(board.main())


if __name__ == "__main__":
    main()
