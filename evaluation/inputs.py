"""What evaluate.py reads and where it writes, checked at the edge: the sentences ``evaluate.py translate`` is
given, the device, and every output path (before any work, so that no scores are lost after decoding). Each
problem is one line (``InputError``, ``OutputExistsError``) that evaluate.py prints.
"""

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import torch

from data.batching import check_fits
from data.tokenizer import Tokenizer
from training.checkpoints import CheckpointError


class OutputExistsError(Exception):
    """An output path that exists (without --overwrite) or cannot be written; the message is one line."""


class InputError(Exception):
    """Bad sentences given to translate, or an option the run's data cannot honour; the message is one
    line."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise CheckpointError(f"--device {name}: not a device; use cpu, cuda, cuda:N or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise CheckpointError(f"--device {name}: evaluate.py runs on cpu, cuda or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise CheckpointError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CheckpointError(f"--device {name}: MPS is not available on this machine")
    return device


def check_new(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; choose another name or pass --overwrite")


def check_sentence_folders(out: Path, count: int, overwrite: bool) -> None:
    """--attention-out's folder of each of ``count`` sentences, checked before translating: one that exists
    needs --overwrite, and one that is a file cannot take the maps."""
    for number in range(1, count + 1):
        folder = out / f"sentence_{number}"
        if folder.exists() and not folder.is_dir():
            raise OutputExistsError(f"--attention-out {out}: {folder} is a file, not a folder")
        check_new(folder, overwrite)


def check_folder(folder: Path, option: str, given: Path | str) -> None:
    """Say at once if ``option``'s folder cannot be made (it is made only when files are written): it, or
    else its nearest existing parent, must be a folder one can write into. ``given`` is the option's value."""
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == Path(p.anchor or "."))
    if not existing.is_dir():
        raise OutputExistsError(f"{option} {given}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputExistsError(f"{option} {given}: {existing} is not writable")


def analysis_folder(given: str | None, *, checkpoint: str | None, hf_model: str | None = None) -> Path:
    """The folder of the analysis files, checked before any work: ``given`` (--analysis-out), else
    <run>/analysis/<checkpoint stem> where <run> holds the checkpoints/ folder, or <folder>/analysis for an
    imported model's folder (a Hub name has none: --analysis-out is asked for). Never a folder relative to
    where evaluate.py runs, which may be the project's source."""
    if given:
        folder = Path(given)
    elif checkpoint is None:
        if not Path(hf_model).expanduser().is_dir():
            raise InputError(f"{hf_model} is no folder here, so its analyses have no folder to go into: give "
                             "--analysis-out DIR")
        folder = Path(hf_model).expanduser() / "analysis"
    else:
        checkpoint_folder = Path(checkpoint).parent
        run_dir = checkpoint_folder.parent if checkpoint_folder.name == "checkpoints" else checkpoint_folder
        folder = run_dir / "analysis" / Path(checkpoint).stem
    check_folder(folder, "--analysis-out", given or f"{folder} (the default)")
    return folder


def check_output(given: str, overwrite: bool) -> None:
    """--output's file, checked before any decoding: not a folder, new unless ``overwrite``, in a folder that
    can be made."""
    output = Path(given)
    if output.is_dir():
        raise OutputExistsError(
            f"--output {output} is a folder; give a file name, such as {output / 'out.jsonl'}"
        )
    check_new(output, overwrite)
    check_folder(output.parent, "--output", output)


def _decoded_lines(stream) -> list[str]:
    """The lines of ``stream`` (bytes or text) as text; bytes that are not UTF-8 are a one-line InputError.

    A UTF-8 byte-order mark before the first line is dropped, as the TSV reader does.
    """
    lines = []
    for number, line in enumerate(stream, start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"translate -: stdin line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} "
                    f"at byte {error.start + 1})"
                ) from None
        lines.append(line.removeprefix("\ufeff") if number == 1 else line)
    return lines


def _check_text(text: str, where: str) -> None:
    """Text from the command line holds lone surrogates where its bytes were not UTF-8 (PEP 383)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"code point U+{code:04X}"
        raise InputError(f"{where} is not UTF-8 text ({what} at character {error.start + 1})") from None


def read_sentences(text: str, stdin=None) -> list[str]:
    """The sentences of ``translate MODEL TEXT``, or of stdin's lines for ``-``; an empty one, or one that is
    not UTF-8, is an error."""
    if text != "-":
        _check_text(text, "translate: the sentence")
        if not text.strip():
            raise InputError(
                "translate: the sentence is empty; give a sentence, or '-' to read lines from stdin"
            )
        return [text.strip()]
    stream = sys.stdin if stdin is None else stdin
    try:
        lines = _decoded_lines(getattr(stream, "buffer", stream))  # bytes where there are, to decode here
    except UnicodeDecodeError as error:  # a text stream that decodes itself
        raise InputError(f"translate -: stdin is not UTF-8 text ({error.reason})") from None
    sentences = [line.strip() for line in lines]
    for number, sentence in enumerate(sentences, start=1):
        _check_text(sentence, f"translate -: stdin line {number}")
        if not sentence:
            raise InputError(f"translate -: stdin line {number} is empty; give one sentence per line")
    if not sentences:
        raise InputError("translate -: stdin holds no sentence")
    return sentences


def check_sentences_fit(
    sentences: list[str], tokenizer: Tokenizer, max_len: int, *, from_stdin: bool
) -> None:
    """Each sentence to translate must fit the model's max_len; the first that does not is named."""

    def where(index: int, side: str) -> tuple[str, None]:
        return (f"stdin, sentence {index + 1}" if from_stdin else "translate"), None

    encoded = tokenizer.encode_batch(sentences)
    check_fits([(i, ids, []) for i, ids in enumerate(encoded)], max_len, where)

def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """``path`` written by ``write(staged)`` into a file beside it, then renamed: whole or not at all. A
    failed write (a full disk) removes the staged file and raises an ``OSError`` that names ``path``, so that
    evaluate.py says which file it could not write; an interrupt removes it too. Inside ``whole_analysis``
    the file is one of the analysis's, kept only if all of them are."""
    staged = path.with_name(f".{path.name}.partial")
    try:
        write(staged)
        if _analysis is not None:
            _analysis.replacing(path)
        staged.replace(path)
    except OSError as error:
        staged.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return path


class _Written:
    """The files ``write_whole`` wrote inside one ``whole_analysis``, each with the hidden copy of the file it
    replaced (under --overwrite), or None where there was none."""

    def __init__(self) -> None:
        self.files: dict[Path, Path | None] = {}

    def replacing(self, path: Path) -> None:
        """``path`` is about to take a new file: one there that this analysis did not write is set aside."""
        if path in self.files:
            return
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            os.replace(path, old)
        self.files[path] = old

    def discard(self) -> None:
        """Each file removed and the one it replaced put back (one that cannot be is left as it is)."""
        for path, old in reversed(self.files.items()):
            with suppress(OSError):
                path.unlink(missing_ok=True)
                if old is not None:
                    os.replace(old, path)

    def keep(self) -> None:
        """The files set aside deleted: the new ones stay."""
        for old in self.files.values():
            if old is not None:
                with suppress(OSError):
                    old.unlink()


_analysis: _Written | None = None  # the files of the analysis being written, if one is


@contextmanager
def whole_analysis() -> Iterator[None]:
    """The files ``write_whole`` writes inside, kept together or not at all: leaving by an error (a full
    disk at the last figure) or an interrupt removes those written before it and puts back the files they
    replaced, so that what was there stays as it was and the same command runs again without --overwrite."""
    global _analysis
    if _analysis is not None:  # a part of the analysis around it
        yield
        return
    _analysis = _Written()
    try:
        yield
    except BaseException:
        _analysis.discard()
        raise
    else:
        _analysis.keep()
    finally:
        _analysis = None


@contextmanager
def writer_thread_errors() -> Iterator[list[OSError]]:
    """TensorBoard writes its event files in a thread of its own: a write that fails there (a full disk)
    printed that thread's traceback, and the error reached the caller again at the logger's next write or
    flush. Inside, such an error is only kept, in the list given, for the caller to raise if nothing did, so
    that it is said once, in one line. Any other thread's error is printed as before."""
    failed: list[OSError] = []
    hook = threading.excepthook

    def keep(raised) -> None:  # threading.ExceptHookArgs
        writer = type(raised.thread).__module__.startswith("tensorboard.")
        if isinstance(raised.exc_value, OSError) and writer:
            failed.append(raised.exc_value)
        else:
            hook(raised)

    threading.excepthook = keep
    try:
        yield failed
    finally:
        threading.excepthook = hook
