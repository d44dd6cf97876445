"""Speed of the Transformer, measured side by side with the usual alternatives, in one run on one machine.

    python bench/speed.py                   # full size (a few minutes on a CPU)
    python bench/speed.py --quick           # tiny dims, 1-2 iterations: checks that it runs
    python bench/speed.py --threads 4 --device cpu --json speed.json
    python bench/speed.py --decode-batch-sizes 16 64 256   # also greedy decoding at these batch sizes
    python bench/speed.py --device cuda     # in the precision train.py would choose there (bf16/fp16 mixed)
    python bench/speed.py --threads 2 --data ../shared/corpora/multi30k --repeats 3   # the README's figures
    python bench/speed.py --decode-tokens 40   # decodings of 40 tokens (default: a Multi30k reference's mean)

The figures, each from the module that measures it (``bench/speed_common.py`` holds what they share):
1. training tokens/s of ``model.Transformer`` vs the seq2seq model of PyTorch's tutorial "Language Translation
   with nn.Transformer and torchtext" (``bench/tutorial_model.py``), same batches, same optimiser; with
   ``--data``, also on train.py's own Multi30k batches (``bench/speed_training.py``);
2. greedy decoding sentences/s with the key/value cache vs re-running the decoder over the whole prefix, with
   the FLOPs each does, and beam search relative to greedy (``bench/speed_decoding.py``), every decoding
   ``--decode-tokens`` long: by default as long as greedy decoding of a Multi30k test reference of mean length
   (with ``--data``), else 16 tokens;
3. model FLOP/s in training as a fraction of the machine's measured matmul FLOP/s (in the training dtype);
4. ``model.Transformer``'s training step packed (computing on the tokens only) against padded;
5. ``model.Transformer`` against JoeyNMT's Transformer, where its environment exists
   (``bench/peers/speed_joeynmt.py``): training on the random batches and on ``train.py``'s own, and greedy
   decoding of ours with and without its cache beside JoeyNMT's; and against eole's, training on both kinds of
   batches (``bench/peers/speed_eole.py``).

``--repeats K`` runs the whole measurement K times and ends with the median and the range of every ratio.

Training runs in ``--precision``: by default on a GPU the one ``train.py`` would choose there (autocast,
with a gradient scaler for fp16, as Lightning's mixed precision does), and fp32 on a CPU, where the figures
in the README were measured. This file holds the command line, the order of the runs and the report.
"""

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as `python bench/speed.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers.speed_eole import EOLE_VENV, bench_eole, eole_lines
from bench.peers.speed_joeynmt import JOEYNMT_VENV, bench_joeynmt, joeynmt_lines
from bench.speed_common import QUICK, BenchConfig, bench_matmul, describe_machine, make_batches, padding_share
from bench.speed_decoding import bench_decoding, decode_length, decoding_lines
from bench.speed_training import (
    AUTOCAST_DTYPES,
    PRECISIONS,
    RecipeData,
    bench_packing,
    bench_recipe_training,
    bench_training,
    recipe_data,
    recipe_lines,
    training_lines,
    training_precision,
)
from tests.helpers.weight_surgery import EOS_SUPPRESSION

HOUR_D_FF = 512  # configs/multi30k.yaml's d_ff, and the peers' recipes sized like it (docs/peers.md)
TIED = " (tied: one embedding for source, target and output; the tutorial's model untied)"


def run(
    cfg: BenchConfig,
    device: torch.device,
    decode_batch_sizes: Sequence[int] = (),
    precision: str = "32-true",
    recipe: RecipeData | None = None,
    joeynmt_venv: Path | None = JOEYNMT_VENV,
    eole_venv: Path | None = EOLE_VENV,
) -> dict:
    """Every figure of the benchmark, as a dict; greedy decoding also at each of ``decode_batch_sizes``;
    training in ``precision``.

    With ``recipe`` (``recipe_data`` of the Multi30k folder), training is also measured on ``train.py``'s own
    batches; with ``joeynmt_venv`` and ``eole_venv``, JoeyNMT's and eole's Transformers too (each skipped,
    with the reason, where its venv is missing), on those batches as well.
    """
    dtype = AUTOCAST_DTYPES.get(precision, torch.float32)
    train_peak = bench_matmul(cfg.matmul_size, cfg.matmul_repeats, device, dtype)
    peak = train_peak if dtype == torch.float32 else bench_matmul(cfg.matmul_size, cfg.matmul_repeats, device)
    training = bench_training(cfg, device, precision)
    training["padding_share"] = padding_share(make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)[
        cfg.train_warmup :
    ])
    packing_result = bench_packing(cfg, device, precision)
    for name in ("ours", "tutorial"):
        training[name]["matmul_peak_fraction"] = training[name]["flop_per_s"] / train_peak
    decoding = bench_decoding(cfg, device, peak)
    by_batch_size = [  # the default batch size was just measured
        decoding if size == cfg.batch_size else bench_decoding(cfg, device, peak, batch_size=size, beam=False)
        for size in decode_batch_sizes
    ]
    comparisons = {}
    if recipe is not None:
        comparisons["training_recipe_batches"] = bench_recipe_training(cfg, device, recipe)
    if joeynmt_venv is not None:
        comparisons["joeynmt"] = bench_joeynmt(cfg, device, joeynmt_venv, recipe)
    if eole_venv is not None:
        comparisons["eole"] = bench_eole(cfg, device, eole_venv, recipe)
    return {
        "machine": describe_machine(device),
        "config": asdict(cfg),
        "matmul_flop_per_s": peak,
        "training_matmul_flop_per_s": train_peak,  # in the training dtype
        "training": training,
        "packing": packing_result,
        "decoding": decoding,
        "decoding_by_batch_size": by_batch_size,
        "eos_suppression": EOS_SUPPRESSION,
        **comparisons,
    }


def report(results: dict) -> str:
    """The figures as a compact table, headed by the machine they were measured on."""
    m, c = results["machine"], results["config"]
    where = f"{m['cpu']} ({m['logical_cpus']} logical CPUs)" + (f", {m['gpu']}" if m["gpu"] else "")
    lines = [
        f"machine: {where}, torch {m['torch']}, {m['threads']} threads, device {m['device']}",
        (
            f"sizes: d_model {c['d_model']}, {c['num_heads']} heads, "
            f"{c['num_layers']}+{c['num_layers']} layers, d_ff {c['d_ff']}, vocab {c['vocab_size']}"
            f"{TIED if c.get('tied') else ''}, "
            f"batch {c['batch_size']}, "
            f"lengths {c['min_len']}-{c['max_len']}, dropout {c['dropout']}"
        ),
        (
            f"peak fp32 matmul ({c['matmul_size']}^2 @ {c['matmul_size']}^2, best of {c['matmul_repeats']}): "
            f"{results['matmul_flop_per_s'] / 1e9:.1f} GFLOP/s"
        ),
        "",
        *training_lines(results),
        "",
        *decoding_lines(results),
        *recipe_lines(results),
        *joeynmt_lines(results),
        *eole_lines(results),
    ]
    return "\n".join(lines)

# Every ratio the report prints, as (label, path of keys into one run's results).
RATIOS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("training / tutorial, random batches", ("training", "ratio")),
    ("training / tutorial, train.py batches", ("training_recipe_batches", "ratio")),
    ("training / JoeyNMT, random batches", ("joeynmt", "training_ratio")),
    ("training / JoeyNMT, train.py batches", ("joeynmt", "recipe", "training_ratio")),
    ("training / eole, random batches", ("eole", "training_ratio")),
    ("training / eole, train.py batches", ("eole", "recipe", "training_ratio")),
    ("packed / padded, random batches", ("packing", "ratio")),
    ("packed outside attention / padded", ("packing", "outside_attention_ratio")),
    ("greedy: KV cache / prefix re-run", ("decoding", "cache_ratio")),
    ("greedy: ours with cache / JoeyNMT", ("joeynmt", "greedy_ratio")),
    ("greedy: ours without cache / JoeyNMT", ("joeynmt", "uncached_greedy_ratio")),
    ("beam / greedy", ("decoding", "beam_over_greedy")),
)


def ratio_spread(runs: Sequence[dict]) -> list[dict]:
    """The median, minimum and maximum of each of ``RATIOS`` over ``runs`` (each a ``run`` result), for the
    ratios that every run measured; in ``RATIOS``' order."""

    def find(results: dict, path: tuple[str, ...]) -> float | None:
        for key in path:
            if not isinstance(results, dict) or key not in results:
                return None
            results = results[key]
        return results

    spread = []
    for label, path in RATIOS:
        values = [find(r, path) for r in runs]
        if not runs or any(v is None for v in values):
            continue
        spread.append(
            {"ratio": label, "median": statistics.median(values), "min": min(values), "max": max(values),
             "values": values}
        )  # fmt: skip
    return spread


def spread_lines(spread: Sequence[dict], repeats: int) -> list[str]:
    """The report's closing table: each ratio's median and range over the repeats."""
    lines = [
        f"every ratio over {repeats} runs of the whole measurement",
        f"{'':40}{'median':>8}{'min-max':>15}",
    ]
    for r in spread:
        lines.append(f"{r['ratio']:40}{r['median']:>7.2f}x{r['min']:>9.2f}-{r['max']:.2f}x")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` when ``argv`` is None), checked; errors exit with a usage line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny dims and few iterations: a smoke test")
    parser.add_argument(
        "--hour-sizes", action="store_true",
        help="the Multi30k hours' sizes: d_ff 512 and one embedding for source, target and output (each "
        "model tied), as configs/multi30k.yaml and the peers' recipes (docs/peers.md); decoding untied",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument(
        "--precision", choices=("auto", *PRECISIONS), default=None,
        help="training precision; auto: train.py's choice (the default on a GPU; 32-true on a CPU)",
    )
    parser.add_argument(
        "--decode-batch-sizes",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also measure greedy decoding with and without the cache at these batch sizes",
    )
    parser.add_argument(
        "--data", type=Path, default=None, metavar="MULTI30K",
        help="the Multi30k folder: also measure training on train.py's own batches (configs/multi30k.yaml)",
    )  # fmt: skip
    parser.add_argument(
        "--decode-tokens", type=int, default=None, metavar="N",
        help="tokens each decoding runs (EOS blocked); default: a Multi30k test reference's mean length "
        "with --data, else 16",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=int, default=None, metavar="N",
        help="timed training steps of each model and way (default 10, after 3 warm-up; --quick 2)",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=int, default=1, metavar="K",
        help="run the whole measurement K times and report each ratio's median and range",
    )  # fmt: skip
    parser.add_argument(
        "--joeynmt-venv", type=Path, default=JOEYNMT_VENV,
        help="JoeyNMT's virtual environment (bench/peers/joeynmt_baseline.py makes it); skipped without it",
    )  # fmt: skip
    parser.add_argument(
        "--eole-venv", type=Path, default=EOLE_VENV,
        help="eole's virtual environment (bench/peers/eole_baseline.py makes it); skipped without it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.data is not None and not (args.data / "train.de").is_file():
        parser.error(f"--data {args.data}: no Multi30k there (train.de missing)")
    if any(size < 1 for size in args.decode_batch_sizes):
        parser.error(f"--decode-batch-sizes must be at least 1, got {args.decode_batch_sizes}")
    if args.decode_tokens is not None and args.decode_tokens < 1:
        parser.error(f"--decode-tokens must be at least 1, got {args.decode_tokens}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.precision == "16-mixed" and device != "cuda":
        parser.error(f"--precision 16-mixed needs --device cuda (fp16 with loss scaling), got {device}")
    return args


def step_precision_name(precision: str | None, device: torch.device) -> str:
    """``--precision`` resolved: train.py's choice for "auto" (and by default on a GPU), else as given."""
    if precision == "auto" or (precision is None and device.type == "cuda"):
        return training_precision(device)
    return precision or "32-true"


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark as the command line asks and print its report; returns its figures (with
    ``--repeats`` above 1, every run's under ``runs`` and the ratios' spread under ``ratios``)."""
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cfg = QUICK if args.quick else BenchConfig()
    if args.hour_sizes:
        cfg = replace(cfg, d_ff=cfg.d_ff if args.quick else HOUR_D_FF, tied=True)
    if args.steps is not None:
        cfg = replace(cfg, train_iters=args.steps)
    recipe = None
    if args.data is not None:  # built once: every repeat times the same batches
        recipe = recipe_data(args.data, cfg.train_warmup + cfg.train_iters, device)
    lengths = None if recipe is None else recipe.reference_lengths
    cfg = replace(cfg, decode_steps=decode_length(args.decode_tokens, lengths, cfg.decode_steps))
    precision = step_precision_name(args.precision, device)
    runs = []
    for k in range(args.repeats):
        runs.append(
            run(cfg, device, args.decode_batch_sizes, precision, recipe, args.joeynmt_venv, args.eole_venv)
        )
        if args.repeats > 1:
            print(f"-- run {k + 1} of {args.repeats} --")
        print(report(runs[-1]), end="\n\n" if args.repeats > 1 else "\n", flush=True)
    results = runs[0]
    if args.repeats > 1:
        spread = ratio_spread(runs)
        print("\n".join(spread_lines(spread, args.repeats)))
        results = {"machine": runs[0]["machine"], "config": runs[0]["config"], "runs": runs, "ratios": spread}
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
