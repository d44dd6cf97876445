"""Start TensorBoard with the ATTENTION tab, whether or not the project is installed.

    python -m tensorboard_plugin --logdir runs [--host 127.0.0.1] [--port 6006] [any tensorboard option]

TensorBoard keeps only a sample of the steps of a plugin's summaries (10 or 100 per tag, by loader); this
launcher keeps every logged step of the ATTENTION tab (``--samples_per_plugin attention=0``) unless told
otherwise, so the step slider reaches every validation. With plain ``tensorboard``, pass that option yourself
for runs with more validations than that.
"""

import sys

from tensorboard import default, program

from tensorboard_plugin.metadata import PLUGIN_NAME
from tensorboard_plugin.plugin import AttentionPlugin


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--samples_per_plugin" or a.startswith("--samples_per_plugin=") for a in args):
        args += ["--samples_per_plugin", f"{PLUGIN_NAME}=0"]
    # An installed project already brings the plugin through its entry point: add it only once.
    plugins = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) != PLUGIN_NAME]
    board = program.TensorBoard(plugins=[*plugins, AttentionPlugin])
    board.configure(argv=[sys.argv[0], *args])
    sys.exit(board.main())


if __name__ == "__main__":
    main()
