"""``model.Transformer`` against JoeyNMT's Transformer at the benchmark's sizes: training target tokens/s on
the random batches and, where given, on ``train.py``'s own Multi30k batches, and greedy sentences/s of this
project's model with and without its key/value cache beside JoeyNMT's (which re-runs the prefix), timed in
JoeyNMT's own virtual environment (``bench/peers/joeynmt_venv.py speed``) on the batches saved here, the
models' steps alternating.
"""

from pathlib import Path

import torch

from bench.peers.timing import add_training_ratios, recipe_batches_saved, time_in_venv, training_lines
from bench.speed_common import BenchConfig
from bench.speed_training import RecipeData

JOEYNMT_VENV = Path(__file__).resolve().parents[1] / ".joeynmt-venv"  # joeynmt_baseline.py makes it


def bench_joeynmt(
    cfg: BenchConfig, device: torch.device, venv: Path, recipe: RecipeData | None = None
) -> dict:
    """JoeyNMT's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches,
    and on ``recipe``'s batches where given (at the recipe's vocabulary size), timed in JoeyNMT's virtual
    environment (``bench/peers/joeynmt_venv.py speed``), their steps alternating.

    Returns ``{"skipped": reason}`` without the venv or on a GPU (the comparison is for CPUs).
    """
    extra = recipe_batches_saved(cfg, recipe)
    result = time_in_venv(cfg, device, venv, "joeynmt_venv.py", "JoeyNMT", "joeynmt_baseline.py", extra)
    if "skipped" in result:
        return result
    add_training_ratios(result, "joeynmt")
    ours, joey = result["ours"], result["joeynmt"]
    result["greedy_ratio"] = ours["greedy_sentences_per_s"] / joey["greedy_sentences_per_s"]
    result["uncached_greedy_ratio"] = ours["uncached_greedy_sentences_per_s"] / joey["greedy_sentences_per_s"]
    return result


def joeynmt_lines(results: dict) -> list[str]:
    """The report's JoeyNMT tables, training and greedy decoding (a skip reason when not measured)."""
    c = results["config"]
    joey = results.get("joeynmt", {"skipped": "not measured"})
    lines = ["", "JoeyNMT 2.3.0 Transformer (pre-LN) at the same sizes, in its own venv, steps alternating"]
    if "skipped" in joey:
        return [*lines, f"  skipped: {joey['skipped']}"]
    ours, other = joey["ours"], joey["joeynmt"]
    lines += training_lines(joey, "joeynmt", "JoeyNMT")
    lines += [
        (
            f"greedy decoding, {c['decode_steps']} tokens, batch {c['batch_size']}: sentences/s, "
            "and the multiple of JoeyNMT's"
        ),
        f"{'ours, KV cache':26}{ours['greedy_sentences_per_s']:>11.1f}{joey['greedy_ratio']:>10.2f}x",
        (
            f"{'ours, prefix re-run':26}{ours['uncached_greedy_sentences_per_s']:>11.1f}"
            f"{joey['uncached_greedy_ratio']:>10.2f}x"
        ),
        f"{'JoeyNMT, prefix re-run':26}{other['greedy_sentences_per_s']:>11.1f}{1:>10.2f}x",
    ]
    return lines
