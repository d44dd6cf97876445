"""``model.Transformer`` against JoeyNMT's Transformer at the benchmark's sizes: training target tokens/s and
greedy sentences/s, timed in JoeyNMT's own virtual environment (``bench/joeynmt_venv.py speed``) on the
batches saved here, the two models' steps alternating.
"""

import json
from dataclasses import asdict
from pathlib import Path

import torch

from bench.speed_common import BenchConfig, make_batches

JOEYNMT_VENV = Path(__file__).resolve().parent / ".joeynmt-venv"  # bench/joeynmt_baseline.py makes it


def bench_joeynmt(cfg: BenchConfig, device: torch.device, venv: Path) -> dict:
    """JoeyNMT's Transformer and ``model.Transformer`` at ``cfg``'s sizes on ``bench_training``'s batches,
    timed in JoeyNMT's virtual environment (``bench/joeynmt_venv.py speed``), their steps alternating.

    Returns ``{"skipped": reason}`` without the venv or on a GPU (the comparison is for CPUs).
    """
    import subprocess
    import tempfile

    python = venv / "bin" / "python"
    if device.type != "cpu":
        return {"skipped": "JoeyNMT's part runs on the CPU only"}
    if not python.exists():
        return {"skipped": f"no JoeyNMT environment in {venv} (python bench/joeynmt_baseline.py makes it)"}
    batches = make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)
    with tempfile.TemporaryDirectory() as folder:
        saved, out = Path(folder) / "batches.pt", Path(folder) / "joeynmt.json"
        torch.save({"config": asdict(cfg), "batches": [asdict(b) for b in batches]}, saved)
        script = Path(__file__).resolve().parent / "joeynmt_venv.py"
        threads = str(torch.get_num_threads())
        command = [str(python), str(script), "speed", str(saved), str(out), "--threads", threads]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return {"skipped": f"JoeyNMT's part failed: {last}"}
        result = json.loads(out.read_text())
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
