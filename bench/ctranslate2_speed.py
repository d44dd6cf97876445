"""Decoding speed of this project's PyTorch decoding against CTranslate2, side by side on the same sentences.

    python bench/ctranslate2_speed.py runs/multi30k/version_0/checkpoints/last.ckpt --threads 1
    python bench/ctranslate2_speed.py CKPT --test-split test2017 --max-sentences 500 --json ct2.json
    python bench/ctranslate2_speed.py --quick      # a tiny model trained in seconds: checks that it runs

Six decodings of the checkpoint's test split, each timed over the whole set (tokenization and detokenization
included, the export and the model loading not): PyTorch greedy and beam search (``evaluation.translate``,
batches of --batch-size sentences), and CTranslate2 greedy and beam search with float32 weights and with int8
weights (the same batches, ``intra_threads`` = --threads). The table gives sentences/s, the ratio to the
PyTorch decoding of the same kind, the BLEU of each against the references, and the share of sentences whose
tokens equal PyTorch's (fp32 should give 100%; int8 changes the arithmetic).

Beam search runs at length penalty 0 by default, where CTranslate2's ``length ** alpha`` and this project's
GNMT penalty rank hypotheses alike; CTranslate2 also stops a sentence as soon as its best beam ends, which
gives the same best hypothesis with less work than this project's stopping test.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# run as `python bench/ctranslate2_speed.py`: make the repository root importable
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.metrics import bleu_tokenizer, score_translations
from bench.speed import describe_machine
from data.corpora import CorpusError
from data.pairs import Pair
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from evaluation.translate import translate
from export.ctranslate2 import CTranslate2Translator, EngineError, export, import_ctranslate2
from model import Transformer
from training.checkpoints import CheckpointError, load_run
from training.module import validation_bleu_tokenizer


@dataclass(frozen=True)
class Decoding:
    """One row of the table."""

    name: str
    engine: str  # "pytorch" or "ctranslate2"
    compute_type: str  # "float32" or "int8"
    beam_size: int


def decodings(beam_size: int) -> list[Decoding]:
    rows = [Decoding("PyTorch greedy", "pytorch", "float32", 1),
            Decoding(f"PyTorch beam {beam_size}", "pytorch", "float32", beam_size)]
    for compute_type in ("float32", "int8"):
        name = "fp32" if compute_type == "float32" else compute_type
        rows += [Decoding(f"CTranslate2 {name} greedy", "ctranslate2", compute_type, 1),
                 Decoding(f"CTranslate2 {name} beam {beam_size}", "ctranslate2", compute_type, beam_size)]
    return rows


def quick_run(sentences: int) -> tuple[Transformer, Tokenizer, Tokenizer, list[Pair]]:
    """A tiny model trained for a few dozen steps on toy pairs (seconds), and ``sentences`` test pairs."""
    import torch.nn.functional as F

    from data.batching import collate
    from data.toy import make_toy_splits
    from model import TransformerConfig

    splits = make_toy_splits(train_size=256, val_size=4, test_size=sentences, seed=11)
    src = Tokenizer.train([p.source for p in splits["train"]])
    tgt = Tokenizer.train([p.target for p in splits["train"]])
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src.vocab_size, tgt.vocab_size, **SPECIALS.ids, d_model=32,
                                          num_heads=2, d_ff=64, num_encoder_layers=2, num_decoder_layers=2,
                                          dropout=0.0, max_len=64))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    train = splits["train"]
    for step in range(40):
        chunk = train[(step * 32) % 224 : (step * 32) % 224 + 32]
        batch = collate([(i, src.encode(p.source), tgt.encode(p.target)) for i, p in enumerate(chunk)])
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=SPECIALS.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), src, tgt, splits["test"]


def checkpoint_run(args) -> tuple[Transformer, Tokenizer, Tokenizer, list[Pair], str]:
    """The checkpoint's model, tokenizers and test pairs (``--max-sentences`` of them), and sacreBLEU's
    tokenizer for its target language."""
    run = load_run(args.checkpoint, data_path=args.data_path, test_split=args.test_split)
    pairs = run.datamodule.pairs("test")
    if args.max_sentences:
        pairs = pairs[: args.max_sentences]
    dm = run.datamodule
    return run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, validation_bleu_tokenizer(dm)


def time_decoding(decode, repeats: int) -> tuple[float, list[list[int]]]:
    """Median seconds of ``decode()`` over ``repeats`` runs after one untimed warm-up run, and its output."""
    output = decode()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        output = decode()
        times.append(time.perf_counter() - start)
    return statistics.median(times), output


def measure(model, src, tgt, pairs, args, model_dir: Path, *, bleu_tokenize: str) -> list[dict]:
    """Each decoding's speed and agreement with PyTorch's, and its BLEU (sacreBLEU's ``bleu_tokenize``) when
    the pairs have references."""
    sources = [p.source for p in pairs]
    references = [p.target for p in pairs]
    has_references = all(r.strip() for r in references)
    rows, outputs = [], {}
    translators = {}
    for row in decodings(args.beam_size):
        options = {"beam_size": row.beam_size, "length_penalty": args.length_penalty,
                   "batch_size": args.batch_size, "max_len": args.max_len}
        if row.engine == "pytorch":
            def decode(options=options):
                return translate(model, src, tgt, sources, **options)
        else:
            if row.compute_type not in translators:
                translators[row.compute_type] = CTranslate2Translator(
                    model_dir, src, tgt, model_max_len=model.config.max_len, compute_type=row.compute_type,
                    threads=args.threads,
                )
            translator = translators[row.compute_type]

            def decode(options=options, translator=translator):
                return translator.translate(sources, **options)
        seconds, ids = time_decoding(decode, args.repeats)
        outputs[row.name] = ids
        reference_row = "PyTorch greedy" if row.beam_size == 1 else f"PyTorch beam {args.beam_size}"
        pytorch_ids = outputs[reference_row]
        result = {
            "name": row.name, "engine": row.engine, "compute_type": row.compute_type,
            "beam_size": row.beam_size, "seconds": seconds, "sentences_per_second": len(sources) / seconds,
            "same_tokens_as_pytorch": sum(a == b for a, b in zip(ids, pytorch_ids)) / len(sources),
        }
        pytorch_speed = next((r["sentences_per_second"] for r in rows if r["name"] == reference_row), None)
        result["ratio_to_pytorch"] = result["sentences_per_second"] / (
            pytorch_speed or result["sentences_per_second"]
        )
        if has_references:
            hypotheses = [tgt.decode(i) for i in ids]
            result["bleu"] = score_translations(hypotheses, references, tokenize=bleu_tokenize).bleu
        rows.append(result)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| decoding | sentences/s | vs PyTorch (same search) | BLEU | same tokens as PyTorch |",
             "|---|---|---|---|---|"]
    for r in rows:
        bleu = f"{r['bleu']:.2f}" if "bleu" in r else "-"
        lines.append(f"| {r['name']} | {r['sentences_per_second']:.1f} | {r['ratio_to_pytorch']:.2f}x "
                     f"| {bleu} | {100 * r['same_tokens_as_pytorch']:.1f}% |")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", nargs="?", help="a .ckpt file written by train.py (not with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny model trained in seconds, a few dozen sentences")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="CPU threads of both engines (default: torch's current setting)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--beam-size", type=int, default=5, help="beam width of the beam rows (default: 5)")
    parser.add_argument("--length-penalty", type=float, default=0.0,
                        help="length penalty alpha of the beam rows "
                             "(default: 0, where both engines rank alike)")
    parser.add_argument("--max-len", type=int, default=None,
                        help="most tokens per sentence "
                             "(default: twice the source length + 10, as evaluate.py)")
    parser.add_argument("--max-sentences", type=int, default=None, help="the first N test sentences only")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each decoding, median (default: 3)")
    parser.add_argument("--data-path", help="corpus folder, if it moved since training")
    parser.add_argument("--test-split", metavar="NAME", help="another test set of the corpus, e.g. test2017")
    parser.add_argument("--json", metavar="FILE", help="also write every figure and the settings here")
    args = parser.parse_args(argv)
    if args.quick == (args.checkpoint is not None):
        parser.error("give a checkpoint, or --quick")
    for name in ("threads", "batch_size", "beam_size", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.quick:
        args.repeats = 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import_ctranslate2()
    torch.set_num_threads(args.threads)
    if args.quick:  # toy pairs, scored with 13a as their validation BLEU is
        (model, src, tgt, pairs), tokenize = quick_run(48), bleu_tokenizer(None)
    else:
        model, src, tgt, pairs, tokenize = checkpoint_run(args)
    with tempfile.TemporaryDirectory(prefix="ctranslate2-bench-") as folder:
        model_dir = export(model, src, tgt, Path(folder) / "model")
        rows = measure(model, src, tgt, pairs, args, model_dir, bleu_tokenize=tokenize)
    results = {
        "machine": describe_machine(torch.device("cpu")),
        "ctranslate2": import_ctranslate2().__version__,
        "settings": {"checkpoint": args.checkpoint, "quick": args.quick, "sentences": len(pairs),
                     "threads": args.threads, "batch_size": args.batch_size, "beam_size": args.beam_size,
                     "length_penalty": args.length_penalty, "max_len": args.max_len, "repeats": args.repeats},
        "rows": rows,
    }
    m = results["machine"]
    print(f"{m['cpu']}, {args.threads} threads, torch {m['torch']}, ctranslate2 {results['ctranslate2']}; "
          f"{len(pairs)} sentences, batch {args.batch_size}, median of {args.repeats}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    try:
        main()
    except (EngineError, CheckpointError, CorpusError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
