"""``model.Transformer`` against eole's Transformer at the benchmark's sizes: training target tokens/s, timed
in eole's own virtual environment (``bench/eole_venv.py speed``) on the batches saved here, the two models'
steps alternating. Decoding is not compared (eole's beam search runs from its ``predict`` pipeline of files
and transforms, not on a batch of ids).
"""

from pathlib import Path

import torch

from bench.speed_common import BenchConfig, time_in_venv

EOLE_VENV = Path(__file__).resolve().parent / ".eole-venv"  # bench/eole_baseline.py makes it


def bench_eole(cfg: BenchConfig, device: torch.device, venv: Path) -> dict:
    """eole's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches, timed
    in eole's virtual environment; ``{"skipped": reason}`` without the venv or on a GPU."""
    result = time_in_venv(cfg, device, venv, "eole_venv.py", "eole", "eole_baseline.py")
    if "skipped" not in result:
        ours, eole = result["ours"], result["eole"]
        result["training_ratio"] = ours["target_tokens_per_s"] / eole["target_tokens_per_s"]
    return result


def eole_lines(results: dict) -> list[str]:
    """The report's eole table (a skip reason when it was not measured)."""
    eole = results.get("eole", {"skipped": "not measured"})
    lines = ["", "eole 0.6.4 Transformer (pre-LN) at the same sizes, random batches, in its own venv"]
    if "skipped" in eole:
        return [*lines, f"  skipped: {eole['skipped']}"]
    lines.append(f"{'':26}{'tgt tok/s':>11}{'params':>12}")
    for name, label in (("ours", "model.Transformer"), ("eole", "eole Transformer")):
        lines.append(f"{label:26}{eole[name]['target_tokens_per_s']:>11.0f}{eole[name]['params']:>12,}")
    lines.append(f"{'ours / eole':26}{eole['training_ratio']:>10.2f}x")
    return lines
