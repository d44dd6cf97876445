"""Which pieces for Chinese: a piece per Han character (``--data.pre_tokenize cjk``) against whole clauses
(``whitespace``, the project's only choice before), trained side by side on Tatoeba's ``cmn.txt``.

    python bench/cjk_pieces.py --direction zh_en --minutes 20       # two runs, one thread each, side by side
    python bench/cjk_pieces.py --direction en_zh --minutes 20
    python bench/cjk_pieces.py --direction zh_en --dry-run          # the commands, without running them

Each direction trains ``configs/tatoeba_<direction>.yaml`` twice at the same time, once per pre-tokenization,
each process on ``--threads`` torch threads (default 1) for ``--minutes``, then scores each run's last
checkpoint on the validation pairs (greedy; BLEU with sacreBLEU's tokenizer for the target language: ``zh``
for Chinese). The test pairs are not touched: the choice is made on validation. Scores go to
``<out>/scores.jsonl`` and a table closes the run; docs/training.md has the figures.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRE_TOKENIZATIONS = ("cjk", "whitespace")
DIRECTIONS = ("zh_en", "en_zh")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--direction", choices=DIRECTIONS, required=True, help="zh_en or en_zh")
    p.add_argument("--corpora", type=Path, default=REPO.parent / "shared" / "corpora",
                   help="the folder holding tatoeba-cmn-eng/cmn.txt.gz (or cmn.txt)")  # fmt: skip
    p.add_argument("--minutes", type=int, default=20, help="each run's training time (default 20)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    p.add_argument("--out", type=Path, default=Path("results_cjk_pieces"), help="where runs and scores go")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    if not 1 <= args.minutes <= 1439:
        p.error(f"--minutes must be from 1 to 1439, got {args.minutes}")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    return args


def corpus_file(corpora: Path) -> Path:
    folder = corpora / "tatoeba-cmn-eng"
    return next((p for p in (folder / "cmn.txt", folder / "cmn.txt.gz") if p.is_file()), folder / "cmn.txt")


def train_command(direction: str, pre_tokenize: str, data: Path, minutes: int, out: Path) -> list[str]:
    max_time = f"00:{minutes // 60:02d}:{minutes % 60:02d}:00"
    return [
        sys.executable, "train.py", "--config", f"configs/tatoeba_{direction}.yaml", "--data.path", str(data),
        "--data.pre_tokenize", pre_tokenize, "--trainer.max_time", max_time,
        "--trainer.logger.init_args.save_dir", str(out / "runs"),
        "--trainer.logger.init_args.name", f"{direction}_{pre_tokenize}",
        "--trainer.enable_progress_bar=false",
    ]  # fmt: skip


def checkpoint(out: Path, direction: str, pre_tokenize: str) -> Path:
    return out / "runs" / f"{direction}_{pre_tokenize}" / "version_0" / "checkpoints" / "last.ckpt"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = corpus_file(args.corpora)
    if not data.is_file() and not args.dry_run:
        print(f"skipped: no cmn.txt in {data.parent} (give the corpora folder with --corpora)")
        return 0
    if args.out.exists() and not args.dry_run:
        raise SystemExit(f"error: {args.out} exists (an earlier run?); move it away first")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    trainings = []
    for pre_tokenize in PRE_TOKENIZATIONS:
        command = train_command(args.direction, pre_tokenize, data, args.minutes, args.out)
        print(" ".join(command), flush=True)
        if not args.dry_run:
            args.out.mkdir(parents=True, exist_ok=True)
            log = open(args.out / f"{args.direction}_{pre_tokenize}.log", "w")  # noqa: SIM115
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
            trainings.append((pre_tokenize, process))
    for pre_tokenize, process in trainings:
        if process.wait() != 0:
            raise SystemExit(
                f"error: training {pre_tokenize} failed (exit {process.returncode}); see {args.out}"
            )

    env["OMP_NUM_THREADS"] = str(args.threads * len(PRE_TOKENIZATIONS))
    scores = []
    for pre_tokenize in PRE_TOKENIZATIONS:
        command = [sys.executable, "evaluate.py", str(checkpoint(args.out, args.direction, pre_tokenize)),
                   "--split", "val", "--quiet"]  # fmt: skip
        print(" ".join(command), flush=True)
        if args.dry_run:
            continue
        done = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            last_line = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise SystemExit(f"error: {' '.join(command)} failed (exit {done.returncode}): {last_line}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        scores.append({"direction": args.direction, "pre_tokenize": pre_tokenize, **result})
    if args.dry_run:
        return 0
    with open(args.out / "scores.jsonl", "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in scores)
    print(f"\n{'direction':<10} {'pre_tokenize':<12} {'BLEU':>5} {'chrF':>5}  tokenize")
    for r in scores:
        bleu, chrf = r["bleu"], r["chrf"]
        print(f"{r['direction']:<10} {r['pre_tokenize']:<12} {bleu:5.1f} {chrf:5.1f}  {r['bleu_tokenize']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
