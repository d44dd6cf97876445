"""What every comparison of ``bench/speed.py`` shares: the benchmark's sizes, its seeded random batches,
``model.Transformer`` at those sizes, timing that waits for the accelerator, training steps timed in turn, the
runs in another toolkit's virtual environment, and the machine it ran on.

Shape legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from data.special import SPECIALS
from model import Transformer, TransformerConfig

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id  # the tutorial model uses the same ids
# this project's special ids -> JoeyNMT's and eole's (unk 0, pad 1, bos 2, eos 3); other ids stay as they are
OURS_TO_PEER = {0: 1, 1: 2, 2: 3, 3: 0}


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of one benchmark run."""

    d_model: int = 256
    num_heads: int = 4
    num_layers: int = 3  # encoder and decoder each
    d_ff: int = 1024
    vocab_size: int = 8000  # source and target
    dropout: float = 0.1
    batch_size: int = 64
    min_len: int = 10  # sentence lengths, drawn uniformly, before BOS/EOS
    max_len: int = 30
    train_warmup: int = 3
    train_iters: int = 10
    decode_steps: int = 16  # tokens a decoding runs, about a Multi30k reference's (speed.py --decode-tokens)
    beam_size: int = 4
    decode_warmup: int = 1
    decode_iters: int = 3
    matmul_size: int = 2048
    matmul_repeats: int = 5
    seed: int = 0


QUICK = BenchConfig(
    d_model=32, num_heads=2, num_layers=2, d_ff=64, vocab_size=50, batch_size=8, min_len=3, max_len=8,
    train_warmup=1, train_iters=2, decode_steps=6, decode_warmup=1, decode_iters=1, matmul_size=256,
    matmul_repeats=2,
)  # fmt: skip


@dataclass(frozen=True)
class Batch:
    src: Tensor  # (B, S) padded with PAD
    tgt_in: Tensor  # (B, T) BOS + sentence, padded
    tgt_out: Tensor  # (B, T) sentence + EOS, padded

    @property
    def target_tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    @property
    def source_tokens(self) -> int:
        return int((self.src != PAD).sum())


def make_batches(cfg: BenchConfig, count: int, device: torch.device) -> list[Batch]:
    """``count`` seeded batches of random sentences, lengths uniform in [min_len, max_len], padded."""
    gen = torch.Generator().manual_seed(cfg.seed)

    def sentences() -> list[Tensor]:
        lengths = torch.randint(cfg.min_len, cfg.max_len + 1, (cfg.batch_size,), generator=gen)
        return [torch.randint(3, cfg.vocab_size, (n,), generator=gen) for n in lengths.tolist()]

    def pad(rows: list[Tensor]) -> Tensor:
        return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)

    bos, eos = torch.tensor([BOS]), torch.tensor([EOS])
    batches = []
    for _ in range(count):
        src = pad(sentences())  # (B, S)
        tgt = pad([torch.cat([bos, s, eos]) for s in sentences()])  # (B, T + 1)
        tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] == EOS, PAD)  # the shift, done once
        batches.append(Batch(src.to(device), tgt_in.to(device), tgt[:, 1:].to(device)))
    return batches


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


def padding_share(batches: Sequence[Batch]) -> float:
    """Share of the source and target positions of ``batches`` that are padding."""
    positions = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1 - sum(b.source_tokens + b.target_tokens for b in batches) / positions


def our_model(cfg: BenchConfig, device: torch.device) -> Transformer:
    """``model.Transformer`` at the same sizes as the tutorial model.

    Pre-LN (the project's default) and dropout on attention weights as well, as ``nn.Transformer`` does; an
    untied output projection, like the tutorial's ``generator`` (and needed by ``suppress_eos``).
    """
    config = TransformerConfig(
        src_vocab_size=cfg.vocab_size,
        tgt_vocab_size=cfg.vocab_size,
        **SPECIALS.ids,
        d_model=cfg.d_model,
        num_heads=cfg.num_heads,
        num_encoder_layers=cfg.num_layers,
        num_decoder_layers=cfg.num_layers,
        d_ff=cfg.d_ff,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        tie_output_embedding=False,
    )
    torch.manual_seed(cfg.seed)
    return Transformer(config).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """(seconds, result) of one call, waiting for the accelerator before and after."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def bench_matmul(size: int, repeats: int, device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """Best FLOP/s of a (size, size) @ (size, size) matmul in ``dtype``: the machine's practical peak."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device, dtype)
    b = torch.randn(size, size, generator=gen).to(device, dtype)
    torch.mm(a, b)  # warm-up
    best = min(timed(lambda: torch.mm(a, b), device)[0] for _ in range(repeats))
    return 2 * size**3 / best


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
    from dataclasses import asdict

    python = venv / "bin" / "python"
    if device.type != "cpu":
        return {"skipped": f"{name}'s part runs on the CPU only"}
    if not python.exists():
        return {"skipped": f"no {name} environment in {venv} (python bench/{maker} makes it)"}
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


def describe_machine(device: torch.device) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
