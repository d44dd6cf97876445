"""``model.Transformer`` against eole's Transformer at the benchmark's sizes: training target tokens/s on the
random batches and, where given, on ``train.py``'s own Multi30k batches, timed in eole's own virtual
environment (``bench/eole_venv.py speed``) on the batches saved here, the two models' steps alternating.
Decoding is not compared (eole's beam search runs from its ``predict`` pipeline of files and transforms, not
on a batch of ids).
"""

from pathlib import Path

import torch

from bench.speed_common import BenchConfig, time_in_venv
from bench.speed_training import RecipeData, recipe_batches_saved

EOLE_VENV = Path(__file__).resolve().parent / ".eole-venv"  # bench/eole_baseline.py makes it


def bench_eole(cfg: BenchConfig, device: torch.device, venv: Path, recipe: RecipeData | None = None) -> dict:
    """eole's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches, and on
    ``recipe``'s batches where given (at the recipe's vocabulary size), timed in eole's virtual environment;
    ``{"skipped": reason}`` without the venv or on a GPU."""
    extra = recipe_batches_saved(cfg, recipe)
    result = time_in_venv(cfg, device, venv, "eole_venv.py", "eole", "eole_baseline.py", extra)
    for part in (result, result.get("recipe")):  # the random batches, then train.py's
        if part is not None and "skipped" not in part:
            part["training_ratio"] = part["ours"]["target_tokens_per_s"] / part["eole"]["target_tokens_per_s"]
    return result


def eole_lines(results: dict) -> list[str]:
    """The report's eole table: training on both kinds of batches (a skip reason when not measured)."""
    eole = results.get("eole", {"skipped": "not measured"})
    lines = ["", "eole 0.6.4 Transformer (pre-LN) at the same sizes, in its own venv, steps alternating"]
    if "skipped" in eole:
        return [*lines, f"  skipped: {eole['skipped']}"]
    lines += [
        (
            f"{'training, target tokens/s':26}{'ours':>11}{'eole':>10}{'ratio':>8}   "
            f"(params {eole['ours']['params']:,} and {eole['eole']['params']:,})"
        ),
        (
            f"{'random batches':26}{eole['ours']['target_tokens_per_s']:>11.0f}"
            f"{eole['eole']['target_tokens_per_s']:>10.0f}{eole['training_ratio']:>7.2f}x"
        ),
    ]
    recipe = eole.get("recipe")
    if recipe is None:
        return [*lines, f"{'train.py batches':26}skipped: no --data given"]
    return [*lines, (
        f"{'train.py batches':26}{recipe['ours']['target_tokens_per_s']:>11.0f}"
        f"{recipe['eole']['target_tokens_per_s']:>10.0f}{recipe['training_ratio']:>7.2f}x"
    )]  # fmt: skip
