"""How the cost of getting a corpus ready grows with its size: time and peak resident memory to read it, train
the tokenizer, encode it and start batching, at 30k, 300k and 3M training pairs.

    python bench/corpus_growth.py --multi30k ../shared/corpora/multi30k               # 30k, 300k, 3M pairs
    python bench/corpus_growth.py --multi30k ... --sizes 30000 300000 --threads 2
    python bench/corpus_growth.py --multi30k ... --json growth.json

The corpora are made by recombining Multi30k's training pairs: each new pair joins two pairs drawn at random,
source to source and target to target, so that sentences are about 25 words (WMT's are about that; Multi30k's
about 12), the vocabulary is Multi30k's, and few pairs repeat. They are written as ``train.tsv`` (with
Multi30k's val and test2016 as ``val.tsv`` and ``test.tsv``) under ``--work`` (a temporary folder by default),
and each size is read by a fresh process, through the data module ``train.py`` uses with the Multi30k recipe's
settings (joint BPE of 8000, punctuation split, 1024-token batches), one stage after another:

- read: ``datamodule.pairs("val")`` reads every split's file;
- tokenizer: ``datamodule.src_tokenizer`` trains the BPE on the training pairs (both sides);
- encode: ``datamodule.dataloader("train", shuffle=True)`` encodes them and groups them into batches;
- first batch: the loader's first batch.

Each stage prints its seconds and the process's resident memory after it; ``peak`` is the process's largest
resident size (``getrusage``), as ``/usr/bin/time -v`` reports it. The last lines extrapolate, linearly in
the pairs, the peak at WMT14 English-German's size (4.5M pairs).
"""

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/corpus_growth.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = (30_000, 300_000, 3_000_000)
WMT14_PAIRS = 4_500_000
STAGES = ("read", "tokenizer", "encode", "first batch")


def make_corpus(multi30k: Path, folder: Path, pairs: int, seed: int = 1234) -> None:
    """``folder/{train,val,test}.tsv``: ``pairs`` recombined training pairs; Multi30k's val and test2016."""
    from data.corpora import read_parallel

    def split(name: str) -> list[tuple[str, str]]:
        return [(p.source, p.target) for p in read_parallel(multi30k / f"{name}.de", multi30k / f"{name}.en")]

    train = split("train")
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with open(folder / "train.tsv", "w", encoding="utf-8") as out:
        for _ in range(pairs):
            (s1, t1), (s2, t2) = rng.choice(train), rng.choice(train)
            out.write(f"{s1} {s2}\t{t1} {t2}\n")
    for name, multi30k_name in (("val", "val"), ("test", "test2016")):
        with open(folder / f"{name}.tsv", "w", encoding="utf-8") as out:
            out.writelines(f"{s}\t{t}\n" for s, t in split(multi30k_name))


def resident_mb() -> float:
    """This process's resident memory now, in MB (Linux's /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mb() -> float:
    """This process's largest resident memory so far, in MB (``ru_maxrss`` is in kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(folder: Path) -> dict:
    """Run the stages on the corpus in ``folder``; seconds and resident MB after each, and the peak."""
    from data.datamodule import TranslationDataModule

    start = time.perf_counter()
    datamodule = TranslationDataModule(
        dataset="tsv", path=str(folder), source_lang="de", target_lang="en", tokenizer="bpe", vocab_size=8000,
        split_punctuation=True, shared_vocab=True, max_tokens=1024, num_workers=0,
    )
    result: dict = {"pairs": None, "stages": {}, "start_mb": resident_mb()}

    def stage(name: str, action) -> object:
        begun = time.perf_counter()
        value = action()
        result["stages"][name] = {"seconds": time.perf_counter() - begun, "resident_mb": resident_mb()}
        return value

    stage("read", lambda: datamodule.pairs("val"))
    stage("tokenizer", lambda: datamodule.src_tokenizer)
    loader = stage("encode", lambda: datamodule.dataloader("train", shuffle=True))
    stage("first batch", lambda: next(iter(loader)))
    result["pairs"] = len(datamodule.pairs("train"))
    result["seconds"] = time.perf_counter() - start
    result["peak_mb"] = peak_mb()
    return result


def report(results: list[dict]) -> list[str]:
    """The table of the sizes' stages, and the growth of the peak against the pairs."""
    heads = " | ".join(f"{s} s (MB after)" for s in STAGES)
    lines = [f"| training pairs | {heads} | total s | peak MB |",
             "|---|" + "---|" * (len(STAGES) + 2)]
    for r in results:
        cells = [f"{r['stages'][s]['seconds']:.1f} ({r['stages'][s]['resident_mb']:.0f})" for s in STAGES]
        row = " | ".join(cells)
        lines.append(f"| {r['pairs']:,} | {row} | {r['seconds']:.1f} | {r['peak_mb']:.0f} |")
    if len(results) >= 2:
        small, large = results[0], results[-1]
        per_pair = (large["peak_mb"] - small["peak_mb"]) / (large["pairs"] - small["pairs"])
        at_wmt = large["peak_mb"] + per_pair * (WMT14_PAIRS - large["pairs"])
        lines.append(f"peak memory grows {per_pair * 1e6 / 1024:.2f} GB per million training pairs "
                     f"(between {small['pairs']:,} and {large['pairs']:,}); at {WMT14_PAIRS:,} pairs "
                     f"(WMT14 en-de) about {at_wmt / 1024:.1f} GB, extrapolated linearly")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--multi30k", type=Path, help="Multi30k's folder (train.*, val.*, test2016.*)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="training pairs to make")
    parser.add_argument("--threads", type=int, default=None, help="RAYON_NUM_THREADS and torch's, per size")
    parser.add_argument("--work", type=Path, help="where the corpora go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON lines here")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child: one corpus folder
    args = parser.parse_args(argv)
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    if args.multi30k is None or not (args.multi30k / "train.de").is_file():
        print(f"skipped: no Multi30k at {args.multi30k} (give its folder with --multi30k)")
        return
    if any(size < 1 for size in args.sizes):
        parser.error(f"--sizes must be positive numbers of pairs, got {args.sizes}")
    env = None
    if args.threads is not None:
        import os

        threads = str(args.threads)
        env = {**os.environ, "RAYON_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        results = []
        for size in sorted(args.sizes):
            folder = work / f"pairs_{size}"
            if not (folder / "train.tsv").is_file():
                make_corpus(args.multi30k, folder, size)
            child = subprocess.run(
                [sys.executable, __file__, "--measure", str(folder)], env=env, capture_output=True, text=True,
                check=False,
            )
            if child.returncode != 0:
                raise SystemExit(f"error: measuring {size} pairs failed:\n{child.stderr[-2000:]}")
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
            done = results[-1]
            print(f"{size:,} pairs: {done['seconds']:.1f} s, peak {done['peak_mb']:.0f} MB", flush=True)
    for line in report(results):
        print(line)
    if args.json is not None:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in results))


if __name__ == "__main__":
    main()
