"""What every comparison of ``bench/speed.py`` shares: the benchmark's sizes, its seeded random batches,
``model.Transformer`` at those sizes, timing that waits for the accelerator, and the machine it ran on (the
runs in another toolkit's virtual environment: ``bench/peers/timing.py``).

Shape legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from data.special import SPECIALS
from model import Transformer, TransformerConfig

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id  # the tutorial model uses the same ids


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of one benchmark run."""

    d_model: int = 256
    num_heads: int = 4
    num_layers: int = 3  # encoder and decoder each
    d_ff: int = 1024
    vocab_size: int = 8000  # source and target
    dropout: float = 0.1
    tied: bool = False  # one embedding for source, target and output (speed.py --hour-sizes)
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


def padding_share(batches: Sequence[Batch]) -> float:
    """Share of the source and target positions of ``batches`` that are padding."""
    positions = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1 - sum(b.source_tokens + b.target_tokens for b in batches) / positions


def our_model(cfg: BenchConfig, device: torch.device) -> Transformer:
    """``model.Transformer`` at the same sizes as the tutorial model.

    Pre-LN (the project's default) and dropout on attention weights as well, as ``nn.Transformer`` does; an
    untied output projection, like the tutorial's ``generator`` (and needed by ``suppress_eos``), unless
    ``cfg.tied``: then one embedding for source, target and output, as the Multi30k recipe has it.
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
        tie_output_embedding=cfg.tied,
        share_embeddings=cfg.tied,
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
