"""``model.Transformer`` against JoeyNMT's Transformer at the benchmark's sizes: training target tokens/s and
greedy sentences/s, timed in JoeyNMT's own virtual environment (``bench/joeynmt_venv.py speed``) on the
batches saved here, the two models' steps alternating.
"""

from pathlib import Path

import torch

from bench.speed_common import BenchConfig, time_in_venv

JOEYNMT_VENV = Path(__file__).resolve().parent / ".joeynmt-venv"  # bench/joeynmt_baseline.py makes it


def bench_joeynmt(cfg: BenchConfig, device: torch.device, venv: Path) -> dict:
    """JoeyNMT's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches,
    timed in JoeyNMT's virtual environment (``bench/joeynmt_venv.py speed``), their steps alternating.

    Returns ``{"skipped": reason}`` without the venv or on a GPU (the comparison is for CPUs).
    """
    result = time_in_venv(cfg, device, venv, "joeynmt_venv.py", "JoeyNMT", "joeynmt_baseline.py")
    if "skipped" in result:
        return result
    ours, joey = result["ours"], result["joeynmt"]
    result["training_ratio"] = ours["target_tokens_per_s"] / joey["target_tokens_per_s"]
    result["greedy_ratio"] = ours["greedy_sentences_per_s"] / joey["greedy_sentences_per_s"]
    return result


def joeynmt_lines(results: dict) -> list[str]:
    """The report's JoeyNMT table (a skip reason when it was not measured)."""
    c = results["config"]
    joey = results.get("joeynmt", {"skipped": "not measured"})
    lines = ["", "JoeyNMT 2.3.0 Transformer (pre-LN) at the same sizes, random batches, in its own venv"]
    if "skipped" in joey:
        return [*lines, f"  skipped: {joey['skipped']}"]
    lines.append(f"{'':26}{'tgt tok/s':>11}{'greedy sent/s':>15}{'params':>12}")
    for name, label in (("ours", "model.Transformer"), ("joeynmt", "JoeyNMT Transformer")):
        r = joey[name]
        lines.append(
            f"{label:26}{r['target_tokens_per_s']:>11.0f}{r['greedy_sentences_per_s']:>15.1f}{r['params']:>12,}"
        )
    lines.append(
        f"{'ours / JoeyNMT':26}{joey['training_ratio']:>10.2f}x{joey['greedy_ratio']:>14.2f}x   "
        f"(ours: KV cache; JoeyNMT re-runs the prefix; {c['decode_steps']} tokens, batch {c['batch_size']})"
    )
    return lines
