"""Length generalisation of each position variant (``--model.positional``), trained side by side.

    python bench/positions.py --quick                          # tiny model, a few seconds per variant
    python bench/positions.py --json positions.json            # toy length split, the full budget
    python bench/positions.py --scan ../shared/corpora/scan    # also SCAN's length split
    python bench/positions.py --variants sinusoidal alibi      # some variants only

For each dataset every variant gets the same budget: the same model size, recipe (that of ``train.py``:
``TranslationModule``'s loss, AdamW and schedule), seed, batches and number of optimiser steps. Then greedy
decoding of the test split, whose sentences are longer than any seen in training, gives:

- exact match: whole outputs equal to the reference (token ids, so the tokenizer's spacing plays no part);
- mean output length against mean reference length, in tokens, EOS not counted;
- stops too early: the share of outputs shorter than their reference;
- exact match with oracle length: EOS is forbidden until the reference length and then forced, so only the
  choice of tokens is judged, not when to stop (Newman et al. 2020, "The EOS Decision and Length
  Extrapolation", report it beside the EOS-decided figure);
- what the heads do on those long sentences: the mean attention distance (``analysis.heads``) of the encoder's
  and the decoder's self-attention, averaged over every layer and head, teacher-forced on the references.
  ``--maps DIR`` also draws every head of the encoder self-attention and the cross-attention for the longest
  test sentence, one PNG per dataset, variant and kind.

The datasets: the toy language's ``length`` split (``--data.toy.split length``: training sentences of at most
12 words, test sentences longer) and, with ``--scan PATH``, SCAN's length split (training outputs of at most
22 actions, test outputs of 24-48). One table is printed, the variants side by side; ``--json`` writes every
figure with the machine and the budget.

Shape legend: B batch, S source length, L generated length.
"""

import argparse
import json
import logging
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from torch import Tensor

if __package__ in (None, ""):  # run as `python bench/positions.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.axes import KINDS, attention_axes
from analysis.heads import summarize
from bench.speed_common import describe_machine
from data.datamodule import TranslationDataModule
from data.reader import ToyOptions
from model import DecoderRequest, Transformer
from model.positions import POSITIONAL
from viz.plots import attention_grid


@dataclass(frozen=True)
class Budget:
    """What every variant gets on one dataset: data, model size, recipe and optimiser steps."""

    steps: int
    data: dict = field(default_factory=dict)  # TranslationDataModule arguments
    model: dict = field(default_factory=dict)  # TranslationModule arguments, vocabularies aside
    decode_max_len: int | None = None  # None: twice the source length plus 10


# The full budgets use the recipes of configs/default.yaml before its cosine decay (toy) and configs/scan.yaml
# (SCAN) on a smaller model (d_model 64, 2 + 2 layers), so that each training takes minutes on one CPU core
# (train_seconds in the JSON).
SMALL_MODEL = {"d_model": 64, "num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "d_ff": 256}
TOY = Budget(
    steps=3000,
    data={"dataset": "toy", "toy": ToyOptions(split="length", train_size=50_000, val_size=10, test_size=1000),
          "max_tokens": 2048},
    model={**SMALL_MODEL, "dropout": 0.0, "lr": 2e-3, "warmup_steps": 200, "schedule": "inverse_sqrt",
           "label_smoothing": 0.1},
)
SCAN = Budget(
    steps=3000,
    data={"dataset": "scan", "scan_split": "length", "max_tokens": 1024},
    model={**SMALL_MODEL, "dropout": 0.1, "lr": 2e-3, "warmup_steps": 400, "schedule": "cosine",
           "label_smoothing": 0.0},
    decode_max_len=60,
)
QUICK_MODEL = {"d_model": 16, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 32,
               "dropout": 0.0, "lr": 3e-3, "warmup_steps": 5}
QUICK_TOY = Budget(
    steps=15,
    data={"dataset": "toy", "toy": ToyOptions(split="length", train_size=200, val_size=10, test_size=16),
          "max_tokens": 512},
    model=QUICK_MODEL,
)
QUICK_SCAN = Budget(
    steps=15, data={"dataset": "scan", "scan_split": "length", "max_tokens": 512}, model=QUICK_MODEL,
    decode_max_len=60,
)

COLUMNS = (  # (JSON key, table heading, format)
    ("exact_match", "exact match", "{:.1%}"),
    ("oracle_length_exact_match", "EM, oracle length", "{:.1%}"),
    ("mean_output_length", "mean output len", "{:.2f}"),
    ("mean_reference_length", "mean reference len", "{:.2f}"),
    ("stops_too_early", "stops too early", "{:.1%}"),
    ("encoder_distance", "enc. self distance", "{:.2f}"),
    ("decoder_distance", "dec. self distance", "{:.2f}"),
)
MAP_KINDS = ("encoder", "cross")  # drawn by --maps
DISTANCE_SENTENCES = 256  # test sentences behind the attention distances


@torch.inference_mode()
def oracle_length_greedy(model: Transformer, src: Tensor, lengths: Tensor) -> list[list[int]]:
    """Greedy decoding that may not emit EOS before each reference length and stops there.

    src: (B, S); lengths: (B,) reference lengths without EOS. Returns each sentence's ``lengths[i]`` tokens.
    """
    c = model.config
    encoded = model.encode(src)
    steps = int(lengths.max()) if len(lengths) else 0
    cache = model.new_cache(reserve=max(steps, 1))
    tokens = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long, device=src.device)  # (B, 1 + step)
    for _ in range(steps):
        out = model.decode(tokens[:, -1:], encoded, cache=cache, request=DecoderRequest(last_only=True))
        logits = out.logits[:, -1].float()  # (B, V)
        logits[:, [c.pad_id, c.bos_id, c.eos_id]] = float("-inf")  # EOS comes at the reference length
        tokens = torch.cat([tokens, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return [row[1 : 1 + n] for row, n in zip(tokens.tolist(), lengths.tolist())]


def score(model: Transformer, datamodule: TranslationDataModule, max_len: int | None) -> dict:
    """Greedy decoding of the test split and the figures of the table."""
    c = model.config
    references, hypotheses, oracle = [], [], []
    for batch in datamodule.test_dataloader():
        src = batch.src.to(model.device)
        refs = [[t for t in row if t not in (c.pad_id, c.eos_id)] for row in batch.tgt_out.tolist()]
        references += refs
        hypotheses += model.generated_ids(model.generate(src, max_len=max_len))
        oracle += oracle_length_greedy(model, src, torch.tensor([len(r) for r in refs]))
    n = len(references)
    if n == 0:
        raise ValueError("the test split is empty")
    return {
        "num_sentences": n,
        "exact_match": sum(h == r for h, r in zip(hypotheses, references)) / n,
        "oracle_length_exact_match": sum(o == r for o, r in zip(oracle, references)) / n,
        "mean_output_length": sum(map(len, hypotheses)) / n,
        "mean_reference_length": sum(map(len, references)) / n,
        "stops_too_early": sum(len(h) < len(r) for h, r in zip(hypotheses, references)) / n,
    }


@torch.no_grad()
def attention_distances(model: Transformer, datamodule: TranslationDataModule) -> dict:
    """Mean attention distance of the encoder's and decoder's self-attention on the first test sentences.

    Teacher-forced on the references; each statistic is averaged over every layer and head, and over batches
    weighted by their number of sentences.
    """
    pad_id = model.config.pad_id
    totals, count = {"encoder": 0.0, "decoder": 0.0}, 0
    for batch in datamodule.test_dataloader():
        src, tgt_in = batch.src.to(model.device), batch.tgt_in.to(model.device)
        _, maps = model(src, tgt_in, return_attention=True)
        named = dict(zip(KINDS, maps))
        stats = summarize(
            {kind: [m.float().cpu() for m in named[kind]] for kind in totals},
            src_valid=batch.src != pad_id, tgt_valid=batch.tgt_out != pad_id,
        )
        for kind in totals:
            totals[kind] += float(stats[kind]["distance"].mean()) * len(src)
        count += len(src)
        if count >= DISTANCE_SENTENCES:
            break
    return {f"{kind}_distance": total / count for kind, total in totals.items()}


@torch.no_grad()
def draw_maps(model: Transformer, datamodule: TranslationDataModule, directory: Path,
              name: str) -> list[Path]:
    """Every head of MAP_KINDS for the longest test sentence, teacher-forced on its reference: a PNG each."""
    longest = max((batch for batch in datamodule.test_dataloader()), key=lambda b: b.tgt_out.size(1))
    row = int((longest.tgt_out != model.config.pad_id).sum(dim=1).argmax())
    pad_id = model.config.pad_id
    src = longest.src[row][longest.src[row] != pad_id].unsqueeze(0)  # (1, S)
    tgt_in = longest.tgt_in[row][longest.tgt_out[row] != pad_id].unsqueeze(0)  # (1, T)
    tgt_out = longest.tgt_out[row][longest.tgt_out[row] != pad_id]
    _, maps = model(src.to(model.device), tgt_in.to(model.device), return_attention=True)
    axes = attention_axes(datamodule.src_tokenizer.tokens(src[0].tolist()),
                          datamodule.tgt_tokenizer.tokens(tgt_in[0].tolist()),
                          datamodule.tgt_tokenizer.tokens(tgt_out.tolist()))
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, layers in zip(KINDS, maps):
        if kind not in MAP_KINDS:
            continue
        figure = attention_grid(
            [weights[0].float().cpu() for weights in layers], *axes[kind],
            f"{name}: {kind}, {src.size(1)} source and {tgt_in.size(1)} target positions",
        )
        path = directory / f"{name}_{kind}.png"
        figure.savefig(path)
        plt.close(figure)
        written.append(path)
    return written


def train_and_score(positional: str, budget: Budget, datamodule: TranslationDataModule, seed: int,
                    device: str, maps: Path | None = None, name: str = "") -> dict:
    """Train one variant for ``budget.steps`` optimiser steps with train.py's recipe, then score it.

    With ``maps``, also draw its attention maps there, in files named after ``name``.
    """
    import lightning as L

    from training.module import TranslationModule

    L.seed_everything(seed, verbose=False)
    module = TranslationModule(
        src_vocab_size=datamodule.src_vocab_size,
        tgt_vocab_size=datamodule.tgt_vocab_size,
        pad_id=datamodule.pad_id,
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        positional=positional,
        decode_every_n_epochs=0,
        **budget.model,
    )
    trainer = L.Trainer(
        accelerator=device,
        devices=1,
        precision="32-true",
        max_steps=budget.steps,
        max_epochs=-1,
        gradient_clip_val=1.0,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    train_seconds = time.perf_counter() - start
    model = module.model.eval()
    figures = score(model, datamodule, budget.decode_max_len)
    figures.update(attention_distances(model, datamodule))
    if maps is not None:
        figures["maps"] = [str(path) for path in draw_maps(model, datamodule, maps, name)]
    figures["final_train_loss"] = float(trainer.callback_metrics.get("train/loss", float("nan")))
    figures["train_seconds"] = train_seconds
    return figures


def table(results: dict) -> str:
    """One markdown table: a row per dataset and variant, the datasets one under the other."""
    lines = ["| dataset | variant | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    for dataset, by_variant in results["datasets"].items():
        for variant, figures in by_variant["variants"].items():
            cells = [fmt.format(figures[key]) for key, _, fmt in COLUMNS]
            lines.append(f"| {dataset} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps: checks that it runs")
    parser.add_argument("--variants", nargs="+", default=list(POSITIONAL), metavar="NAME",
                        help=f"position variants to compare (default: all of {', '.join(POSITIONAL)})")
    parser.add_argument("--scan", type=Path, default=None, metavar="PATH",
                        help="the SCAN folder (holding length_split/): also run SCAN's length split")
    parser.add_argument("--no-toy", action="store_true", help="skip the toy length split")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps per variant")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--maps", type=Path, default=None, metavar="DIR",
                        help="also draw each variant's encoder and cross attention maps into DIR")
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants if v not in POSITIONAL]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(POSITIONAL)}")
    if args.scan is not None and not (args.scan / "length_split").is_dir():
        parser.error(f"--scan {args.scan}: no length_split/ folder there (give SCAN's root folder)")
    if args.no_toy and args.scan is None:
        parser.error("--no-toy leaves nothing to run: give --scan PATH")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    budgets = {}
    if not args.no_toy:
        budgets["toy_length"] = QUICK_TOY if args.quick else TOY
    if args.scan is not None:
        budget = QUICK_SCAN if args.quick else SCAN
        budgets["scan_length"] = Budget(budget.steps, {**budget.data, "path": str(args.scan)}, budget.model,
                                        budget.decode_max_len)
    results = {"machine": describe_machine(torch.device(device)), "quick": args.quick, "datasets": {}}
    for name, budget in budgets.items():
        if args.steps is not None:
            budget = Budget(args.steps, budget.data, budget.model, budget.decode_max_len)
        datamodule = TranslationDataModule(seed=args.seed, **budget.data)
        for split in ("train", "test"):  # data and tokenizers built once, outside every variant's timing
            datamodule.dataloader(split)
        entry = {"budget": asdict(budget), "variants": {}}
        results["datasets"][name] = entry
        for variant in args.variants:
            entry["variants"][variant] = train_and_score(variant, budget, datamodule, args.seed, device,
                                                         args.maps, f"{name}_{variant}")
            figures = entry["variants"][variant]
            print(f"{name} {variant}: exact match {figures['exact_match']:.1%} after {budget.steps} steps "
                  f"({figures['train_seconds']:.0f} s)", file=sys.stderr, flush=True)
    m = results["machine"]
    print(f"machine: {m['cpu']}, {m['threads']} threads, device {m['device']}, torch {m['torch']}")
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Quiet for a script's output; not in main(), which tests call in their own process.
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    main()
