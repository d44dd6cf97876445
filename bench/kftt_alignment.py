"""The explanation lab on human gold: KFTT Japanese–English models, supervised (guided alignment) or not, in
both directions, every method scored on KFTT's gold pairs, each method's map chosen on pairs 1–100 and
reported on the other 482, beside the two directions symmetrised, the diagonal, eflomal trained on the same
30,000 pairs and scored on the same 482, and the published table.

    python bench/kftt_alignment.py                        # train the four runs (or reuse them), score, print
    python bench/kftt_alignment.py --jobs 2 --max-time 00:00:45:00
    python bench/kftt_alignment.py --checkpoint CKPT      # score one trained run, train nothing
    python bench/kftt_alignment.py --no-eflomal --methods attention value_norms
    python bench/kftt_alignment.py --shift --runs sup_ja_en sup_en_ja --max-time 00:01:15:00 \
        --out results_shift
    python bench/kftt_alignment.py --labels grow-diag-final-and --shift --alignment-weight 1 ...
    python bench/kftt_alignment.py --labels grow-diag-final-and --shift --full-context ...
    python bench/kftt_alignment.py --labels grow-diag-final-and --shift --null ...   # unlinked words -> EOS

The four runs are ``train.py --config configs/kftt_ja_en.yaml`` in each direction (``--data.source_lang en
--data.target_lang ja`` for English→Japanese), supervised with ``--data.alignment_labels eflomal
--model.alignment_layer 2 --model.alignment_head 1 --model.alignment_weight λ`` (and with ``--shift``,
``--model.alignment_shift true``: each word's links train the row of the step that reads the word, Shift-Att's
reading; with ``--null``, ``--model.alignment_null true``: a word without a link trains toward the source's
end of sentence; with ``--labels grow-diag-final-and``, ``--data.alignment_labels FILE`` of eflomal's two
directions joined, made here on the training pairs that repeat no gold pair and kept in ``--out``/labels) or
not, each on one thread (``OMP_NUM_THREADS=1``), ``--jobs`` of them side by side, a supervised run beside its
unsupervised twin so that both see the same load; a run whose ``last.ckpt`` is already in ``--out``/runs is
reused. Each is scored by ``evaluate.py explain CKPT --gold-alignments ... --gold-sentences ... --links-out``
(its figures and links go to ``--out``); its BLEU on KFTT's dev is the one its last validation logged (greedy,
the first 300 dev pairs). The symmetrised rows join the two directions' maps chosen under the forward arg-max
(``<method>.argmax.links``) by grow-diag-final-and, as eflomal's two directions are joined, and score them on
the same reporting pairs; the averaged row is ``bench/kftt_joined.py`` on the two supervised runs (their
heads' word maps averaged before links are extracted). eflomal is ``bench/kftt_eflomal.py --report-from 101``
at its best: English whole or cut to 4–6 characters, its default length or four times it, the setting
chosen on pairs 1–100 (``pip install -e .[align]``). Without the corpus, the command says so and exits
cleanly.
"""

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/kftt_alignment.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.aer import score_links
from analysis.symmetrise import grow_diag_final_and
from data.alignment_labels import write_links_file
from data.corpora import read_bitext, read_parallel
from data.gold import not_repeating, parse_links, read_gold

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = REPO.parent / "shared" / "corpora"
METHODS = ("attention", "shift_att", "value_norms", "rollout", "grad_x_input", "integrated_gradients")
# The extractions of the table, as the rows name them.
EXTRACTIONS = {"argmax": "forward arg-max", "argmax_grow_diag_final_and": "grow-diag-final-and",
               "threshold": "threshold, each target word's row",
               "threshold_both": "threshold, row and column (both ways)"}
# eflomal at its best: English words whole or cut to 4-6 characters, its default length or 4 times it, the
# setting chosen on the choosing pairs (bench/kftt_eflomal.py's grid; about ten minutes on one thread).
EFLOMAL_GRID = ("--stem", "0", "4", "5", "6", "--length", "1", "4")
LABELS = ("forward", "grow-diag-final-and")  # --labels: eflomal's links the supervised runs train on
CHOOSE = 100  # gold pairs 1–100 choose each map (the pairs training scores); 101–582 report it
# Dou & Neubig 2021 (awesome-align), Table 2, Japanese–English, this gold set; aligners trained on far more
# than 30,000 pairs. SimAlign: Jalili Sabet et al. 2020.
PUBLISHED = (("fast_align", 51.1), ("Mgiza", 48.0), ("eflomal", 47.5), ("SimAlign (mBERT, argmax)", 46.6),
             ("awesome-align, not fine-tuned", 45.6), ("awesome-align, fine-tuned", "37.4–38.4"))


@dataclass(frozen=True)
class Run:
    """One of the four trainings: a direction, supervised or not."""

    source: str
    target: str
    supervised: bool

    @property
    def name(self) -> str:
        return f"{'sup' if self.supervised else 'unsup'}_{self.source}_{self.target}"

    @property
    def label(self) -> str:
        return f"{self.source}→{self.target}, {'supervised head' if self.supervised else 'unsupervised'}"


# In the order they train: each direction's supervised run beside its unsupervised twin.
RUNS = (Run("ja", "en", True), Run("ja", "en", False), Run("en", "ja", True), Run("en", "ja", False))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA, help="the folder holding kftt-ja-en/")
    p.add_argument("--checkpoint", type=Path, help="a trained run's checkpoint: score it, train nothing")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="default: all six")
    p.add_argument("--ig-steps", type=int, default=8, help="Integrated Gradients' steps (default 8)")
    p.add_argument("--max-time", default="00:00:35:00", help="each run's training time (default 35 min)")
    p.add_argument("--alignment-weight", type=float, default=0.5,
                   help="λ of the supervised runs (default 0.5; see docs/explanations.md)")
    p.add_argument("--shift", action="store_true",
                   help="supervise each word's links at the step that reads the word "
                        "(--model.alignment_shift)")
    p.add_argument("--full-context", action="store_true",
                   help="read the supervised head with the whole target in view, in training and when it "
                        "aligns (--model.alignment_full_context, Garg et al. 2019)")
    p.add_argument("--null", action="store_true",
                   help="--model.alignment_null: the supervised head trained to point a word without a link "
                   "at the source's end of sentence")
    p.add_argument("--alignment-layer", type=int, default=2, metavar="LAYER",
                   help="the decoder layer whose first head the supervised runs train, counted from 1 "
                        "(default 2: the penultimate of the config's three, as Garg et al. chose)")
    p.add_argument("--labels", choices=LABELS, default="forward",
                   help="the supervised runs' links: eflomal's forward direction, made by the run (default), "
                        "or its two directions joined by grow-diag-final-and, made here")
    p.add_argument("--label-stem", type=int, default=0, metavar="N",
                   help="with --labels grow-diag-final-and: eflomal reads each English word cut to its "
                        "first N characters (default 0: whole words; 4 is the usual cut for a small corpus)")
    p.add_argument("--label-iterations", type=float, default=1.0, metavar="X",
                   help="with --labels grow-diag-final-and: eflomal's iterations, X times its default")
    p.add_argument("--seed", type=int, default=None,
                   help="every run's seed (seed_everything and the batches' order; default: the config's), "
                   "e.g. a second seed of a pair to average with the first in bench/kftt_joined.py")
    p.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="runs side by side, one thread each")
    p.add_argument("--runs", nargs="+", choices=[r.name for r in RUNS], default=[r.name for r in RUNS],
                   help="train and score only these runs (default: all four)")
    p.add_argument("--no-eflomal", action="store_true", help="leave eflomal out")
    p.add_argument("--out", type=Path, default=Path("results_kftt"), help="runs, figures, links and scores")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    if args.label_stem < 0 or args.label_iterations <= 0:
        p.error(f"--label-stem must be 0 or more and --label-iterations more than 0, got {args.label_stem} "
                f"and {args.label_iterations:g}")
    if args.alignment_layer < 1:
        p.error(f"--alignment-layer counts decoder layers from 1, got {args.alignment_layer}")
    if (args.label_stem, args.label_iterations) != (0, 1) and args.labels != "grow-diag-final-and":
        p.error("--label-stem and --label-iterations make the links of --labels grow-diag-final-and; the "
                "forward links are made by each run's own eflomal")
    return args


def gold_files(corpora: Path) -> dict[str, Path]:
    kftt = corpora / "kftt-ja-en"
    gold = kftt / "gold"
    return {"corpus": kftt, "sentences": gold / "ja-en.src-tgt", "links": gold / "ja-en.gold"}


def train_command(
    files: dict[str, Path], out: Path, run: Run, max_time: str, weight: float, shift: bool = False,
    labels: Path | None = None, full_context: bool = False, seed: int | None = None, null: bool = False,
    layer: int = 2,
) -> list[str]:
    """``labels``: a links file in the run's direction instead of the run's own eflomal links; ``seed``:
    the model's and the batches' instead of the config's; ``layer``: the supervised decoder layer (from 1)."""
    shifted = ["--model.alignment_shift", "true"] if shift else []
    shifted += ["--model.alignment_full_context", "true"] if full_context else []
    shifted += ["--model.alignment_null", "true"] if null else []
    # Guided alignment as Garg et al. 2019 set it: the first head of a decoder layer (theirs: the
    # penultimate), eflomal's links unless a links file is given.
    supervision = [
        "--data.alignment_labels", "eflomal" if labels is None else str(labels),
        "--model.alignment_layer", str(layer), "--model.alignment_head", "1",
        "--model.alignment_weight", str(weight), *shifted,
    ] if run.supervised else []  # fmt: skip
    return [
        sys.executable, "train.py", "--config", "configs/kftt_ja_en.yaml",
        "--data.path", str(files["corpus"]), "--data.gold.sentences", str(files["sentences"]),
        "--data.gold.alignments", str(files["links"]),
        "--data.source_lang", run.source, "--data.target_lang", run.target, *supervision,
        "--trainer.max_time", max_time, "--trainer.val_check_interval", "0.5",
        "--model.decode_every_n_epochs", "1", "--model.decode_max_sentences", "300",
        "--trainer.logger.init_args.save_dir", str(out / "runs"),
        "--trainer.logger.init_args.name", run.name, "--trainer.enable_progress_bar=false",
        *([] if seed is None else ["--seed_everything", str(seed), "--data.seed", str(seed)]),
    ]  # fmt: skip


def labels_file(out: Path, run: Run, stem: int = 0, iterations: float = 1.0) -> Path:
    """The joined training links of ``run``'s direction made with eflomal reading English cut to ``stem``
    characters (0: whole words) for ``iterations`` times its default; the defaults keep the first name."""
    settings = (f".en{stem}" if stem else "") + (f".x{iterations:g}" if iterations != 1 else "")
    return out / "labels" / f"{run.source}-{run.target}.grow-diag-final-and{settings}.txt"


def symmetrised_labels(files: dict[str, Path], out: Path, stem: int = 0, iterations: float = 1.0) -> None:
    """eflomal's links of the KFTT training pairs, its two directions joined by grow-diag-final-and, as
    ``--data.alignment_labels`` files of each direction (one line a training pair, in the files' order): the
    pairs that repeat a gold pair (dropped from training) are never aligned and get a blank line. eflomal
    reads the English cut to ``stem`` characters (0: whole words; the links name the same words) and runs
    ``iterations`` times its default. Made once and kept in ``out``/labels."""
    from bench.kftt_eflomal import align, cut_words  # eflomal, only for these labels

    paths = [labels_file(out, Run(*sides, True), stem, iterations) for sides in (("ja", "en"), ("en", "ja"))]
    if all(path.is_file() for path in paths):
        print(f"reusing the labels in {paths[0].parent}")
        return
    train = read_parallel(files["corpus"] / "train.ja.gz", files["corpus"] / "train.en.gz")
    kept = not_repeating(train, read_bitext(files["sentences"]))
    sources = [" ".join(train[i].words("source")) for i in kept]
    targets = [cut_words(" ".join(train[i].words("target")).lower(), stem) for i in kept]
    forward, reverse = align(sources, targets, samplers=3, length=iterations)
    joined = dict(zip(kept, map(grow_diag_final_and, forward, reverse), strict=True))
    links = [joined.get(i, set()) for i in range(len(train))]
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    write_links_file(paths[0], links)
    write_links_file(paths[1], [{(target, source) for source, target in pair} for pair in links])
    print(f"eflomal's grow-diag-final-and links of {len(kept):,} training pairs written to {paths[0].parent} "
          f"(blank: the {len(train) - len(kept)} that repeat a gold pair)")


def skipped_without_gold(files: dict[str, Path], args: argparse.Namespace) -> bool:
    """Says so and is true when KFTT's gold is not in ``--corpora`` (a dry run needs none)."""
    if args.dry_run or (files["links"].is_file() and files["sentences"].is_file()):
        return False
    print(f"skipped: the KFTT corpus is not in {args.corpora} (give the corpora folder with --corpora)")
    return True


def checkpoint_of(out: Path, run: Run) -> Path:
    return out / "runs" / run.name / "version_0" / "checkpoints" / "last.ckpt"


def evaluate_command(
    checkpoint: Path, files: dict[str, Path], methods: list[str], ig_steps: int, out: Path
) -> list[str]:
    return [
        sys.executable, "evaluate.py", "explain", str(checkpoint), "--gold-alignments", str(files["links"]),
        "--gold-sentences", str(files["sentences"]), "--methods", *methods,
        "--ig-steps", str(ig_steps), "--gold-choose", str(CHOOSE), "--analysis-out", str(out / "figures"),
        "--links-out", str(out / "links"), "--overwrite", "--quiet",
    ]  # fmt: skip


def training_figures(run_dir: Path) -> dict:
    """What a run logged: its last validation's BLEU and chrF (greedy, on the first
    ``decode_max_sentences`` dev pairs), its updates, and its median training speed."""
    from bench.curves import read_scalars  # TensorBoard, only when figures are read

    events, tags = read_scalars(str(run_dir))
    last = {tag: events.Scalars(tag)[-1] for tag in ("val/bleu", "val/chrf") if tag in tags}
    speed = "train/tokens_per_s"
    speeds = sorted(e.value for e in events.Scalars(speed)) if speed in tags else []
    return {"bleu": last["val/bleu"].value if "val/bleu" in last else None,
            "chrf": last["val/chrf"].value if "val/chrf" in last else None,
            "steps": max((events.Scalars(tag)[-1].step for tag in tags), default=0) + 1,
            "tokens_per_s": speeds[len(speeds) // 2] if speeds else None}


def one_thread() -> dict[str, str]:
    return os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(command: list[str], dry_run: bool) -> str:
    print(" ".join(command), flush=True)
    if dry_run:
        return ""
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, env=one_thread())
    if done.returncode != 0:
        last_line = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: {' '.join(command[:3])} ... failed (exit {done.returncode}): {last_line}")
    return done.stdout


def train_all(files: dict[str, Path], args: argparse.Namespace) -> None:
    """Train the runs whose checkpoint is not in ``--out`` yet, ``--jobs`` at a time, one thread each."""
    chosen = [r for r in RUNS if r.name in args.runs]
    todo = [r for r in chosen if not checkpoint_of(args.out, r).is_file()]
    for r in chosen:
        if r not in todo:
            print(f"reusing {checkpoint_of(args.out, r)}")
    symmetric = args.labels == "grow-diag-final-and"
    if symmetric and any(r.supervised for r in todo) and not args.dry_run:
        symmetrised_labels(files, args.out, args.label_stem, args.label_iterations)
    for start in range(0, len(todo), args.jobs):
        group = todo[start:start + args.jobs]
        commands = [train_command(files, args.out, r, args.max_time, args.alignment_weight, args.shift,
                                  labels_file(args.out, r, args.label_stem, args.label_iterations)
                                  if symmetric else None, args.full_context,
                                  args.seed, args.null, args.alignment_layer)
                    for r in group]
        for command in commands:
            print(" ".join(command), flush=True)
        if args.dry_run:
            continue
        (args.out / "runs").mkdir(parents=True, exist_ok=True)
        logs = [(args.out / "runs" / f"{r.name}.log").open("w", encoding="utf-8") for r in group]
        processes = [
            subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=one_thread())
            for command, log in zip(commands, logs, strict=True)
        ]
        for r, process, log in zip(group, processes, logs, strict=True):
            if process.wait() != 0:
                raise SystemExit(f"error: the {r.label} run failed (exit {process.returncode}): {log.name}")
            log.close()


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def read_links(path: Path) -> list[set[tuple[int, int]]]:
    return [parse_links(line, one_based=True)[0] for line in path.read_text(encoding="utf-8").splitlines()]


def symmetrised(out: Path, files: dict[str, Path], methods: list[str], supervised: bool, report: int) -> dict:
    """Per method, the two directions' forward arg-max maps joined by grow-diag-final-and, scored on the gold
    pairs from ``report`` on (1-based), as eflomal's rows are."""
    gold = read_gold(files["sentences"], files["links"], one_based=True)
    sure, possible = gold.sure()[report - 1:], gold.possible()[report - 1:]
    scores = {}
    for method in methods:
        forward, reverse = (read_links(out / "links" / r.name / f"{method}.argmax.links")
                            for r in RUNS if r.supervised == supervised)  # ja→en, en→ja
        joined = [grow_diag_final_and(f, b) for f, b in zip(forward, reverse, strict=True)][report - 1:]
        scores[method] = vars(score_links(joined, sure, possible))
    return scores


def averaged_heads(args: argparse.Namespace) -> dict | None:
    """``bench/kftt_joined.py`` on the two supervised runs: their supervised heads' word maps (Shift-Att with
    ``--shift``, else cross-attention) averaged, the extraction chosen on pairs 1–100; None without both."""
    ja_en, en_ja = (checkpoint_of(args.out, r) for r in RUNS if r.supervised)
    if not all(r.name in args.runs for r in RUNS if r.supervised):
        return None
    kept = args.out / "scores" / "averaged_supervised.json"
    if not kept.is_file() or kept.stat().st_mtime < max(ja_en.stat().st_mtime, en_ja.stat().st_mtime):
        method = "shift_att" if args.shift else "attention"
        run([sys.executable, "bench/kftt_joined.py", str(ja_en), str(en_ja), "--method", method,
             "--choose", str(CHOOSE), "--json", str(kept)], dry_run=False)
    figures = json.loads(kept.read_text(encoding="utf-8"))
    return {"method": "shift_att" if args.shift else "attention", **figures["averaged"]}


def method_rows(scores: dict, label: str) -> list[str]:
    rows = []
    for method, by_extraction in scores["best"].items():
        for extraction, name in EXTRACTIONS.items():
            best = by_extraction.get(extraction)
            if best is None:
                continue
            where = best["layer"] + (f" head {best['head']}" if best.get("head") else "")
            rows.append(f"| {label}: {method} | {name} | {where} | {best['precision']:.1%} | "
                        f"{best['recall']:.1%} | {100 * best['aer']:.1f} | {100 * best['chosen_aer']:.1f} |")
    return rows


def table(scores: dict[str, dict], symmetric: dict[str, dict], eflomal: dict | None,
          averaged: dict | None = None) -> list[str]:
    """The docs' table: per run each method's chosen map per extraction, the symmetrised directions, the
    diagonal, eflomal, the literature; its first line says which gold pairs chose the maps and which report
    them."""
    parts = next(iter(scores.values()))["parts"]
    report = f"pairs {parts['report'][0]}–{parts['report'][1]}"
    header = (f"| aligner | extraction | map chosen on pairs {parts['choose'][0]}–{parts['choose'][1]} | "
              f"precision | recall | AER ({report}) | AER where chosen |")
    rows = [f"Maps {parts['about']}.", "", header, "|---|---|---|---|---|---|---|"]
    for label, run_scores in scores.items():
        rows += method_rows(run_scores, label)
    for label, by_method in symmetric.items():
        for method, score in by_method.items():
            rows.append(f"| {label}: {method} | grow-diag-final-and of the two directions' forward arg-max | "
                        f"| {score['precision']:.1%} | {score['recall']:.1%} | {100 * score['aer']:.1f} | |")
    if averaged is not None:
        rows.append(f"| both directions' supervised heads: {averaged['method']} | their word maps averaged, "
                    f"then {averaged['chosen']} | | {averaged['precision']:.1%} | {averaged['recall']:.1%} | "
                    f"{100 * averaged['aer']:.1f} | {100 * averaged['chosen_aer']:.1f} |")
    diagonal = next(iter(scores.values()))["diagonal"]
    rows.append(f"| diagonal: target word j to source word ⌊(j + ½)·S/T⌋ | | | {diagonal['precision']:.1%} | "
                f"{diagonal['recall']:.1%} | {100 * diagonal['aer']:.1f} | |")
    scored = (eflomal or {}).get("pairs", "all gold pairs")
    setting = ""
    if eflomal and eflomal.get("grid"):
        stem = f"English cut to {eflomal['stem']} characters" if eflomal["stem"] else "whole words"
        setting = f"; {stem}, {eflomal['length']:g}× its length, chosen on pairs 1–{CHOOSE}"
    for name, score in (eflomal or {}).get("scores", {}).items():
        rows.append(f"| eflomal, 30k pairs ({scored}{setting}) | {name} | | {score['precision']:.1%} | "
                    f"{score['recall']:.1%} | {100 * score['aer']:.1f} | |")
    for name, aer in PUBLISHED:
        rows.append(f"| {name} (published, all 582 pairs) | | | | | {aer} | |")
    return rows


def bleu_rows(bleu: dict[str, dict]) -> list[str]:
    rows = ["| run | updates | target tokens/s (median) | BLEU, dev (first 300 pairs, greedy) | chrF |",
            "|---|---|---|---|---|"]
    for label, figures in bleu.items():
        speed = "" if figures["tokens_per_s"] is None else f"{figures['tokens_per_s']:,.0f}"
        bleu_, chrf = ("" if figures[key] is None else f"{figures[key]:.2f}" for key in ("bleu", "chrf"))
        rows.append(f"| {label} | {figures['steps']:,} | {speed} | {bleu_} | {chrf} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = gold_files(args.corpora)
    if skipped_without_gold(files, args):
        return 0
    if args.checkpoint is not None:
        checkpoints = {"checkpoint": (args.checkpoint, args.out / "links" / "checkpoint")}
    else:
        train_all(files, args)
        checkpoints = {r.label: (checkpoint_of(args.out, r), args.out / "links" / r.name)
                       for r in RUNS if r.name in args.runs}
    scores, bleu = {}, {}
    for label, (checkpoint, links) in checkpoints.items():
        kept = args.out / "scores" / f"{links.name}.json"  # reused while the checkpoint stays older
        if not args.dry_run and kept.is_file() and kept.stat().st_mtime > checkpoint.stat().st_mtime:
            print(f"reusing the figures of {checkpoint} in {kept}")
            scores[label], bleu[label] = json.loads(kept.read_text(encoding="utf-8")).values()
            continue
        command = evaluate_command(checkpoint, files, args.methods, args.ig_steps, args.out)
        command[command.index("--links-out") + 1] = str(links)
        command[command.index("--analysis-out") + 1] = str(args.out / "figures" / links.name)
        output = run(command, args.dry_run)
        if not args.dry_run:
            scores[label], bleu[label] = last_json(output), training_figures(checkpoint.parent.parent)
            kept.parent.mkdir(parents=True, exist_ok=True)
            figures = {"alignment": scores[label], "bleu": bleu[label]}
            kept.write_text(json.dumps(figures) + "\n", encoding="utf-8")
    eflomal = None
    if not args.no_eflomal:
        command = [sys.executable, "bench/kftt_eflomal.py", "--corpora", str(args.corpora),
                   "--report-from", str(CHOOSE + 1), *EFLOMAL_GRID]
        eflomal_output = run(command, args.dry_run)
        eflomal = last_json(eflomal_output) if eflomal_output else None
    if args.dry_run:
        return 0
    symmetric = {}
    for kind, supervised in (("supervised heads", True), ("unsupervised", False)):
        both = [r.name for r in RUNS if r.supervised == supervised]
        if args.checkpoint is None and all(name in args.runs for name in both):
            symmetric[f"both directions, {kind}"] = symmetrised(args.out, files, args.methods, supervised,
                                                                CHOOSE + 1)
    args.out.mkdir(parents=True, exist_ok=True)
    averaged = averaged_heads(args) if args.checkpoint is None else None
    results = {"models": scores, "symmetrised": symmetric, "averaged": averaged, "bleu": bleu,
               "eflomal": eflomal}
    (args.out / "scores.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("\n".join(["", *table(scores, symmetric, eflomal, averaged), "", *bleu_rows(bleu)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
