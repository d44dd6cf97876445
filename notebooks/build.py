"""Build ``tour.ipynb`` from ``tour.py``, the tour's one source, written in jupytext's percent format.

    python notebooks/build.py            # rewrite notebooks/tour.ipynb (no outputs)
    python notebooks/build.py --check    # exit 1 if tour.ipynb is not what tour.py builds

The script is the source because it reads and diffs as code; the notebook is what learners open. Cells
start at ``# %%`` (code) or ``# %% [markdown]`` (markdown, each line commented with ``# ``); lines before the
first cell marker are the script's own and stay out of the notebook. As jupytext writes them, IPython
magics are commented in the script (``# %load_ext tensorboard``) and uncommented in the notebook. Cell ids
are numbered, so the same script always builds the same file (tests/test_notebook.py checks the two agree).
"""

import re
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SOURCE, NOTEBOOK = HERE / "tour.py", HERE / "tour.ipynb"

_MARKER = re.compile(r"^# %%(?P<rest>.*)$")
_MAGIC = re.compile(r"^(?P<indent>\s*)# (?P<magic>%{1,2}[A-Za-z_].*)$")
_METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def _cell_type(rest: str, line_number: int) -> str:
    kind = rest.strip()
    if kind == "":
        return "code"
    if kind == "[markdown]":
        return "markdown"
    raise ValueError(f"{SOURCE.name}:{line_number}: unknown cell marker '# %%{rest}' (use '# %%' or "
                     "'# %% [markdown]')")


def _markdown(lines: list[str], start: int) -> str:
    out = []
    for offset, line in enumerate(lines):
        if line == "#":
            out.append("")
        elif line.startswith("# "):
            out.append(line[2:])
        else:
            raise ValueError(f"{SOURCE.name}:{start + offset}: a markdown line must start with '# ', got "
                             f"{line!r}")
    return "\n".join(out)


def _code(lines: list[str]) -> str:
    return "\n".join(
        m["indent"] + m["magic"] if (m := _MAGIC.match(line)) else line for line in lines
    )


def build(text: str) -> nbformat.NotebookNode:
    """The notebook a percent-format script describes: its cells in order, without outputs."""
    cells: list[tuple[str, int, list[str]]] = []  # (cell type, first line number, lines)
    for number, line in enumerate(text.splitlines(), start=1):
        if marker := _MARKER.match(line):
            cells.append((_cell_type(marker["rest"], number), number + 1, []))
        elif cells:
            cells[-1][2].append(line)
    if not cells:
        raise ValueError(f"{SOURCE.name}: no '# %%' cell marker")
    notebook = nbformat.v4.new_notebook(metadata=_METADATA)
    for index, (kind, start, lines) in enumerate(cells):
        while lines and not lines[-1].strip():  # the blank lines that separate cells in the script
            lines.pop()
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(_markdown(lines, start))
        else:
            cell = nbformat.v4.new_code_cell(_code(lines))
        cell["id"] = f"cell-{index:02d}"
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def render(text: str) -> str:
    """The .ipynb file's text for a script: nbformat's own layout, with a final newline."""
    return nbformat.writes(build(text)) + "\n"


def main(argv: list[str]) -> int:
    expected = render(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if not NOTEBOOK.is_file() or NOTEBOOK.read_text(encoding="utf-8") != expected:
            print(f"{NOTEBOOK} is out of date: run python notebooks/build.py", file=sys.stderr)
            return 1
        return 0
    NOTEBOOK.write_text(expected, encoding="utf-8")
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
