"""The explanation lab on human gold: every method of a KFTT Japanese→English model scored on KFTT's gold
pairs, each method's map chosen on pairs 1–100 and reported on the other 482, beside the diagonal, eflomal
trained on the same 30,000 pairs and scored by the same scorer, and the published table.

    python bench/kftt_alignment.py                          # train configs/kftt_ja_en.yaml (an hour), score
    python bench/kftt_alignment.py --checkpoint CKPT        # score a trained run
    python bench/kftt_alignment.py --checkpoint CKPT --no-eflomal --methods attention value_norms

Training is ``train.py --config configs/kftt_ja_en.yaml`` with the corpus paths of ``--corpora``; scoring is
``evaluate.py CKPT --gold-alignments ... --gold-sentences ...`` (its figures go to ``--out``), and eflomal is
``bench/kftt_eflomal.py`` (``pip install -e .[align]``). The table printed at the end is the one in
docs/explanations.md: per method and extraction (the forward arg-max, grow-diag-final-and of both arg-max
directions, the threshold on each target word's row, the threshold on row and column) the map (a layer, or
one head) of lowest AER on gold pairs 1–100, with its precision, recall and AER on pairs 101–582 and its AER
on the pairs that chose it; then the diagonal on pairs 101–582, eflomal's rows (scored on the pairs its
script scores, which the row says) and the published AERs (quoted, with their source). Each chosen map's
links are written to ``--out``/links (``evaluate.py --links-out``: Pharaoh, 1-based, as the gold).
Without the corpus, the command says so and exits cleanly.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = REPO.parent / "shared" / "corpora"
METHODS = ("attention", "shift_att", "value_norms", "rollout", "grad_x_input", "integrated_gradients")
# The extractions of the table, as the rows name them.
EXTRACTIONS = {"argmax": "forward arg-max", "argmax_grow_diag_final_and": "grow-diag-final-and",
               "threshold": "threshold, each target word's row",
               "threshold_both": "threshold, row and column (both ways)"}
CHOOSE = 100  # gold pairs 1–100 choose each map (the pairs training scores); 101–582 report it
# Dou & Neubig 2021 (awesome-align), Table 2, Japanese–English, this gold set; aligners trained on far more
# than 30,000 pairs. SimAlign: Jalili Sabet et al. 2020.
PUBLISHED = (("fast_align", 51.1), ("Mgiza", 48.0), ("eflomal", 47.5), ("SimAlign (mBERT, argmax)", 46.6),
             ("awesome-align, not fine-tuned", 45.6), ("awesome-align, fine-tuned", "37.4–38.4"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA, help="the folder holding kftt-ja-en/")
    p.add_argument("--checkpoint", type=Path, help="a trained run's checkpoint: score it, train nothing")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="default: all six")
    p.add_argument("--ig-steps", type=int, default=8, help="Integrated Gradients' steps (default 8)")
    p.add_argument("--no-eflomal", action="store_true", help="leave eflomal out")
    p.add_argument("--out", type=Path, default=Path("results_kftt"), help="runs, figures and scores")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    return p.parse_args(argv)


def gold_files(corpora: Path) -> dict[str, Path]:
    kftt = corpora / "kftt-ja-en"
    gold = kftt / "gold"
    return {"corpus": kftt, "sentences": gold / "ja-en.src-tgt", "links": gold / "ja-en.gold"}


def train_command(files: dict[str, Path], out: Path) -> list[str]:
    return [
        sys.executable, "train.py", "--config", "configs/kftt_ja_en.yaml",
        "--data.path", str(files["corpus"]), "--data.gold_sentences", str(files["sentences"]),
        "--data.gold_alignments", str(files["links"]),
        "--trainer.logger.init_args.save_dir", str(out / "runs"), "--trainer.enable_progress_bar=false",
    ]  # fmt: skip


def evaluate_command(
    checkpoint: Path, files: dict[str, Path], methods: list[str], ig_steps: int, out: Path
) -> list[str]:
    return [
        sys.executable, "evaluate.py", str(checkpoint), "--gold-alignments", str(files["links"]),
        "--gold-sentences", str(files["sentences"]), "--alignment-methods", *methods,
        "--ig-steps", str(ig_steps), "--gold-choose", str(CHOOSE), "--analysis-out", str(out / "figures"),
        "--links-out", str(out / "links"), "--overwrite",
    ]  # fmt: skip


def run(command: list[str], dry_run: bool) -> str:
    print(" ".join(command), flush=True)
    if dry_run:
        return ""
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last_line = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: {' '.join(command[:3])} ... failed (exit {done.returncode}): {last_line}")
    print(done.stdout, end="", flush=True)
    return done.stdout


def table(scores: dict, eflomal: dict | None) -> list[str]:
    """The docs' table: each method's chosen map per extraction, the diagonal, eflomal, the literature; its
    first line says which gold pairs chose the maps and which report them."""
    parts = scores["parts"]
    report = f"pairs {parts['report'][0]}–{parts['report'][1]}"
    header = (f"| aligner | extraction | map chosen on pairs {parts['choose'][0]}–{parts['choose'][1]} | "
              f"precision | recall | AER ({report}) | AER where chosen |")
    rows = [f"Maps {parts['about']}.", "", header, "|---|---|---|---|---|---|---|"]
    for method, by_extraction in scores["best"].items():
        for extraction, label in EXTRACTIONS.items():
            best = by_extraction.get(extraction)
            if best is None:
                continue
            where = best["layer"] + (f" head {best['head']}" if best.get("head") else "")
            rows.append(f"| {method} | {label} | {where} | {best['precision']:.1%} | {best['recall']:.1%} "
                        f"| {100 * best['aer']:.1f} | {100 * best['chosen_aer']:.1f} |")
    diagonal = scores["diagonal"]
    rows.append(f"| diagonal: target word j to source word ⌊(j + ½)·S/T⌋ | | | {diagonal['precision']:.1%} | "
                f"{diagonal['recall']:.1%} | {100 * diagonal['aer']:.1f} | |")
    scored = (eflomal or {}).get("pairs", "all gold pairs")
    for name, score in (eflomal or {}).get("scores", {}).items():
        rows.append(f"| eflomal, 30k pairs ({scored}) | {name} | | {score['precision']:.1%} | "
                    f"{score['recall']:.1%} | {100 * score['aer']:.1f} | |")
    for name, aer in PUBLISHED:
        rows.append(f"| {name} (published, all 582 pairs) | | | | | {aer} | |")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = gold_files(args.corpora)
    if not (files["links"].is_file() and files["sentences"].is_file()) and not args.dry_run:
        print(f"skipped: the KFTT corpus is not in {args.corpora} (give the corpora folder with --corpora)")
        return 0
    checkpoint = args.checkpoint
    if checkpoint is None:
        run(train_command(files, args.out), args.dry_run)
        checkpoint = args.out / "runs" / "kftt_ja_en" / "version_0" / "checkpoints" / "last.ckpt"
    output = run(evaluate_command(checkpoint, files, args.methods, args.ig_steps, args.out), args.dry_run)
    eflomal = None
    if not args.no_eflomal:
        command = [sys.executable, "bench/kftt_eflomal.py", "--corpora", str(args.corpora)]
        eflomal_output = run(command, args.dry_run)
        eflomal = json.loads(eflomal_output.strip().splitlines()[-1]) if eflomal_output else None
    if args.dry_run:
        return 0
    scores = json.loads(output.strip().splitlines()[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scores.json").write_text(json.dumps({"model": scores, "eflomal": eflomal}, indent=2) + "\n")
    print("\n".join(["", *table(scores, eflomal)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
