"""Timing a peer's Transformer beside this project's on ``bench/speed.py``'s batches: the batches saved here
and loaded in the peer's own virtual environment, the peer's special ids, training steps timed in turn, the
``speed`` subcommand of each ``*_venv.py`` script, and the rows of the report.

Shape legend: B batch, T target length.
"""

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bench.speed_common import Batch, BenchConfig, make_batches

if TYPE_CHECKING:  # the venv scripts import this module without the training code
    from bench.speed_training import RecipeData

# this project's special ids -> JoeyNMT's and eole's (unk 0, pad 1, bos 2, eos 3); other ids stay as they are
OURS_TO_PEER = {0: 1, 1: 2, 2: 3, 3: 0}


def to_peer_ids(ids: Tensor) -> Tensor:
    """``ids`` renumbered by ``OURS_TO_PEER``, for a model of JoeyNMT or eole."""
    out = ids.clone()
    for ours, peer in OURS_TO_PEER.items():
        out[ids == ours] = peer
    return out


def peer_target(batch: Batch) -> Tensor:
    """The target as JoeyNMT and eole take it, BOS + sentence + EOS padded, in their ids: (B, T + 1)."""
    return to_peer_ids(torch.cat([batch.tgt_in[:, :1], batch.tgt_out], dim=1))


def alternate_training(
    steps: dict[str, Callable[[int], None]], batches: Sequence[Batch], warmup: int
) -> dict:
    """Median training target tokens/s of each of ``steps`` (a training step on the i-th of ``batches``),
    their steps alternating on every batch so that a busy machine slows them alike; the first ``warmup``
    untimed."""
    rates = {name: [] for name in steps}
    for i, batch in enumerate(batches):
        for name, step in steps.items():
            start = time.perf_counter()
            step(i)
            if i >= warmup:
                rates[name].append(batch.target_tokens / (time.perf_counter() - start))
    return {name: statistics.median(r) for name, r in rates.items()}


def recipe_batches_saved(cfg: BenchConfig, recipe: "RecipeData | None") -> dict | None:
    """The ``recipe`` entry a peer's ``speed`` command reads beside the random batches (``time_in_venv``'s
    ``extra``): the benchmark's sizes at the recipe's vocabulary and its batches; None without ``--data``."""
    if recipe is None:
        return None
    return {"recipe": {
        "config": asdict(replace(cfg, vocab_size=recipe.vocab_size)),
        "batches": [asdict(b) for b in recipe.batches[: cfg.train_warmup + cfg.train_iters]],
    }}  # fmt: skip


def time_in_venv(
    cfg: BenchConfig, device: torch.device, venv: Path, script: str, name: str, maker: str,
    extra: dict | None = None,
) -> dict:
    """The figures ``bench/<script> speed`` measures in a peer's virtual environment ``venv`` on the
    benchmark's training batches (saved here, loaded there, with ``extra``'s entries beside them), as a dict.

    Returns ``{"skipped": reason}`` without the venv, on a GPU (the comparisons are for CPUs), or when the
    script fails (its last line of errors); ``maker`` names the script that makes the venv.
    """
    import json
    import subprocess
    import tempfile

    python = venv / "bin" / "python"
    if device.type != "cpu":
        return {"skipped": f"{name}'s part runs on the CPU only"}
    if not python.exists():
        return {"skipped": f"no {name} environment in {venv} (python bench/peers/{maker} makes it)"}
    batches = make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)
    with tempfile.TemporaryDirectory() as folder:
        saved, out = Path(folder) / "batches.pt", Path(folder) / "result.json"
        torch.save({"config": asdict(cfg), "batches": [asdict(b) for b in batches], **(extra or {})}, saved)
        threads = str(torch.get_num_threads())
        command = [str(python), str(Path(__file__).resolve().parent / script), "speed", str(saved), str(out),
                   "--threads", threads]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return {"skipped": f"{name}'s part failed: {last}"}
        return json.loads(out.read_text())


def add_training_ratios(result: dict, peer: str) -> None:
    """Ours over ``peer``'s training tokens/s, as ``training_ratio``, on the random batches and (where timed)
    on ``train.py``'s own (``result["recipe"]``); nothing for a skipped result."""
    for part in (result, result.get("recipe")):
        if part is not None and "skipped" not in part:
            part["training_ratio"] = part["ours"]["target_tokens_per_s"] / part[peer]["target_tokens_per_s"]


def training_lines(result: dict, peer: str, label: str) -> list[str]:
    """A peer table's training rows: tokens/s of ours and of ``peer`` (``label`` as its column) and the ratio,
    on the random batches and on ``train.py``'s own (a skip line without ``--data``)."""
    ours, other = result["ours"], result[peer]
    lines = [(
        f"{'training, target tokens/s':26}{'ours':>11}{label:>10}{'ratio':>8}   "
        f"(params {ours['params']:,} and {other['params']:,})"
    )]  # fmt: skip
    parts = (("random batches", result), ("train.py batches", result.get("recipe")))
    for name, part in parts:
        if part is None:
            lines.append(f"{name:26}skipped: no --data given")
        else:
            lines.append(
                f"{name:26}{part['ours']['target_tokens_per_s']:>11.0f}"
                f"{part[peer]['target_tokens_per_s']:>10.0f}{part['training_ratio']:>7.2f}x"
            )
    return lines


def add_speed_command(sub, peer: str) -> None:
    """The ``speed`` subcommand of a peer's venv script (``bench/<peer>_venv.py speed BATCHES OUT``)."""
    s = sub.add_parser("speed", help=f"time {peer}'s and this project's model on saved batches")
    s.add_argument("batches", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--threads", type=int, default=None)


def run_speed_command(args, time_speed: Callable[[dict], dict]) -> None:
    """``time_speed`` of the batches ``time_in_venv`` saved, written as JSON where it reads it back."""
    import json

    if args.threads:
        torch.set_num_threads(args.threads)
    result = time_speed(torch.load(args.batches, weights_only=True))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
