"""Training speed: ``model.Transformer`` against the seq2seq model of PyTorch's tutorial "Language
Translation with nn.Transformer and torchtext" (``bench/tutorial_model.py``), same batches, same optimiser, in
the precision asked for; its FLOP/s as a share of the machine's matmul peak; its step packed (computing on the
tokens only) against padded, and packed outside attention only (``attention_padded``); and the same ratio on
``train.py``'s own Multi30k batches.

Shape legend: B batch, S source length, T target length, D model dim, V vocabulary size.
"""

import contextlib
import math
import statistics
import warnings
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import model.transformer as transformer_module
from analysis.flops import matmul_flops
from bench.speed_common import PAD, Batch, BenchConfig, make_batches, our_model, padding_share, timed
from bench.tutorial_model import TutorialSeq2Seq
from model import Transformer
from model.attention import MultiHeadAttention
from model.context import NO_CONTEXT
from model.packing import TokenIndex
from training.precision import choose_precision, probe_hardware

# The tutorial mixes a float causal mask with boolean padding masks. PyTorch converts them at every step (a
# cost that belongs to the baseline, so it stays) and warns at every step (noise, so it goes).
warnings.filterwarnings(
    "ignore", message="Support for mismatched key_padding_mask and attn_mask", category=UserWarning
)

RECIPE_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "multi30k.yaml"


def training_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Each model's loss as its own training code computes it.

    ``model.Transformer`` is given where the tokens sit, as ``training/module.py`` gives it: its layers
    compute on the tokens only, padding-free but for attention (``model.packing``), and it projects only the
    non-padding target positions onto the vocabulary. The tutorial model computes every position and ignores
    padding in the loss.
    """
    if isinstance(model, Transformer):
        tokens = TokenIndex.of(batch.src, batch.tgt_in, PAD)  # these batches are not collated: found here
        return F.cross_entropy(model(batch.src, batch.tgt_in, tokens=tokens), tokens.labels(batch.tgt_out))
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


@contextlib.contextmanager
def attention_padded():
    """Packing at the layer boundary instead of inside attention: ``MultiHeadAttention`` handed padded inputs
    and its output packed again after it, so that its projections (4·D² multiply-adds a token in
    self-attention, as many again in the decoder's cross-attention) run on every padded position and only
    the feed-forward network, LayerNorm, dropout and the residual sums on the tokens alone. A prototype, to
    measure how much of packing's gain needs attention to see a packing."""
    forward = MultiHeadAttention.forward

    def padded_forward(self, query, key, value, *, context=NO_CONTEXT, **kwargs):
        if context.packing is None:
            return forward(self, query, key, value, context=context, **kwargs)
        query_packing, key_packing = context.packing
        padded_query = query_packing.pad(query)  # (B, Tq, D)
        padded_key = padded_query if key is query else key_packing.pad(key)  # self-attention: the same tensor
        padded_value = padded_key if value is key else key_packing.pad(value)
        out, weights = forward(self, padded_query, padded_key, padded_value,
                               context=replace(context, packing=None), **kwargs)
        return query_packing.pack(out), weights  # (Nq, D)

    MultiHeadAttention.forward = padded_forward
    try:
        yield
    finally:
        MultiHeadAttention.forward = forward


PACKING_WAYS = {  # name: (packed, attention padded)
    "packed": (True, False), "packed outside attention": (True, True), "padded": (False, False),
}  # fmt: skip


def bench_packing(cfg: BenchConfig, device: torch.device, precision: str = "32-true") -> dict:
    """``model.Transformer``'s training throughput packed, packed only outside attention
    (``attention_padded``) and padded, on ``bench_training``'s batches, the three ways alternating step by
    step (a copy of the model each, with its own optimiser)."""
    batches = make_batches(cfg, cfg.train_warmup + cfg.train_iters, device)
    models = {way: our_model(cfg, device).train() for way in PACKING_WAYS}
    optimizers = {way: torch.optim.AdamW(m.parameters(), lr=1e-4) for way, m in models.items()}
    precisions = {way: StepPrecision(precision, device) for way in PACKING_WAYS}
    rates: dict[str, list[float]] = {way: [] for way in PACKING_WAYS}
    for i, batch in enumerate(batches):
        for way, (on, outside) in PACKING_WAYS.items():
            with packing(on), attention_padded() if outside else contextlib.nullcontext():
                step = partial(train_step, models[way], optimizers[way], batch, precisions[way])
                seconds, _ = timed(step, device)
            if i >= cfg.train_warmup:
                rates[way].append(batch.target_tokens / seconds)
    timed_batches = batches[cfg.train_warmup :]
    positions = sum(b.src.numel() + b.tgt_in.numel() for b in timed_batches)
    tokens = sum(b.source_tokens + int((b.tgt_in != PAD).sum()) for b in timed_batches)
    packed, outside, padded = (statistics.median(rates[way]) for way in PACKING_WAYS)
    return {
        "precision": precision,
        "packed_target_tokens_per_s": packed,
        "outside_attention_target_tokens_per_s": outside,
        "padded_target_tokens_per_s": padded,
        "ratio": packed / padded,
        "outside_attention_ratio": outside / padded,
        # the share of the time a token packing saves that attention given padded inputs spends again
        "gain_inside_attention": (1 / outside - 1 / packed) / (1 / padded - 1 / packed)
        if packed != padded else float("nan"),
        "padding_share": 1 - tokens / positions,
        "pack_from": transformer_module.PACK_FROM,
    }


@dataclass(frozen=True)
class RecipeData:
    """What the benchmark takes from the Multi30k recipe: ``train.py``'s own training batches (warm-up first,
    then the timed ones), the recipe's vocabulary size, and the test references' lengths in target tokens."""

    batches: list[Batch]
    vocab_size: int
    reference_lengths: list[int]  # tokens of each test reference, without BOS or EOS


def recipe_data(data_path: Path, count: int, device: torch.device) -> RecipeData:
    """``count`` shuffled training batches of the Multi30k recipe, as ``train.py`` makes them, its vocabulary
    size and its test references' lengths.

    The data module is built from ``configs/multi30k.yaml``'s ``data`` section (joint BPE, punctuation split,
    length-bucketed batches of ``max_tokens``), with ``data_path`` as the corpus folder.
    """
    import yaml

    from data.datamodule import TranslationDataModule

    settings = yaml.safe_load(RECIPE_CONFIG.read_text(encoding="utf-8"))["data"]
    dm = TranslationDataModule(**{**settings, "path": str(data_path), "num_workers": 0})
    dm.setup("fit")
    if dm.src_vocab_size != dm.tgt_vocab_size:  # the benchmark's models take one size for both
        raise ValueError(f"the recipe's vocabularies differ: {dm.src_vocab_size} and {dm.tgt_vocab_size}")
    batches = []
    for batch in dm.dataloader("train", shuffle=True):
        batches.append(Batch(batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)))
        if len(batches) == count:
            break
    references = [pair.target for pair in dm.pairs("test")]
    lengths = [len(ids) for ids in dm.tgt_tokenizer.encode_batch(references)]
    return RecipeData(batches, dm.tgt_vocab_size, lengths)


def bench_recipe_training(cfg: BenchConfig, device: torch.device, recipe: RecipeData) -> dict:
    """``bench_training`` at the same sizes on ``train.py``'s own Multi30k batches instead of random ones."""
    cfg = replace(cfg, vocab_size=recipe.vocab_size)
    batches = recipe.batches[: cfg.train_warmup + cfg.train_iters]
    result = bench_training(cfg, device, batches=batches)
    result["padding_share"] = padding_share(batches[cfg.train_warmup :])
    result["batches"] = len(batches) - cfg.train_warmup
    result["sentences_per_batch"] = statistics.median(b.src.size(0) for b in batches)
    return result


def training_lines(results: dict) -> list[str]:
    """The report's training table: both models, their ratio, and packed against padded."""
    c, tr = results["config"], results["training"]
    lines = [
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
    lines.append(f"{'ours / tutorial':26}{tr['ratio']:>10.2f}x   (target >= 1.5x)")
    return [*lines, *packing_lines(results)]


def packing_lines(results: dict) -> list[str]:
    """The packed-vs-padded rows of the report (nothing for results without them)."""
    pk = results.get("packing")
    if pk is None:
        return []
    share = pk["gain_inside_attention"]
    inside = f"{share:.0%}" if share > 0 else "none"  # NaN (no gain to share) is not > 0 either
    return [
        (
            f"{'packed / padded':26}{pk['ratio']:>10.2f}x   model.Transformer on the tokens only vs every "
            f"position ({pk['packed_target_tokens_per_s']:.0f} vs {pk['padded_target_tokens_per_s']:.0f} "
            f"tgt tok/s, {pk['padding_share']:.0%} padding; train.py packs from {pk['pack_from']:.0%})"
        ),
        (
            f"{'packed outside attention':26}{pk['outside_attention_ratio']:>10.2f}x   attention given "
            f"padded inputs: {inside} of the time packing saves needs attention to see the packing"
        ),
    ]


def recipe_lines(results: dict) -> list[str]:
    """The report's ratio on random batches beside the one on train.py's batches (a skip reason without
    them)."""
    tr = results["training"]
    lines = ["", "training ratio on random batches and on train.py's own Multi30k batches, same sizes"]
    lines.append(f"{'':26}{'ours tok/s':>11}{'tutorial':>10}{'ratio':>8}{'padding':>9}")
    lines.append(
        f"{'random batches':26}{tr['ours']['target_tokens_per_s']:>11.0f}"
        f"{tr['tutorial']['target_tokens_per_s']:>10.0f}{tr['ratio']:>7.2f}x{tr['padding_share']:>9.1%}"
    )
    recipe = results.get("training_recipe_batches", {"skipped": "no --data given"})
    if "skipped" in recipe:
        return [*lines, f"{'train.py batches':26}skipped: {recipe['skipped']}"]
    return [*lines, (
        f"{'train.py batches':26}{recipe['ours']['target_tokens_per_s']:>11.0f}"
        f"{recipe['tutorial']['target_tokens_per_s']:>10.0f}{recipe['ratio']:>7.2f}x"
        f"{recipe['padding_share']:>9.1%}   ({recipe['batches']} timed, "
        f"{recipe['sentences_per_batch']:.0f} sentences each)"
    )]
