"""bench/alignment_curve.py, bench/explanation_curve.py and bench/bleu_curve.py: a figure from a run's
logged scalars, or a one-line refusal naming the folder or file (exit 2 for a bad argument, 1 for a write that
failed); no traceback, and no partial figure left behind."""

import errno
import importlib

import pytest

SCRIPTS = ("bench.alignment_curve", "bench.explanation_curve", "bench.bleu_curve")
ALIGNMENT_TAGS = ("heads/best_alignment", "heads/best_aer", "val/exact_match")


def log_scalars(folder, tags):
    """An event file in ``folder`` holding three steps of each tag, written by torch's TensorBoard writer."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in (10, 20, 30):
        for tag in tags:
            writer.add_scalar(tag, step / 40, step)
    writer.close()


def refusal(capsys, script, *argv):
    """(exit code, stderr) of the script's main(argv), which must end in a SystemExit."""
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(script).main([str(a) for a in argv])
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_folder_that_is_not_a_run_is_one_line_naming_it(script, tmp_path, capsys):
    runs = tmp_path / "runs"
    log_scalars(runs / "version_0", ["train/loss"])  # a run, one level down, that logs none of the curves
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("not a run\n")
    output = tmp_path / "curve.png"
    cases = {
        tmp_path / "missing": "no such folder",
        tmp_path / "a_file": "not a folder",
        tmp_path / "empty": "holds no TensorBoard event file",
        runs: "holds no TensorBoard event file; the runs in it: version_0",
        runs / "version_0": "has no ",
    }
    for folder, words in cases.items():
        code, err = refusal(capsys, script, folder, output)
        assert code == 2
        assert len(err.splitlines()) == 1 and err.startswith(f"error: {folder}") and words in err, err
        assert "Traceback" not in err
    assert not output.exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_output_it_cannot_draw_is_refused_before_the_run_is_read(script, tmp_path, capsys):
    folder = tmp_path / "out.png"
    folder.mkdir()
    cases = {
        tmp_path / "curve.xyz": "unknown figure format .xyz",
        folder: "is a folder",
    }
    for output, words in cases.items():
        code, err = refusal(capsys, script, tmp_path / "missing", output, "--overwrite")
        assert code == 2
        assert len(err.splitlines()) == 1 and err.startswith(f"error: {output}") and words in err, err


def test_the_alignment_curve_draws_the_logged_steps_and_replaces_only_with_overwrite(tmp_path, capsys):
    from bench.alignment_curve import main

    log_scalars(tmp_path / "run", ALIGNMENT_TAGS)
    output = tmp_path / "figures" / "curve.png"  # its folder is made
    main([str(tmp_path / "run"), str(output)])
    assert output.read_bytes().startswith(b"\x89PNG") and capsys.readouterr().out.strip() == f"wrote {output}"
    output.write_bytes(b"the old figure")
    code, err = refusal(capsys, "bench.alignment_curve", tmp_path / "run", output)
    assert (code, err.strip()) == (2, f"error: {output} exists; pass --overwrite to replace it")
    assert output.read_bytes() == b"the old figure"
    main([str(tmp_path / "run"), str(output), "--overwrite"])
    assert output.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in output.parent.iterdir()] == ["curve.png"]  # no hidden file left beside it


def test_the_bleu_curve_prints_each_validations_bleu_by_its_updates(tmp_path, capsys):
    from bench.bleu_curve import main

    log_scalars(tmp_path / "run", ("val/bleu", "val/loss"))
    output = tmp_path / "bleu.png"
    main([str(tmp_path / "run"), str(output)])
    assert output.read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.splitlines() == [
        "updates 11: validation BLEU 0.25", "updates 21: validation BLEU 0.50",
        "updates 31: validation BLEU 0.75", f"wrote {output}"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_full_disk_names_the_figure_and_leaves_what_was_there(overwrite, tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    def full_disk(self, fname, *args, **kwargs):
        with open(fname, "wb") as file:
            file.write(b"\x89PNG half")  # a part written, then the disk is full, as a real one fails
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    log_scalars(tmp_path / "run", ALIGNMENT_TAGS)
    output = tmp_path / "curve.png"
    if overwrite:
        output.write_bytes(b"the old figure")
    code, err = refusal(
        capsys, "bench.alignment_curve", tmp_path / "run", output, *(["--overwrite"] if overwrite else [])
    )
    assert code == 1
    assert err.strip() == f"error: cannot write {output}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["curve.png", "run"] if overwrite else ["run"])
    if overwrite:
        assert output.read_bytes() == b"the old figure"
