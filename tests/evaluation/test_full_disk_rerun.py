"""A full disk in the middle of evaluate.py's writing: one line naming what could not be written, no
traceback (not even a writer thread's), and nothing of the failed invocation left, so that the same command
runs again as it was, without --overwrite. A full disk is simulated by making the write raise ENOSPC, as the
operating system does: the file is made, then the write fails, naming no file."""

import errno
import os
from pathlib import Path

import pytest

from tests.conftest import run_evaluate


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fill_the_disk_at_figure(monkeypatch, name_part: str) -> None:
    """The first figure whose file name holds ``name_part`` meets a full disk: made, then not written."""
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def full(figure, path, *args, **kwargs):
        if name_part in Path(path).name:
            Path(path).write_bytes(b"\x89PNG half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", full)


# -- an analysis: all of its files, or none ---------------------------------------------------------------


def test_a_full_disk_at_the_last_heatmap_leaves_no_file_of_the_analysis(tiny_run, tmp_path, capsys,
                                                                      monkeypatch):
    """The JSON and the first heatmaps were written before the disk filled: they stayed, and the same
    command then stopped at once, asking for --overwrite."""
    out = tmp_path / "analysis"
    command = (tiny_run / "checkpoints" / "last.ckpt", "--head-importance", "--importance-sentences", "2",
               "--analysis-out", out, "--quiet")
    with monkeypatch.context() as patch:
        fill_the_disk_at_figure(patch, "_cross")  # the last of the three heatmaps
        code, _, err = run_evaluate(capsys, *command)
    figure = out / "head_importance_test_cross.png"
    assert (code, err.strip()) == (1, f"error: {figure}: No space left on device")
    assert tree(out) == {}  # neither the JSON nor the encoder's and decoder's heatmaps, nor a staged file

    code, _, err = run_evaluate(capsys, *command)  # room again: the same command, no --overwrite
    assert code == 0, err
    assert sorted(tree(out)) == [f"head_importance_test{end}" for end in
                                 (".json", "_cross.png", "_decoder.png", "_encoder.png")]


def test_a_failed_analysis_under_overwrite_puts_back_the_files_it_replaced(tiny_run, tmp_path, capsys,
                                                                          monkeypatch):
    """--overwrite replaces an earlier analysis only once the new one is whole: the files it had replaced
    before the disk filled are put back as they were, and a file of the user's beside them is untouched."""
    out = tmp_path / "analysis"
    command = (tiny_run / "checkpoints" / "last.ckpt", "--head-importance", "--importance-sentences", "2",
               "--analysis-out", out, "--quiet")
    code, _, err = run_evaluate(capsys, *command)
    assert code == 0, err
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    (out / "head_importance_test.json").write_text("{}\n", encoding="utf-8")  # told apart from a new one
    before = tree(out)
    with monkeypatch.context() as patch:
        fill_the_disk_at_figure(patch, "_cross")
        code, _, err = run_evaluate(capsys, *command, "--overwrite")
    assert code == 1 and "No space left on device" in err
    assert tree(out) == before


def test_a_full_disk_at_a_sentence_figure_leaves_no_file_of_the_explanations(tiny_run, tmp_path, capsys,
                                                                           monkeypatch):
    """explain writes its JSON and the lenses' JSON before its figures."""
    out = tmp_path / "analysis"
    command = ("explain", tiny_run / "checkpoints" / "last.ckpt", "--methods", "attention", "--split", "val",
               "--alignment-sentences", "2", "--analysis-out", out, "--quiet")
    with monkeypatch.context() as patch:
        fill_the_disk_at_figure(patch, "_sentence2.png")
        code, _, err = run_evaluate(capsys, *command)
    figure = out / "alignment_methods_val_sentence2.png"
    assert (code, err.strip()) == (1, f"error: {figure}: No space left on device")
    assert tree(out) == {}
    code, _, err = run_evaluate(capsys, *command)
    assert code == 0, err
    assert "alignment_methods_val.json" in tree(out)


def test_an_interrupt_while_a_file_is_written_leaves_no_staged_file(tiny_run, tmp_path, capsys,
                                                                     monkeypatch):
    """Ctrl-C in the middle of a heatmap: no hidden half file beside the analysis, nothing else of it."""
    from matplotlib.figure import Figure

    def interrupted(figure, path, *args, **kwargs):
        Path(path).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    out = tmp_path / "analysis"
    code, _, err = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--head-importance",
                                "--importance-sentences", "2", "--analysis-out", out, "--quiet")
    assert (code, err.strip()) == (130, "Interrupted.")
    assert tree(out) == {}


# -- make-run: TensorBoard's event file ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(a tiny Marian model's folder, a TSV of its pairs), as test_import_marian_run.py makes them."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests.helpers.marian_model import ENGLISH, GERMAN, save_marian

    folder = tmp_path_factory.mktemp("marian_full_disk")
    save_marian(folder / "opus-mt-de-en", seed=1)
    tsv = folder / "de_en.tsv"
    tsv.write_text("".join(f"{g}\t{e}\n" for g, e in zip(GERMAN, ENGLISH)), encoding="utf-8")
    return folder / "opus-mt-de-en", tsv


def test_a_full_disk_as_make_run_writes_its_events_is_one_line_naming_the_file(marian, tmp_path, capsys,
                                                                                monkeypatch):
    """TensorBoard writes events in a thread of its own, which printed its OSError's traceback before
    evaluate.py's line, and that line named no file."""
    import threading

    from tensorboard.compat.tensorflow_stub.io.gfile import LocalFileSystem

    write = LocalFileSystem._write

    def full(self, filename, content, mode):
        name = os.fsdecode(filename)
        if ".tfevents." in name:
            open(name, "ab").close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(self, filename, content, mode)

    printed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args))  # a thread's traceback
    model, tsv = marian
    out = tmp_path / "logs" / "made"
    with monkeypatch.context() as patch:
        patch.setattr(LocalFileSystem, "_write", full)
        code, _, err = run_evaluate(capsys, "make-run", model, out, "--tsv", tsv, "--quiet")
    for thread in threading.enumerate():  # a writer thread that failed has ended, or ends now
        if thread is not threading.current_thread() and thread.daemon:
            thread.join(timeout=5)
    assert code == 1
    assert printed == []
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"error: {out}: No space left on device; nothing of "
                                            "the run was kept")
    assert list(out.parent.iterdir()) == []  # nothing of the run, no staging folder

    code, _, err = run_evaluate(capsys, "make-run", model, out, "--tsv", tsv, "--quiet")
    assert code == 0, err
    assert [p.name for p in out.parent.iterdir()] == ["made"]
    assert len(list(out.glob("events.out.tfevents.*"))) == 1

