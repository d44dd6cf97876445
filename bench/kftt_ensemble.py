"""The README's KFTT row: pairs of supervised models (ja→en and en→ja, guided alignment) trained with
different options and seeds, their supervised heads' Shift-Att word maps averaged as ``bench/kftt_joined.py``
averages them, and which pairs to join chosen on gold pairs 1–100 with the rest of the choice, reported on
101–582.

    python bench/kftt_ensemble.py                        # the README row's five pairs not in --out yet, join
    python bench/kftt_ensemble.py --dry-run              # the commands, nothing run
    python bench/kftt_ensemble.py --pairs layer1 layer1_seed2   # fewer pairs (each pair is hours of training)
    python bench/kftt_ensemble.py --pairs causal full_context null seed2 seed3 forward   # the earlier twelve

Each pair is ``bench/kftt_alignment.py --runs sup_ja_en sup_en_ja --jobs 2 --no-eflomal`` with the pair's
options (``PAIRS``) in ``--out``/<pair>: its two runs side by side, one thread each; a pair whose two
checkpoints are there is reused. On the 2-core machine of docs/explanations.md a pair takes its ``--max-time``
(55–90 minutes) of both cores and about ten minutes of scoring: the README row's five pairs, about six and
a half hours. The training links (eflomal's two directions joined by grow-diag-final-and, made on the
training pairs only) are made by the first pair that needs them and copied to the others made with the same
settings. The README row's pairs all train on links made with English cut to 4 characters: ``stem4``
supervises the second decoder layer, ``layer1`` the first (``layer1_seed2`` and ``layer1_seed3`` again with
seeds 2 and 3), ``layer3`` the last; the first six pairs, on whole-word links, were the row's earlier twelve
models.

The sets tried are the first pairs of ``PAIRS`` in its order (the first alone, the first two, ...); each
set's maps averaged, the mean, the extraction and its floor chosen on pairs 1–``--choose``
(``kftt_joined.choose_and_report``); the set that scores best there is the pick, reported on the others.
Without the corpus, the command says so and exits cleanly.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kftt_alignment import (
    CHOOSE,
    DEFAULT_CORPORA,
    REPO,
    RUNS,
    checkpoint_of,
    gold_files,
    labels_file,
    skipped_without_gold,
)
from bench.kftt_alignment import parse_args as alignment_args


@dataclass(frozen=True)
class Pair:
    about: str
    options: tuple[str, ...]


GUIDED = ("--labels", "grow-diag-final-and", "--shift", "--alignment-weight", "1")
STEM4 = (*GUIDED, "--label-stem", "4", "--label-iterations", "4")  # the links made with English cut to 4
PAIRS = {  # in the order the sets grow
    "causal": Pair("eflomal's two directions joined, λ 1, each word's links at the step that reads it",
                   (*GUIDED, "--max-time", "00:01:30:00")),
    "full_context": Pair("the causal pair's, the head reading the whole target",
                         (*GUIDED, "--full-context", "--max-time", "00:01:30:00")),
    "null": Pair("the causal pair's, a word without a link trained toward the end of sentence",
                 (*GUIDED, "--null", "--max-time", "00:01:20:00")),
    "seed2": Pair("the causal pair, seed 2", (*GUIDED, "--seed", "2", "--max-time", "00:01:20:00")),
    "seed3": Pair("the causal pair, seed 3", (*GUIDED, "--seed", "3", "--max-time", "00:01:20:00")),
    "forward": Pair("eflomal's forward links, λ 0.5", ("--shift", "--alignment-weight", "0.5",
                                                        "--max-time", "00:01:15:00")),
    "stem4": Pair("the causal pair's, its links made by eflomal reading English cut to 4 characters, "
                  "4× longer",
                  (*STEM4, "--max-time", "00:01:20:00")),
    "layer1": Pair("the stem4 pair's, the first decoder layer's head supervised instead of the second's",
                   (*STEM4, "--alignment-layer", "1", "--max-time", "00:01:20:00")),
    "layer1_seed2": Pair("the layer1 pair, seed 2",
                         (*STEM4, "--alignment-layer", "1", "--seed", "2", "--max-time", "00:01:20:00")),
    "layer1_seed3": Pair("the layer1 pair, seed 3, 55 minutes",
                         (*STEM4, "--alignment-layer", "1", "--seed", "3", "--max-time", "00:00:55:00")),
    "layer3": Pair("the stem4 pair's, the last decoder layer's head supervised, 55 minutes",
                   (*STEM4, "--alignment-layer", "3", "--max-time", "00:00:55:00")),
}  # fmt: skip
README_PAIRS = ("stem4", "layer1", "layer1_seed2", "layer1_seed3", "layer3")  # its ten models' pairs
SUPERVISED = [r for r in RUNS if r.supervised]  # ja→en, en→ja


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA, help="the folder holding kftt-ja-en/")
    p.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(README_PAIRS),
                   help="the pairs, in PAIRS' order whatever the order given (default: the README row's)")
    p.add_argument("--choose", type=int, default=CHOOSE, help="pairs 1–N choose (default 100)")
    p.add_argument("--out", type=Path, default=REPO / "results_kftt_ensemble", help="one folder a pair")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    args.pairs = [name for name in PAIRS if name in args.pairs]
    return args


def checkpoints(out: Path, name: str) -> list[Path]:
    return [checkpoint_of(out / name, run) for run in SUPERVISED]


def pair_command(args: argparse.Namespace, name: str) -> list[str]:
    return [sys.executable, "bench/kftt_alignment.py", "--corpora", str(args.corpora), *PAIRS[name].options,
            "--runs", *(run.name for run in SUPERVISED), "--jobs", "2", "--no-eflomal",
            "--methods", "shift_att", "--out", str(args.out / name)]  # fmt: skip


def label_settings(options: tuple[str, ...]) -> tuple[int, float]:
    """The English cut and eflomal's length a pair's training links are made with, read from its options as
    kftt_alignment reads them (``--label-stem``, ``--label-iterations``)."""
    args = alignment_args(list(options))
    return args.label_stem, args.label_iterations


def share_labels(out: Path, name: str) -> None:
    """Copy the joined training links another pair made with the same settings into this pair's folder, so
    eflomal runs once for them."""
    settings = label_settings(PAIRS[name].options)
    wanted = [labels_file(out / name, run, *settings) for run in SUPERVISED]
    if "grow-diag-final-and" not in PAIRS[name].options or all(path.is_file() for path in wanted):
        return
    for other in PAIRS:
        made = [labels_file(out / other, run, *settings) for run in SUPERVISED]
        if other != name and all(path.is_file() for path in made):
            wanted[0].parent.mkdir(parents=True, exist_ok=True)
            for source, target in zip(made, wanted, strict=True):
                shutil.copyfile(source, target)
            print(f"the training links of {out / other} copied to {wanted[0].parent}")
            return


def train(args: argparse.Namespace) -> None:
    for name in args.pairs:
        if all(path.is_file() for path in checkpoints(args.out, name)):
            print(f"reusing the {name} pair in {args.out / name}")
            continue
        command = pair_command(args, name)
        print(" ".join(command), flush=True)
        if args.dry_run:
            continue
        share_labels(args.out, name)
        done = subprocess.run(command, cwd=REPO, check=False)
        if done.returncode != 0:
            raise SystemExit(f"error: the {name} pair failed (exit {done.returncode}): {args.out / name}")


def pick(results: dict[str, dict]) -> str:
    """The set that scores best where chosen (its AER on the choosing pairs); the smaller set on a tie."""
    return min(results, key=lambda name: (round(results[name]["chosen_aer"], 6), len(name.split("+"))))


def join(args: argparse.Namespace) -> dict[str, dict]:
    """Each set's averaged maps chosen on the first pairs and reported on the others, the pick marked."""
    from bench.kftt_joined import choose_and_report, means, readers_of, word_maps

    files = gold_files(args.corpora)
    read = {name: [word_maps(path, files["links"], files["sentences"], "shift_att", None)
                   for path in checkpoints(args.out, name)] for name in args.pairs}  # fmt: skip
    results = {}
    for size in range(1, len(args.pairs) + 1):
        runs = [run for name in args.pairs[:size] for run in read[name]]
        swapped = [back for _, _, back in runs]
        oriented = [[m.T.contiguous() for m in maps] if back else maps for maps, _, back in runs]
        items = runs[0][1]
        readers = readers_of([found for _, found, _ in runs], swapped)
        sure, possible = [item.sure for item in items], [item.possible for item in items]
        result = choose_and_report(means(oriented), sure, possible, args.choose, readers)
        result.pop("candidates")
        results["+".join(args.pairs[:size])] = result
    best = pick(results)
    for name, result in results.items():
        result["picked"] = name == best
    return results


def table(results: dict[str, dict], choose: int, pairs: int) -> list[str]:
    rows = [(f"the supervised heads' Shift-Att maps averaged; the set, mean, extraction and floor chosen on "
             f"pairs 1–{choose}, reported on {choose + 1}–{pairs}"), "",
            f"| pairs joined (models) | chosen on 1–{choose} | AER there | precision | recall | AER |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        mark = "**" if r["picked"] else ""
        rows.append(f"| {mark}{name.replace('+', ', ')} ({2 * len(name.split('+'))}){mark} | {r['chosen']} | "
                    f"{100 * r['chosen_aer']:.1f} | {r['precision']:.1%} | {r['recall']:.1%} | "
                    f"{mark}{100 * r['aer']:.1f}{mark} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = gold_files(args.corpora)
    if skipped_without_gold(files, args):
        return 0
    train(args)
    if args.dry_run:
        return 0
    results = join(args)
    pairs = len(files["links"].read_text(encoding="utf-8").splitlines())
    print("\n".join(["", *table(results, args.choose, pairs)]))
    (args.out / "ensemble.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
