"""The baseline for the Multi30k results: PyTorch's translation tutorial, trained for a fixed wall-clock
budget.

    python bench/multi30k_baseline.py --data-path ../shared/corpora/multi30k --minutes 60

The model and recipe are those of the tutorial "Language Translation with nn.Transformer and torchtext":
``nn.Transformer`` (post-LN) with 512-wide embeddings, 8 heads, 3 + 3 layers and 512-wide feed-forward layers,
dropout 0.1, batches of 128 shuffled sentences, Adam at a constant learning rate of 1e-4, plain cross-entropy
(no label smoothing), and greedy decoding that re-runs the decoder over the prefix, stopping at source
length + 5. Only the data pipeline is this project's: the same joint BPE vocabulary as
``configs/multi30k.yaml`` (the tutorial's spaCy tokenizers and torchtext vocabularies are gone with
torchtext), so both models see the same tokens and are scored by the same sacreBLEU on detokenized text.

Training stops at the first step that ends past the budget (per-epoch validation loss, as in the tutorial,
counts towards it). Then every test split is translated and scored; the scores go to ``<out>/results.json``.
"""

import argparse
import json
import math
import platform
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader

if __package__ in (
    None,
    "",
):  # run as `python bench/multi30k_baseline.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.metrics import bleu_tokenizer, score_translations
from bench.speed_common import BOS, EOS, PAD, BenchConfig
from bench.tutorial_model import TutorialSeq2Seq
from data.batching import Batch, collate
from data.corpora import read_parallel
from data.datamodule import TranslationDataModule
from data.pairs import Pair

TEST_SPLITS = ("test2016", "test2017", "mscoco2017")
# The fields of BenchConfig that describe the model; the rest are the speed benchmark's own settings.
MODEL_FIELDS = ("d_model", "num_heads", "num_layers", "d_ff", "vocab_size", "dropout")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-path", default="../shared/corpora/multi30k", help="the Multi30k folder")
    p.add_argument("--minutes", type=float, default=60.0, help="training wall-clock budget")
    p.add_argument("--out", default="runs/multi30k_baseline", help="folder for results.json and the model")
    p.add_argument(
        "--vocab-size", type=int, default=8000, help="joint BPE vocabulary, as configs/multi30k.yaml"
    )
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--test-splits", nargs="+", default=list(TEST_SPLITS))
    p.add_argument("--overwrite", action="store_true", help="replace the results of an earlier run in --out")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--quick", action="store_true", help="tiny model, 2000 pairs, seconds: checks that it runs"
    )
    return p.parse_args(argv)


def loss_of(model: TutorialSeq2Seq, batch: Batch) -> Tensor:
    logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)


@torch.no_grad()
def greedy_rerun(model: TutorialSeq2Seq, src: Tensor) -> list[list[int]]:
    """The tutorial's ``greedy_decode``, batched: the decoder re-reads the whole prefix at every step."""
    model.eval()
    src_padding = src == PAD  # (B, S), True = ignore, as nn.Transformer wants
    memory = model.transformer.encoder(
        model.positional_encoding(model.src_tok_emb(src)), src_key_padding_mask=src_padding
    )
    limits = (~src_padding).sum(1) + 5  # the tutorial's max_len: source tokens + 5
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(int(limits.max())):
        t = ys.size(1)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(t)
        out = model.transformer.decoder(
            model.positional_encoding(model.tgt_tok_emb(ys)),
            memory,
            tgt_mask=causal,
            memory_key_padding_mask=src_padding,
        )
        next_word = model.generator(out[:, -1]).argmax(-1)  # (B,)
        next_word = torch.where(done, PAD, next_word)
        ys = torch.cat([ys, next_word[:, None]], dim=1)
        done |= (next_word == EOS) | (t >= limits)
        if bool(done.all()):
            break
    return [[i for i in row if i not in (PAD, EOS)] for row in ys[:, 1:].tolist()]  # only PAD follows EOS


def translate_split(model: TutorialSeq2Seq, dm: TranslationDataModule, pairs: list[Pair]) -> list[str]:
    hypotheses: list[str] = [""] * len(pairs)
    for batch in dm.dataloader_for_pairs(pairs):
        for i, ids in zip(batch.index.tolist(), greedy_rerun(model, batch.src), strict=True):
            hypotheses[i] = dm.tgt_tokenizer.decode(ids)
    return hypotheses


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    if (out / "results.json").exists() and not args.overwrite:  # checked before the hour of training
        sys.exit(
            f"error: {out / 'results.json'} exists; pass --overwrite to replace it, or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)

    dm = TranslationDataModule(
        dataset="multi30k",
        path=args.data_path,
        source_lang="de",
        target_lang="en",
        tokenizer="bpe",
        vocab_size=args.vocab_size,
        shared_vocab=True,
    )
    dm.setup("fit")
    train_items = list(dm.dataloader("train").dataset)  # (index, src ids, tgt ids), length-filtered
    if args.quick:
        train_items = train_items[:2000]
    collate_fn = partial(collate, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    train_loader = DataLoader(train_items, batch_size=args.batch_size, shuffle=True, collate_fn=collate_fn)
    val_loader = dm.dataloader("val")

    size = (
        {"d_model": 32, "num_heads": 2, "d_ff": 64}
        if args.quick
        else {"d_model": 512, "num_heads": 8, "d_ff": 512}
    )
    cfg = BenchConfig(num_layers=3, vocab_size=dm.tgt_vocab_size, dropout=0.1, **size)
    model = TutorialSeq2Seq(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)

    budget = args.minutes * 60.0
    start = time.perf_counter()
    epoch, steps, history = 0, 0, []
    while time.perf_counter() - start < budget:
        epoch += 1
        model.train()
        train_loss, train_batches = 0.0, 0
        for batch in train_loader:
            loss = loss_of(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_loss, train_batches, steps = train_loss + loss.item(), train_batches + 1, steps + 1
            if time.perf_counter() - start >= budget:
                break
        model.eval()
        with torch.no_grad():
            val_loss = sum(loss_of(model, b).item() for b in val_loader) / len(val_loader)
        elapsed = time.perf_counter() - start
        history.append(
            {"epoch": epoch, "steps": steps, "train_loss": train_loss / max(train_batches, 1),
                 "val_loss": val_loss, "minutes": elapsed / 60}
        )  # fmt: skip
        print(
            f"epoch {epoch}: {steps} steps, train loss {history[-1]['train_loss']:.3f}, "
            f"val loss {val_loss:.3f} (ppl {math.exp(val_loss):.1f}), {elapsed / 60:.1f} min",
            flush=True,
        )
    train_minutes = (time.perf_counter() - start) / 60
    torch.save(model.state_dict(), out / "model.pt")

    scores = {}
    for split in args.test_splits:
        folder = Path(args.data_path)
        pairs = read_parallel(folder / f"{split}.de", folder / f"{split}.en")
        if args.quick:
            pairs = pairs[:50]
        hypotheses = translate_split(model, dm, pairs)
        (out / f"{split}.hyp.en").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
        s = score_translations(hypotheses, [p.target for p in pairs], tokenize=bleu_tokenizer(dm.target_lang))
        scores[split] = {
            "bleu": s.bleu,
            "chrf": s.chrf,
            "exact_match": s.exact_match,
            "sentences": s.num_sentences,
        }
        print(f"{split}: BLEU {s.bleu:.2f}  chrF {s.chrf:.2f}  ({s.signature})", flush=True)

    results = {
        "model": "nn.Transformer, tutorial recipe",
        "model_sizes": {name: getattr(cfg, name) for name in MODEL_FIELDS},
        "batch_size": args.batch_size,
        "lr": args.lr,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_minutes": train_minutes,
        "epochs": epoch,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
        "history": history,
        "scores": scores,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
