"""Speed of the Transformer, measured side by side with the usual alternatives, in one run on one machine.

    python bench/speed.py                   # full size (a few minutes on a CPU)
    python bench/speed.py --quick           # tiny dims, 1-2 iterations: checks that it runs
    python bench/speed.py --threads 4 --device cpu --json speed.json
    python bench/speed.py --decode-batch-sizes 16 64 256   # also greedy decoding at these batch sizes
    python bench/speed.py --device cuda     # in the precision train.py would choose there (bf16/fp16 mixed)

Three figures:
1. training tokens/s of ``model.Transformer`` vs the seq2seq model of PyTorch's tutorial "Language Translation
   with nn.Transformer and torchtext" (``bench/tutorial_model.py``), same batches, same optimiser;
2. greedy decoding sentences/s with the key/value cache vs re-running the decoder over the whole prefix, with
   the FLOPs each does, and beam search relative to greedy;
3. model FLOP/s in training as a fraction of the machine's measured matmul FLOP/s (in the training dtype);
4. ``model.Transformer``'s training step packed (computing on the tokens only) against padded.

Training runs in ``--precision``: by default on a GPU the one ``train.py`` would choose there (autocast,
with a gradient scaler for fp16, as Lightning's mixed precision does), and fp32 on a CPU, where the figures
in the README were measured.

Shape legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import textwrap
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if __package__ in (None, ""):  # run as `python bench/speed.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model.transformer as transformer_module
from analysis.flops import matmul_flops
from bench.tutorial_model import TutorialSeq2Seq  # the baseline; bench/multi30k_baseline.py imports it here
from data.special import SPECIALS
from model import Transformer, TransformerConfig
from model.decoding import greedy_search
from tests.weight_surgery import EOS_SUPPRESSION, suppress_eos
from training.precision import choose_precision, probe_hardware

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id  # the tutorial model uses the same ids

# The tutorial mixes a float causal mask with boolean padding masks. PyTorch converts them at every step (a
# cost that belongs to the baseline, so it stays) and warns at every step (noise, so it goes).
warnings.filterwarnings(
    "ignore", message="Support for mismatched key_padding_mask and attn_mask", category=UserWarning
)


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
    decode_steps: int = 40
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


# -- data, models, timing ------------------------------------------------------------------------------------


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


def our_model(cfg: BenchConfig, device: torch.device) -> Transformer:
    """``model.Transformer`` at the same sizes as the tutorial model.

    Pre-LN (the project's default) and dropout on attention weights as well, as ``nn.Transformer`` does; an
    untied output projection, like the tutorial's ``generator`` (and needed by ``suppress_eos``).
    """
    config = TransformerConfig(
        src_vocab_size=cfg.vocab_size,
        tgt_vocab_size=cfg.vocab_size,
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """(seconds, result) of one call, waiting for the accelerator before and after."""
    _sync(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    return time.perf_counter() - start, result


def training_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Each model's loss as its own training code computes it.

    ``model.Transformer`` is given ``keep`` as ``training/module.py`` gives it: its layers compute on the
    tokens only, padding-free but for attention (``model.packing``), and it projects only the non-padding
    target positions onto the vocabulary. The tutorial model computes every position and ignores padding in
    the loss.
    """
    if isinstance(model, Transformer):
        keep = batch.tgt_out != PAD
        return F.cross_entropy(model(batch.src, batch.tgt_in, keep=keep), batch.tgt_out[keep])
    logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)


PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


@dataclass
class StepPrecision:
    """How one model's training steps run: Lightning's ``precision`` setting, made by hand.

    Mixed precision autocasts the forward pass (the loss included, as in ``training_step``); fp16 scales
    the loss with the model's own ``GradScaler``, as Lightning's ``16-mixed`` does.
    """

    precision: str
    device: torch.device
    scaler: torch.amp.GradScaler | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision == "16-mixed":
            self.scaler = torch.amp.GradScaler(self.device.type)

    def autocast(self):
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, precision: StepPrecision | None = None
) -> None:
    optimizer.zero_grad(set_to_none=True)
    with contextlib.nullcontext() if precision is None else precision.autocast():
        loss = training_loss(model, batch)
    if precision is None or precision.scaler is None:
        loss.backward()
        optimizer.step()
        return
    precision.scaler.scale(loss).backward()
    precision.scaler.step(optimizer)
    precision.scaler.update()


def training_precision(device: torch.device) -> str:
    """The precision ``train.py`` would train in on ``device`` of this machine (its automatic choice)."""
    devices = [device.index or 0] if device.type == "cuda" else "auto"  # the one GPU measured
    return choose_precision(probe_hardware(device.type, devices)).precision


@contextlib.contextmanager
def packing(on: bool):
    """``model.Transformer`` computing on the tokens only (``on``) or on every padded position, whatever the
    padding share and the device."""
    saved = {name: getattr(transformer_module, name) for name in ("PACK_FROM", "PACK_DEVICES")
             if hasattr(transformer_module, name)}
    transformer_module.PACK_FROM = 0.0 if on else math.inf
    if "PACK_DEVICES" in saved:  # where packing is limited to some devices
        transformer_module.PACK_DEVICES = ("cpu", "cuda", "mps") if on else ()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(transformer_module, name, value)


def training_flops(model: nn.Module, batch: Batch) -> int:
    """Matmul FLOPs of one forward + backward pass.

    Padding positions count where the model computes them (the tutorial model everywhere,
    ``model.Transformer`` only inside attention). The optimiser step does no matmuls. The count equals the
    textbook formula 6 * sum(matmul weights * tokens they apply to) + 12 * B * D * sum(Tq * Tk over attention
    layers): the forward pass does 2 FLOPs per multiply-add, the backward pass twice the forward.
    """
    flops = matmul_flops(lambda: training_loss(model, batch).backward())
    model.zero_grad(set_to_none=True)
    return flops


def bench_training(
    cfg: BenchConfig, device: torch.device, precision: str = "32-true", batches: list[Batch] | None = None
) -> dict:
    """Median training throughput of both models on the same batches, in ``precision``.

    The two models' steps alternate, so that changes in machine load affect both alike. ``batches``
    (default: ``make_batches``) are the warm-up batches followed by the timed ones.
    """
    if batches is None:
        batches = make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)
    models = {"ours": our_model(cfg, device).train()}
    torch.manual_seed(cfg.seed)
    models["tutorial"] = TutorialSeq2Seq(cfg).to(device).train()
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    precisions = {name: StepPrecision(precision, device) for name in models}  # a scaler each, for fp16
    flops_by_shape: dict[tuple, dict[str, int]] = {}  # FLOPs depend only on the padded shapes
    steps = {name: [] for name in models}  # (seconds, target tokens, source tokens, flops) per timed step

    for i, batch in enumerate(batches):
        shape = (tuple(batch.src.shape), tuple(batch.tgt_in.shape))
        if i >= cfg.train_warmup and shape not in flops_by_shape:
            flops_by_shape[shape] = {name: training_flops(m, batch) for name, m in models.items()}
        for name, m in models.items():
            seconds, _ = timed(partial(train_step, m, optimizers[name], batch, precisions[name]), device)
            if i >= cfg.train_warmup:
                steps[name].append(
                    (seconds, batch.target_tokens, batch.source_tokens, flops_by_shape[shape][name])
                )

    result = {}
    for name, rows in steps.items():
        result[name] = {
            "params": sum(p.numel() for p in models[name].parameters()),
            "step_ms": 1e3 * statistics.median(s for s, *_ in rows),
            "target_tokens_per_s": statistics.median(t / s for s, t, _, _ in rows),
            "all_tokens_per_s": statistics.median((t + u) / s for s, t, u, _ in rows),
            "gflop_per_step": statistics.median(f for *_, f in rows) / 1e9,
            "flop_per_s": statistics.median(f / s for s, *_, f in rows),
        }
    result["ratio"] = result["ours"]["target_tokens_per_s"] / result["tutorial"]["target_tokens_per_s"]
    result["precision"] = precision
    return result


def bench_packing(cfg: BenchConfig, device: torch.device, precision: str = "32-true") -> dict:
    """``model.Transformer``'s training throughput packed and padded, on ``bench_training``'s batches, the
    two ways alternating step by step (two copies of the model, each with its own optimiser)."""
    batches = make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)
    ways = {"packed": True, "padded": False}
    models = {way: our_model(cfg, device).train() for way in ways}
    optimizers = {way: torch.optim.AdamW(m.parameters(), lr=1e-4) for way, m in models.items()}
    precisions = {way: StepPrecision(precision, device) for way in ways}
    rates: dict[str, list[float]] = {way: [] for way in ways}
    for i, batch in enumerate(batches):
        for way, on in ways.items():
            with packing(on):
                step = partial(train_step, models[way], optimizers[way], batch, precisions[way])
                seconds, _ = timed(step, device)
            if i >= cfg.train_warmup:
                rates[way].append(batch.target_tokens / seconds)
    timed_batches = batches[cfg.train_warmup :]
    positions = sum(b.src.numel() + b.tgt_in.numel() for b in timed_batches)
    tokens = sum(b.source_tokens + int((b.tgt_in != PAD).sum()) for b in timed_batches)
    packed, padded = statistics.median(rates["packed"]), statistics.median(rates["padded"])
    return {
        "precision": precision,
        "packed_target_tokens_per_s": packed,
        "padded_target_tokens_per_s": padded,
        "ratio": packed / padded,
        "padding_share": 1 - tokens / positions,
        "pack_from": transformer_module.PACK_FROM,
    }


def bench_decoding(
    cfg: BenchConfig, device: torch.device, peak: float, *, batch_size: int | None = None, beam: bool = True
) -> dict:
    """Greedy decoding with and without the cache, and beam search, all forced to ``decode_steps`` tokens.

    Each greedy decoding's FLOPs are counted too: their ratio is what the cache saves in arithmetic, the
    speedup it would give if both ran equally close to the machine's peak.

    Args:
        peak: the machine's matmul FLOP/s, for each decoding's share of it.
        batch_size: sentences per batch instead of ``cfg.batch_size``.
        beam: also time beam search (the ``beam_*`` entries of the result).

    Raises:
        RuntimeError: a decoding did not run exactly ``decode_steps`` steps, so the figures would compare
            unequal work.
    """
    if batch_size is not None:
        cfg = replace(cfg, batch_size=batch_size)
    model = our_model(cfg, device).eval()
    suppress_eos(model)
    src = make_batches(cfg, 1, device)[0].src
    steps = cfg.decode_steps
    runs = {
        "cached": lambda: greedy_search(model, src, steps, use_cache=True),
        "uncached": lambda: greedy_search(model, src, steps, use_cache=False),
    }
    if beam:
        runs["beam"] = lambda: model.generate(src, max_len=steps, beam_size=cfg.beam_size)
    times = {name: [] for name in runs}
    outputs = {}
    with torch.no_grad():
        for i in range(cfg.decode_warmup + cfg.decode_iters):
            for name, fn in runs.items():
                seconds, outputs[name] = timed(fn, device)
                if i >= cfg.decode_warmup:
                    times[name].append(seconds)
        flops = {name: matmul_flops(runs[name]) for name in ("cached", "uncached")}  # one more run each
    for name, tokens in outputs.items():
        if tokens.shape != (src.size(0), steps) or bool((tokens == EOS).any()):
            raise RuntimeError(
                f"{name} decoding did not run exactly {steps} steps: output {tuple(tokens.shape)}"
            )

    seconds = {name: statistics.median(t) for name, t in times.items()}
    per_s = {name: src.size(0) / t for name, t in seconds.items()}
    result = {
        "batch_size": src.size(0),
        "steps": steps,
        "cached_sentences_per_s": per_s["cached"],
        "uncached_sentences_per_s": per_s["uncached"],
        "cache_ratio": per_s["cached"] / per_s["uncached"],
        "outputs_equal": bool(torch.equal(outputs["cached"], outputs["uncached"])),
        "cached_gflop": flops["cached"] / 1e9,
        "uncached_gflop": flops["uncached"] / 1e9,
        "flop_ratio": flops["uncached"] / flops["cached"],
        "cached_peak_fraction": flops["cached"] / seconds["cached"] / peak,
        "uncached_peak_fraction": flops["uncached"] / seconds["uncached"] / peak,
    }
    if beam:
        result |= {
            "beam_size": cfg.beam_size,
            "beam_sentences_per_s": per_s["beam"],
            "beam_over_greedy": per_s["beam"] / per_s["cached"],
        }
    return result


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


# -- train.py's own batches, and JoeyNMT -------------------------------------------------------------------

RECIPE_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "multi30k.yaml"
JOEYNMT_VENV = Path(__file__).resolve().parent / ".joeynmt-venv"  # bench/joeynmt_baseline.py makes it


def padding_share(batches: Sequence[Batch]) -> float:
    """Share of the source and target positions of ``batches`` that are padding."""
    positions = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return 1 - sum(b.source_tokens + b.target_tokens for b in batches) / positions


def recipe_batches(data_path: Path, count: int, device: torch.device) -> tuple[list[Batch], int]:
    """``count`` shuffled training batches of the Multi30k recipe, as ``train.py`` makes them, and the
    recipe's vocabulary size.

    The data module is built from ``configs/multi30k.yaml``'s ``data`` section (joint BPE, punctuation split,
    length-bucketed batches of ``max_tokens``), with ``data_path`` as the corpus folder.
    """
    import yaml

    from data.datamodule import TranslationDataModule

    settings = yaml.safe_load(RECIPE_CONFIG.read_text(encoding="utf-8"))["data"]
    dm = TranslationDataModule(**{**settings, "path": str(data_path), "num_workers": 0})
    dm.setup("fit")
    batches = []
    for batch in dm.dataloader("train", shuffle=True):
        batches.append(Batch(batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)))
        if len(batches) == count:
            break
    return batches, dm.tgt_vocab_size


def bench_recipe_training(cfg: BenchConfig, device: torch.device, data_path: Path) -> dict:
    """``bench_training`` at the same sizes on ``train.py``'s own Multi30k batches instead of random ones."""
    batches, vocab_size = recipe_batches(data_path, cfg.train_warmup + cfg.train_iters, device)
    cfg = replace(cfg, vocab_size=vocab_size)
    result = bench_training(cfg, device, batches=batches)
    result["padding_share"] = padding_share(batches[cfg.train_warmup :])
    result["batches"] = len(batches) - cfg.train_warmup
    result["sentences_per_batch"] = statistics.median(b.src.size(0) for b in batches)
    return result


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


def comparison_lines(results: dict) -> list[str]:
    """The report's lines for the recipe's batches and for JoeyNMT (each a skip reason when not measured)."""
    c, tr = results["config"], results["training"]
    lines = ["", "training ratio on random batches and on train.py's own Multi30k batches, same sizes"]
    lines.append(f"{'':26}{'ours tok/s':>11}{'tutorial':>10}{'ratio':>8}{'padding':>9}")
    lines.append(
        f"{'random batches':26}{tr['ours']['target_tokens_per_s']:>11.0f}"
        f"{tr['tutorial']['target_tokens_per_s']:>10.0f}{tr['ratio']:>7.2f}x{tr['padding_share']:>9.1%}"
    )
    recipe = results.get("training_recipe_batches", {"skipped": "no --data given"})
    if "skipped" in recipe:
        lines.append(f"{'train.py batches':26}skipped: {recipe['skipped']}")
    else:
        lines.append(
            f"{'train.py batches':26}{recipe['ours']['target_tokens_per_s']:>11.0f}"
            f"{recipe['tutorial']['target_tokens_per_s']:>10.0f}{recipe['ratio']:>7.2f}x"
            f"{recipe['padding_share']:>9.1%}   ({recipe['batches']} timed, "
            f"{recipe['sentences_per_batch']:.0f} sentences each)"
        )
    joey = results.get("joeynmt", {"skipped": "not measured"})
    lines += ["", "JoeyNMT 2.3.0 Transformer (pre-LN) at the same sizes, random batches, in its own venv"]
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


def run(
    cfg: BenchConfig,
    device: torch.device,
    decode_batch_sizes: Sequence[int] = (),
    precision: str = "32-true",
    data_path: Path | None = None,
    joeynmt_venv: Path | None = JOEYNMT_VENV,
) -> dict:
    """Every figure of the benchmark, as a dict; greedy decoding also at each of ``decode_batch_sizes``;
    training in ``precision``.

    With ``data_path`` (the Multi30k folder), training is also measured on ``train.py``'s own batches; with
    ``joeynmt_venv``, JoeyNMT's Transformer too (skipped, with the reason, where the venv is missing).
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
    if data_path is not None:
        comparisons["training_recipe_batches"] = bench_recipe_training(cfg, device, data_path)
    if joeynmt_venv is not None:
        comparisons["joeynmt"] = bench_joeynmt(cfg, device, joeynmt_venv)
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
    m, c, tr, de = results["machine"], results["config"], results["training"], results["decoding"]
    where = f"{m['cpu']} ({m['logical_cpus']} logical CPUs)" + (f", {m['gpu']}" if m["gpu"] else "")
    lines = [
        f"machine: {where}, torch {m['torch']}, {m['threads']} threads, device {m['device']}",
        (
            f"sizes: d_model {c['d_model']}, {c['num_heads']} heads, "
            f"{c['num_layers']}+{c['num_layers']} layers, d_ff {c['d_ff']}, vocab {c['vocab_size']}, "
            f"batch {c['batch_size']}, "
            f"lengths {c['min_len']}-{c['max_len']}, dropout {c['dropout']}"
        ),
        (
            f"peak fp32 matmul ({c['matmul_size']}^2 @ {c['matmul_size']}^2, best of {c['matmul_repeats']}): "
            f"{results['matmul_flop_per_s'] / 1e9:.1f} GFLOP/s"
        ),
        "",
        (
            f"training: forward + backward + AdamW in {tr.get('precision', '32-true')}, "
            f"median of {c['train_iters']} steps after {c['train_warmup']} warm-up"
            + (
                f"; peak matmul in its dtype {results['training_matmul_flop_per_s'] / 1e9:.1f} GFLOP/s"
                if results.get("training_matmul_flop_per_s", results["matmul_flop_per_s"])
                != results["matmul_flop_per_s"]
                else ""
            )
        ),
        (
            f"{'':26}{'tgt tok/s':>11}{'src+tgt tok/s':>15}{'step ms':>10}{'params':>12}{'GFLOP/step':>12}"
            f"{'of peak':>9}"
        ),
    ]
    for name, label in (("ours", "model.Transformer"), ("tutorial", "nn.Transformer tutorial")):
        r = tr[name]
        lines.append(
            f"{label:26}{r['target_tokens_per_s']:>11.0f}{r['all_tokens_per_s']:>15.0f}{r['step_ms']:>10.1f}"
            f"{r['params']:>12,}{r['gflop_per_step']:>12.2f}{r['matmul_peak_fraction']:>9.1%}"
        )
    lines += [
        f"{'ours / tutorial':26}{tr['ratio']:>10.2f}x   (target >= 1.5x)",
        *packing_lines(results),
        "",
        (
            f"decoding: {de['steps']} tokens, batch {c['batch_size']}, eval, no_grad, "
            f"median of {c['decode_iters']}"
        ),
        textwrap.fill(results["eos_suppression"], width=110, initial_indent="  ", subsequent_indent="  "),
        f"{'':26}{'sent/s':>11}{'GFLOP':>9}{'of peak':>9}",
        (
            f"{'greedy, KV cache':26}{de['cached_sentences_per_s']:>11.1f}{de['cached_gflop']:>9.2f}"
            f"{de['cached_peak_fraction']:>9.1%}"
        ),
        (
            f"{'greedy, prefix re-run':26}{de['uncached_sentences_per_s']:>11.1f}{de['uncached_gflop']:>9.2f}"
            f"{de['uncached_peak_fraction']:>9.1%}"
        ),
        (
            f"{'cache / re-run':26}{de['cache_ratio']:>10.2f}x   "
            f"same tokens: {'yes' if de['outputs_equal'] else 'NO'}"
        ),
        f"{'  in FLOPs':26}{de['flop_ratio']:>10.2f}x   (the speedup if both ran equally close to peak)",
        f"{'beam ' + str(de['beam_size']) + ', KV cache':26}{de['beam_sentences_per_s']:>11.1f}",
        f"{'beam / greedy':26}{de['beam_over_greedy']:>10.2f}x",
    ]
    if results["decoding_by_batch_size"]:
        lines += [
            "",
            "greedy decoding by batch size (same model and steps)",
            (
                f"{'batch':>7}{'cache sent/s':>14}{'re-run sent/s':>15}{'ratio':>8}{'in FLOPs':>10}"
                f"{'cache of peak':>15}{'re-run of peak':>16}{'same tokens':>13}"
            ),
        ]
        for r in results["decoding_by_batch_size"]:
            lines.append(
                f"{r['batch_size']:>7}{r['cached_sentences_per_s']:>14.1f}"
                f"{r['uncached_sentences_per_s']:>15.1f}"
                f"{r['cache_ratio']:>7.2f}x{r['flop_ratio']:>9.2f}x{r['cached_peak_fraction']:>15.1%}"
                f"{r['uncached_peak_fraction']:>16.1%}{'yes' if r['outputs_equal'] else 'NO':>13}"
            )
    lines += comparison_lines(results)
    return "\n".join(lines)


def packing_lines(results: dict) -> list[str]:
    """The packed-vs-padded row of the report (nothing for results without it)."""
    pk = results.get("packing")
    if pk is None:
        return []
    return [
        (
            f"{'packed / padded':26}{pk['ratio']:>10.2f}x   model.Transformer on the tokens only vs every "
            f"position ({pk['packed_target_tokens_per_s']:.0f} vs {pk['padded_target_tokens_per_s']:.0f} "
            f"tgt tok/s, {pk['padding_share']:.0%} padding; train.py packs from {pk['pack_from']:.0%})"
        )
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` when ``argv`` is None), checked; errors exit with a usage line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny dims and few iterations: a smoke test")
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
        "--joeynmt-venv", type=Path, default=JOEYNMT_VENV,
        help="JoeyNMT's virtual environment (bench/joeynmt_baseline.py makes it); skipped without it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.data is not None and not (args.data / "train.de").is_file():
        parser.error(f"--data {args.data}: no Multi30k there (train.de missing)")
    if any(size < 1 for size in args.decode_batch_sizes):
        parser.error(f"--decode-batch-sizes must be at least 1, got {args.decode_batch_sizes}")
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
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cfg = QUICK if args.quick else BenchConfig()
    results = run(
        cfg, device, args.decode_batch_sizes, step_precision_name(args.precision, device), args.data,
        args.joeynmt_venv,
    )
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
