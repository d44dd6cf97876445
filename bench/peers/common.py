"""What the comparisons with other toolkits share (``joeynmt_baseline.py``, ``eole_baseline.py``,
``marian_baseline.py``, beside this file): the peer's own virtual environment, its processes' threads,
training under a wall-clock watchdog, scoring the translations (of test2016, or of the split a run asks for)
with this project's sacreBLEU, and the one-line JSON result.

Each peer trains in a process of its own; the watchdog starts its clock when the peer prints the line that
says its training loop has begun (data preparation is not part of the budget, as this project's tokenizer
training is not part of its ``max_time``), and when the budget is spent sends the signal on which the peer
saves its current weights and stops (SIGINT, as Ctrl-C, for JoeyNMT and eole; SIGTERM for Marian).
"""

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS_FILES = ("train.de", "train.en", "val.de", "val.en", "test2016.de", "test2016.en")


# -- the environment -----------------------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, packages: list[str], check: str, name: str) -> Path:
    """The peer's virtual environment, created and filled if ``check`` (Python code) fails in it; its Python.

    ``--system-site-packages`` reuses the system's torch (pip sees it satisfied, and the machine's pip
    constraint keeps it from being replaced); the peer's own pins install into the venv and shadow the
    system's versions only there.
    """
    python = venv_python(venv)
    if python.exists() and _runs(python, check):
        return python
    from importlib.metadata import version

    print(f"creating {name}'s virtual environment in {venv} ({' '.join(packages)})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    keep_torch = f"torch=={version('torch')}"  # a peer that asks for torch gets the system's, not a download
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages, keep_torch], check=True)
    if not _runs(python, check):
        sys.exit(f"error: {python} cannot run {check!r} after installing {' '.join(packages)}")
    return python


def _runs(python: Path, code: str) -> bool:
    return subprocess.run([str(python), "-c", code], check=False, capture_output=True).returncode == 0


def thread_env(threads: int) -> dict:
    """The environment of a peer's processes: ``threads`` CPU threads, no GPU."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip


def missing_corpus(data: Path) -> str | None:
    """The ``skipped:`` line for a Multi30k folder that lacks a file, or None when all are there."""
    missing = [name for name in CORPUS_FILES if not (data / name).is_file()]
    if missing:
        return f"skipped: no Multi30k in {data} (missing {', '.join(missing)}); pass --data"
    return None


def fresh_out(out: Path, overwrite: bool) -> Path:
    """``out`` resolved and empty: an earlier run there is an error unless ``overwrite``."""
    import shutil

    out = out.resolve()
    if out.exists() and any(out.iterdir()) and not overwrite:
        sys.exit(f"error: {out} is not empty (an earlier run?); pass --overwrite or choose another --out")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


# -- the command line and the start of a run ----------------------------------------------------------------


def add_run_args(p: argparse.ArgumentParser, name: str, venv: Path, out: Path) -> None:
    """The options every peer's baseline has: data, budget, threads, run folder and environment."""
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "corpora" / "multi30k",
                   help="the Multi30k folder (train/val/test2016 .de and .en)")  # fmt: skip
    p.add_argument("--minutes", type=float, default=60.0, help="training wall-clock budget (default 60)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for training and decoding")
    p.add_argument("--out", type=Path, default=out, help="the run's folder")
    p.add_argument("--venv", type=Path, default=venv, help=f"{name}'s virtual environment (made if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    p.add_argument("--venv-only", action="store_true", help=f"make {name}'s environment if missing, and stop")


def add_tuning_args(p: argparse.ArgumentParser, steps: tuple[str, ...], out: Path) -> None:
    """The arguments a peer's tuning driver has: its step, the corpora, its folder and each run's budget in
    whole minutes (``$MINUTES``, default 60; ``check_tuning_minutes`` checks it)."""
    p.add_argument("step", choices=steps)
    p.add_argument("--corpora", type=Path, default=REPO.parent / "shared" / "corpora",
                   help="the folder that holds multi30k/")  # fmt: skip
    p.add_argument("--out", type=Path, default=out, help="where runs and tables go")
    p.add_argument("--minutes", type=int, default=int(os.environ.get("MINUTES", "60")),
                   help="each run's training budget ($MINUTES, default 60)")  # fmt: skip


def check_tuning_minutes(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.minutes <= 1439:
        p.error(f"--minutes must be a whole number of minutes from 1 to 1439, got {args.minutes}")


def check_positive(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Exit with a usage error naming the first option of ``names`` that is given (not None) and not
    positive."""
    for option in names:
        value = getattr(args, option)
        if value is not None and value <= 0:
            p.error(f"--{option.replace('_', '-')} must be positive, got {value}")


def start_run(args: argparse.Namespace, name: str, make_venv, write_config, changes: list[str]):
    """The steps before a peer's training: ``(out, python, env, config)``, or None when there is nothing to
    train (``--venv-only`` done, or no corpus: one ``skipped:`` line)."""
    if args.venv_only:
        print(f"{name}'s environment: {make_venv(args.venv)}", flush=True)
        return None
    skipped = missing_corpus(args.data)
    if skipped:
        print(skipped, flush=True)
        return None
    out = fresh_out(args.out, args.overwrite)
    python = make_venv(args.venv)
    config = write_config(args, out)
    for change in changes:
        print(f"recipe change: {change}", flush=True)
    return out, python, thread_env(args.threads), config


# -- training under a watchdog -------------------------------------------------------------------------------


def _default_sigint() -> None:
    """In the child before it runs: SIGINT's default action back, so that Python turns it into
    ``KeyboardInterrupt``. A shell starts background jobs (``cmd &``) with SIGINT ignored, the child would
    inherit that, and Python leaves an ignored SIGINT ignored: the watchdog's interrupt would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def train_with_budget(
    command: list[str],
    env: dict,
    log: Path,
    budget_s: float,
    grace_s: float = 600,
    *,
    started: str,
    name: str,
    stop_signal: int = signal.SIGINT,
) -> dict:
    """Run a peer's training, sending ``stop_signal`` ``budget_s`` after it prints a line containing
    ``started``.

    The peer saves its current weights on that signal and returns (or ends by the signal after saving); one
    that has not ended ``grace_s`` later is killed. Output goes to ``log``. Returns the measured times.

    Raises:
        RuntimeError: training failed or never started, naming ``name`` and the log.
    """
    start = time.perf_counter()
    began = threading.Event()
    with open(log, "w", encoding="utf-8") as out:
        # preexec_fn is safe here: no other thread runs yet (the reader starts below)
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=_default_sigint)  # noqa: PLW1509

        def copy_output() -> None:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if started in line:
                    began.set()

        reader = threading.Thread(target=copy_output, daemon=True)
        reader.start()
        while not began.is_set() and proc.poll() is None:
            began.wait(1.0)
        training_start = time.perf_counter()
        interrupted = False
        if began.is_set():
            try:
                proc.wait(timeout=budget_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(stop_signal)
                interrupted = True
        training_end = time.perf_counter()
        try:
            proc.wait(timeout=grace_s)  # saving the weights after the signal
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    # A peer may end by the signal once it has saved (Marian re-raises SIGTERM: exit 143)
    by_signal = interrupted and proc.returncode in (-stop_signal, 128 + stop_signal)
    if (proc.returncode != 0 and not by_signal) or not began.is_set():
        raise RuntimeError(f"{name} training failed (exit {proc.returncode}); see {log}")
    return {
        "prepare_seconds": training_start - start,
        "train_seconds": training_end - training_start,
        "stopped_by_budget": interrupted,
        "total_seconds": time.perf_counter() - start,
    }


def run_side_by_side(jobs: list[tuple[str, list[str], Path]]) -> None:
    """Run ``(name, command, log)`` jobs two at a time, each with one CPU thread; a failed job is named."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for i in range(0, len(jobs), 2):
        running = []
        for name, command, log in jobs[i : i + 2]:
            log.parent.mkdir(parents=True, exist_ok=True)
            print(f"start {name}: {' '.join(command)}", flush=True)
            running.append((name, log, subprocess.Popen(command, env=env, stdout=log.open("w"),
                                                        stderr=subprocess.STDOUT)))  # fmt: skip
        for name, log, proc in running:
            if proc.wait() != 0:
                raise RuntimeError(f"{name} failed (exit {proc.returncode}); see {log}")
            print(f"done {name}", flush=True)


def write_tuning(out: Path, rows: list[dict], lines: list[str], heading: str) -> None:
    """A tuning's ``rows`` as ``<out>/tuning.json``, its table ``lines`` as ``<out>/tuning.md``, both printed
    after ``heading``."""
    (out / "tuning.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    (out / "tuning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(heading)
    print("\n".join(lines), flush=True)


# -- scoring and the result line -----------------------------------------------------------------------------


def score_split(hyps: Path, references: Path, split: str) -> dict:
    """sacreBLEU and chrF of the detokenized ``hyps`` against ``references`` (English, one per line), as
    ``evaluate.py`` scores; ``split`` names them in the result.

    Raises:
        RuntimeError: not one translation per reference, naming the file.
    """
    from analysis.metrics import bleu_tokenizer, score_translations

    hypotheses = hyps.read_text(encoding="utf-8").splitlines()
    lines = references.read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(lines):
        raise RuntimeError(f"{hyps}: {len(hypotheses)} translations of {len(lines)} sentences")
    scores = score_translations(hypotheses, lines, tokenize=bleu_tokenizer("en"))
    return {"test_split": split, "bleu": scores.bleu, "chrf": scores.chrf,
            "sentences": scores.num_sentences, "signature": scores.signature}  # fmt: skip


def decode_val_then_test(data: Path, out: Path, translate, progress: dict) -> tuple[Path, float]:
    """Decodes val first, where a tuning chooses (its BLEU and chrF go into ``progress`` as ``val_bleu`` and
    ``val_chrf``), then test2016, the row's figure: ``translate(source, hyps)`` writes a split's translations
    and returns its seconds. Returns test2016's translations and their decoding seconds."""
    val = out / "val.hyp.en"
    translate(data / "val.de", val)
    scores = score_split(val, data / "val.en", "val")
    progress["val_bleu"], progress["val_chrf"] = scores["bleu"], scores["chrf"]
    hyps = out / "test2016.hyp.en"
    return hyps, translate(data / "test2016.de", hyps)


def report(args: argparse.Namespace, out: Path, prefix: str, run: dict, hyps: Path, times: dict,
           decode_seconds: float, progress: dict, scores: dict | None = None,
           name: str = "result.json") -> dict:  # fmt: skip
    """A peer's result: ``run`` (what was trained and decoded), ``scores`` (``score_split``'s; by default
    those of ``hyps`` on Multi30k's test2016), the budget, the times (``train_with_budget``'s and the
    decoding's) and ``progress``; written to ``<out>/<name>`` and printed as one line that starts with
    ``prefix``."""
    if scores is None:
        scores = score_split(hyps, args.data / "test2016.en", "test2016")
    result = {
        **run,
        **scores,
        "beam_size": 5,
        "budget_minutes": args.minutes,
        "train_minutes": times["train_seconds"] / 60,
        "prepare_minutes": times["prepare_seconds"] / 60,
        "decode_minutes": decode_seconds / 60,
        "stopped_by_budget": times["stopped_by_budget"],
        "threads": args.threads,
        "machine": f"{platform.processor() or platform.machine()}",
        **progress,
    }
    (out / name).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(result_line(prefix, result), flush=True)
    return result


def result_line(prefix: str, result: dict) -> str:
    return prefix + json.dumps(result, ensure_ascii=False)


def parse_result(text: str, prefix: str, name: str) -> dict:
    """The result of a run's output: the last line that starts with ``prefix``, as a dict.

    Raises:
        ValueError: no such line, or one whose JSON does not parse (its line number is named).
    """
    lines = text.splitlines()
    for number in range(len(lines), 0, -1):
        line = lines[number - 1]
        if line.startswith(prefix):
            try:
                return json.loads(line[len(prefix) :])
            except json.JSONDecodeError as e:
                raise ValueError(f"line {number}: the {name} result is not JSON ({e.msg})") from None
    raise ValueError(f"no line starting with {prefix!r} (did the run finish?)")
