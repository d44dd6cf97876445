"""Evaluate a trained checkpoint, or translate with it and look at its attention.

    python evaluate.py runs/toy/version_0/checkpoints/last.ckpt                 # test split of its data
    python evaluate.py CKPT --split val --beam-size 4 --output val.jsonl
    python evaluate.py CKPT --tsv my_test.tsv                                   # source<TAB>reference lines
    python evaluate.py CKPT --average-last 5                                    # average the last 5 checkpoints
    python evaluate.py CKPT --translate "the big dog sees a cat" --attention-out maps/
    python evaluate.py CKPT --head-importance --prune-heads 4 --alignment

The last line printed is one JSON object with the scores, for scripts.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from data.corpora import CorpusError, read_tsv
from evaluation.checkpoints import CheckpointError, average_state_dicts, last_checkpoints, load_run
from evaluation.translate import translate
from training.metrics import score_translations, sentence_chrf


class OutputExistsError(Exception):
    pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt file written by train.py")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--split", choices=("val", "test"), default="test", help="split of the run's data (default: test)")
    source.add_argument("--tsv", help="evaluate on this file of source<TAB>reference lines instead")
    source.add_argument("--translate", metavar="TEXT", help="translate TEXT (or '-': one sentence per line on stdin)")
    parser.add_argument("--beam-size", type=int, default=1, help="1 decodes greedily (default: 1)")
    parser.add_argument("--length-penalty", type=float, default=0.6, help="GNMT length penalty alpha (default: 0.6)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--max-len", type=int, default=None, help="most tokens to generate per sentence")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--output", help="write one JSON line per sentence to this .jsonl file")
    parser.add_argument("--average-last", type=int, metavar="K", help="average the weights of the run's last K checkpoints")
    parser.add_argument("--attention-out", metavar="DIR", help="with --translate: write attention PNGs and an HTML head view")
    parser.add_argument("--data-path", help="corpus folder, if it moved since training")
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.attention_out and args.translate is None:
        parser.error("--attention-out needs --translate")
    for name in ("beam_size", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"--device {name}: CUDA is not available on this machine")
    return device


def check_new(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; choose another name or pass --overwrite")


def run_translate(args, run, device) -> None:
    sentences = [line.strip() for line in sys.stdin] if args.translate == "-" else [args.translate]
    sentences = [s for s in sentences if s]
    dm, model = run.datamodule, run.module.model
    hypotheses = translate(
        model, dm.src_tokenizer, dm.tgt_tokenizer, sentences, beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len,
    )
    for source, ids in zip(sentences, hypotheses):
        print(dm.tgt_tokenizer.decode(ids))
    if args.attention_out:
        from evaluation.attention_export import export_attention  # matplotlib only when needed

        out = Path(args.attention_out)
        for number, (source, ids) in enumerate(zip(sentences, hypotheses), start=1):
            folder = out / f"sentence_{number}"
            check_new(folder, args.overwrite)
            written = export_attention(model, dm.src_tokenizer, dm.tgt_tokenizer, source, ids, folder)
            print(f"wrote {len(written)} files to {folder}", file=sys.stderr)


def run_evaluation(args, run, device) -> dict:
    dm, model = run.datamodule, run.module.model
    pairs = read_tsv(args.tsv) if args.tsv else dm.pairs(args.split)
    if args.output:
        check_new(Path(args.output), args.overwrite)
    bar = tqdm(total=len(pairs), desc="translating", unit="sent", disable=args.quiet, file=sys.stderr)
    start = time.perf_counter()
    hypotheses_ids = translate(
        model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs], beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len, progress=bar.update,
    )
    elapsed = time.perf_counter() - start
    bar.close()
    hypotheses = [dm.tgt_tokenizer.decode(ids) for ids in hypotheses_ids]
    references = [p.target for p in pairs]
    scores = score_translations(hypotheses, references)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            for pair, hypothesis in zip(pairs, hypotheses):
                line = {"source": pair.source, "reference": pair.target, "hypothesis": hypothesis,
                        "chrf": sentence_chrf(hypothesis, pair.target)}
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return {
        **scores.as_dict(),
        "beam_size": args.beam_size,
        "length_penalty": args.length_penalty,
        "sentences_per_second": len(pairs) / max(elapsed, 1e-9),
        "data": args.tsv or args.split,
        "checkpoint": args.checkpoint,
        "averaged_checkpoints": args.average_last or 1,
        "global_step": run.global_step,
        "device": str(device),
    }


def print_summary(result: dict) -> None:
    print(
        f"{result['data']}: {result['num_sentences']} sentences, beam {result['beam_size']}\n"
        f"  BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  exact match {100 * result['exact_match']:.2f}%\n"
        f"  {result['sentences_per_second']:.1f} sentences/s on {result['device']}\n"
        f"  sacreBLEU {result['signature']}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
        state_dict = None
        if args.average_last:
            paths = last_checkpoints(args.checkpoint, args.average_last)
            state_dict = average_state_dicts(paths)
            print(f"averaging {len(paths)} checkpoints: {', '.join(p.name for p in paths)}", file=sys.stderr)
        run = load_run(args.checkpoint, state_dict=state_dict, data_path=args.data_path, device=str(device))
        if args.translate is not None:
            run_translate(args, run, device)
            return 0
        result = run_evaluation(args, run, device)
    except (CheckpointError, CorpusError, OutputExistsError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print_summary(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
