"""evaluate.py translate ... --attention-out DIR onto a disk that fills up: one line naming the file it
could not write, and nothing of the run left behind, so that the same command runs again without
--overwrite; what was in DIR before is kept as it was."""

import errno
import io
from pathlib import Path

from matplotlib.figure import Figure

from tests.conftest import run_evaluate

TWO_SENTENCES = "the dog saw a cat\na cat saw the dog\n"


def fill_the_disk_at(monkeypatch, failing: int):
    """Make the ``failing``-th figure written (counting from 1) fail as a full disk does: part of the file
    written, then ENOSPC from the write, which names no file."""
    save = Figure.savefig
    calls = []

    def savefig(self, fname, *args, **kwargs):
        calls.append(Path(fname))
        if len(calls) == failing:
            with open(fname, "wb") as file:
                file.write(b"\x89PNG half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return calls


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_full_disk_names_the_map_and_leaves_nothing_of_the_run(tiny_run, tmp_path, capsys, monkeypatch):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    maps = tmp_path / "maps"
    monkeypatch.setattr("sys.stdin", io.StringIO(TWO_SENTENCES))  # the second one's maps fail
    calls = fill_the_disk_at(monkeypatch, failing=14)  # 12 maps of sentence 1, then the second of sentence 2
    code, out, err = run_evaluate(capsys, "translate", checkpoint, "-", "--attention-out", maps)
    assert code == 1 and out.count("\n") == 2  # both translations printed before the maps were drawn
    failed = maps / "sentence_2" / calls[-1].name  # named where it was to be, not where it was drawn
    assert err.strip() == f"error: {failed}: No space left on device"
    assert not maps.exists()  # this run made it; nothing of it is left, not even sentence_1

    monkeypatch.undo()  # the disk has room again: the same command runs, without --overwrite
    monkeypatch.setattr("sys.stdin", io.StringIO(TWO_SENTENCES))
    code, _, err = run_evaluate(capsys, "translate", checkpoint, "-", "--attention-out", maps)
    assert code == 0, err
    assert sorted(p.name for p in maps.iterdir()) == ["sentence_1", "sentence_2"]  # no hidden folder left
    assert len(list((maps / "sentence_2").iterdir())) == 2 * 2 * 3 + 1


def test_a_full_disk_while_overwriting_keeps_what_was_there(tiny_run, tmp_path, capsys, monkeypatch):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    maps = tmp_path / "maps"
    (maps / "sentence_1").mkdir(parents=True)
    (maps / "sentence_1" / "cross_layer1_head1.png").write_bytes(b"an older map")
    (maps / "sentence_1" / "notes.txt").write_text("mine\n")
    (maps / "README").write_text("what these maps are\n")
    before = tree(maps)

    real_open = Path.open

    def full_disk_for_html(self, *args, **kwargs):
        if self.suffix == ".html":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk_for_html)
    code, _, err = run_evaluate(
        capsys, "translate", checkpoint, "the dog", "--attention-out", maps, "--overwrite"
    )
    assert code == 1
    assert err.strip() == f"error: {maps / 'sentence_1' / 'head_view.html'}: No space left on device"
    assert tree(maps) == before  # the older map, the notes and the README, as they were; nothing added

    monkeypatch.undo()
    code, _, err = run_evaluate(
        capsys, "translate", checkpoint, "the dog", "--attention-out", maps, "--overwrite"
    )
    assert code == 0, err
    after = tree(maps)
    assert after["sentence_1/cross_layer1_head1.png"].startswith(b"\x89PNG")  # replaced, as asked
    assert after["sentence_1/notes.txt"] == b"mine\n" and after["README"] == before["README"]
    assert len(after) == len(before) - 1 + 2 * 2 * 3 + 1


def test_a_sentence_folder_that_is_a_file_is_refused_before_translating(tiny_run, tmp_path, capsys):
    maps = tmp_path / "maps"
    maps.mkdir()
    (maps / "sentence_1").write_text("a file\n")
    code, out, err = run_evaluate(
        capsys, "translate", tiny_run / "checkpoints" / "last.ckpt", "the dog", "--attention-out", maps,
        "--overwrite",
    )
    assert (code, out) == (1, "")  # nothing translated
    assert err.strip() == f"error: --attention-out {maps}: {maps / 'sentence_1'} is a file, not a folder"
    assert tree(maps) == {"sentence_1": b"a file\n"}
