"""``model.Transformer`` against eole's Transformer at the benchmark's sizes: training target tokens/s on the
random batches and, where given, on ``train.py``'s own Multi30k batches, timed in eole's own virtual
environment (``bench/peers/eole_venv.py speed``) on the batches saved here, the two models' steps alternating.
Decoding is not compared (eole's beam search runs from its ``predict`` pipeline of files and transforms, not
on a batch of ids).
"""

from pathlib import Path

import torch

from bench.peers.timing import add_training_ratios, recipe_batches_saved, time_in_venv, training_lines
from bench.speed_common import BenchConfig
from bench.speed_training import RecipeData

EOLE_VENV = Path(__file__).resolve().parents[1] / ".eole-venv"  # eole_baseline.py makes it


def bench_eole(cfg: BenchConfig, device: torch.device, venv: Path, recipe: RecipeData | None = None) -> dict:
    """eole's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches, and on
    ``recipe``'s batches where given (at the recipe's vocabulary size), timed in eole's virtual environment;
    ``{"skipped": reason}`` without the venv or on a GPU."""
    extra = recipe_batches_saved(cfg, recipe)
    result = time_in_venv(cfg, device, venv, "eole_venv.py", "eole", "eole_baseline.py", extra)
    add_training_ratios(result, "eole")
    return result


def eole_lines(results: dict) -> list[str]:
    """The report's eole table: training on both kinds of batches (a skip reason when not measured)."""
    eole = results.get("eole", {"skipped": "not measured"})
    lines = ["", "eole 0.6.4 Transformer (pre-LN) at the same sizes, in its own venv, steps alternating"]
    if "skipped" in eole:
        return [*lines, f"  skipped: {eole['skipped']}"]
    return [*lines, *training_lines(eole, "eole", "eole")]
