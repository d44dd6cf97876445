"""The guided tour: notebooks/tour.ipynb is what notebooks/tour.py builds, carries no outputs, and runs top to
bottom in a Jupyter kernel (its cells assert what they show, so running it is the test)."""

import base64
import re

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (pip install nbformat)")

from notebooks.build import NOTEBOOK, SOURCE, build, render


def test_committed_notebook_is_what_the_script_builds():
    assert NOTEBOOK.read_text(encoding="utf-8") == render(SOURCE.read_text(encoding="utf-8")), (
        "notebooks/tour.ipynb is out of date: run python notebooks/build.py"
    )


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) > 10
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)


def test_build_splits_cells_and_uncomments_magics():
    script = (
        "# lint settings, not part of the notebook\n"
        "\n"
        "# %% [markdown]\n"
        "# # Title\n"
        "#\n"
        "# Text with `code`.\n"
        "\n"
        "# %%\n"
        "# %load_ext tensorboard\n"
        "if x:\n"
        "    # %tensorboard --logdir $RUNS\n"
        "    # an ordinary comment\n"
        "    pass\n"
        "\n"
        "\n"
    )
    notebook = build(script)
    assert [cell.cell_type for cell in notebook.cells] == ["markdown", "code"]
    assert notebook.cells[0].source == "# Title\n\nText with `code`."
    assert notebook.cells[1].source == (
        "%load_ext tensorboard\nif x:\n    %tensorboard --logdir $RUNS\n    # an ordinary comment\n    pass"
    )
    assert [cell.id for cell in notebook.cells] == ["cell-00", "cell-01"]
    assert render(script) == render(script)  # the same script, the same file


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("print(1)\n", "no '# %%' cell marker"),
        ("# %% [raw]\nx\n", "tour.py:1: unknown cell marker"),
        ("# %% [markdown]\n# fine\nnot a comment\n", "tour.py:3: a markdown line must start with '# '"),
    ],
)
def test_build_names_the_line_of_a_malformed_script(script, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(script)


@pytest.mark.slow
@pytest.mark.notebook
def test_tour_runs_top_to_bottom(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient", reason="running the tour needs nbclient: pip install nbclient")
    pytest.importorskip("ipykernel", reason="running the tour needs ipykernel: pip install ipykernel")
    # Training writes under tmp_path, and the TensorBoard cell does not start a server that would outlive us.
    monkeypatch.setenv("TOUR_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("TOUR_SKIP_TENSORBOARD", "1")
    monkeypatch.delenv("TOUR_TRAIN_SECONDS", raising=False)  # the tour as a learner runs it: a minute
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    try:
        client.execute()
    finally:  # kept for a look at what it showed, failed or not
        nbformat.write(notebook, tmp_path / "tour.executed.ipynb")

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pictures = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    # masks, untrained cross, curves, 3 trained grids, agreement, best head, 3 importance maps
    assert len(pictures) == 11
    assert all(base64.b64decode(p).startswith(b"\x89PNG") for p in pictures)
    text = "".join(o.get("text", "") for o in outputs)
    assert "best-aligned head: cross layer" in text
    assert "TOUR_SKIP_TENSORBOARD=1: TensorBoard not started." in text
    assert list((tmp_path / "runs" / "tiny").glob("version_*/checkpoints/last.ckpt"))
