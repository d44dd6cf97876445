"""``evaluate.py score`` (the default: ``evaluate.py CKPT``): a split or a --tsv file translated and scored,
with the head analyses asked for; ``evaluate.py score-ctranslate2``: the same scores of CTranslate2's
translations (``export/engine.py``). Both print a summary, then the result as one JSON line, for scripts.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from analysis.metrics import BLEU_TOKENIZERS
from commands.shared import (
    checkpoint_of,
    decoding,
    decoding_parent,
    device_parent,
    load_model,
    model_parent,
    parent,
    progress_bar,
    prune_option,
    quiet_parent,
    say,
    whole,
)
from evaluation.alignment import check_alignable
from evaluation.head_masks import all_heads
from evaluation.importance import importance_paths, measure_head_importance, write_importance
from evaluation.inputs import analysis_folder, check_new, check_output, resolve_device, whole_analysis
from evaluation.pruning import prune_count
from evaluation.result import bleu_tokenize, scored_result, summary, write_sentences
from evaluation.scoring import Data, check_lengths, read_pairs, score
from evaluation.translate import Decoding
from export.ctranslate2 import import_ctranslate2, length_penalty_note
from export.engine import translate_with_engine
from training.checkpoints import LoadedRun


def scoring_parent() -> argparse.ArgumentParser:
    """What both engines read and write: the pairs, the BLEU's tokenizer, --output."""
    parser = parent()
    data = parser.add_argument_group("data and output")
    pairs = data.add_mutually_exclusive_group()
    pairs.add_argument("--split", choices=("val", "test"), default="test",
                       help="split of the run's data (default: test)")
    pairs.add_argument("--test-split", metavar="NAME", help="another test set of the run's corpus, e.g. "
                                                            "test2017 or mscoco2017")
    pairs.add_argument("--tsv", help="score this file of source<TAB>reference lines instead")
    data.add_argument("--bleu-tokenize", choices=BLEU_TOKENIZERS, metavar="NAME",
                      help=f"sacreBLEU's tokenizer of the BLEU (default: the one it prescribes for the run's "
                           f"target language: zh for Chinese, ja-mecab for Japanese, ko-mecab for Korean, "
                           f"else 13a; as during training). One of {', '.join(BLEU_TOKENIZERS)}")
    data.add_argument("--output", help="write one JSON line per sentence to this .jsonl file")
    data.add_argument("--overwrite", action="store_true", help="replace existing output files")
    return parser


def add_to(subparsers) -> None:
    shared = [scoring_parent(), decoding_parent(), quiet_parent()]
    command = subparsers.add_parser(
        "score", parents=[model_parent(), *shared, device_parent()],
        help="(the default: evaluate.py CKPT) score a split or a --tsv file, and analyse the heads",
        description=__doc__,
    )
    heads = command.add_argument_group("head analysis (docs/evaluating.md, \"What the heads do\")")
    heads.add_argument("--head-importance", action="store_true",
                       help="loss, BLEU and exact-match change when each head alone is silenced")
    heads.add_argument("--importance-sentences", type=whole(1), default=500, metavar="N",
                       help="decode the first N sentences for the BLEU and exact-match changes "
                            "(default: 500). They cost about 1 + number of heads greedy decodings of these "
                            "sentences; the loss changes use every sentence and cost about 1 + number of "
                            "heads teacher-forced passes, far less")
    heads.add_argument("--ablation-batch", type=whole(1), default=256, metavar="ROWS",
                       help="sentence copies in one forward pass: each batch runs ROWS // --batch-size "
                            "ablations at once (default: 256)")
    heads.add_argument("--prune-heads", type=prune_option, metavar="K",
                       help="silence the K least important heads (or a fraction in (0, 1) of all heads) and "
                            "evaluate so")
    heads.add_argument("--alignment", action="store_true",
                       help="AER of the best cross-attention head and of the head average (toy, copy, "
                            "reverse data)")
    heads.add_argument("--analysis-out", metavar="DIR",
                       help="folder of the --head-importance files (default: <run>/analysis/<checkpoint "
                            "name>; with --hf FOLDER: FOLDER/analysis)")
    command.set_defaults(run=run_score, check=needs_pairs)

    engine = subparsers.add_parser(
        "score-ctranslate2", parents=[model_parent(hf=False), *shared],
        help="score a split or a --tsv file with CTranslate2 (pip install ctranslate2; CPU, no attention)",
        description=__doc__,
    )
    engine.add_argument("--engine-model", metavar="DIR",
                        help="translate with this export (evaluate.py export-ctranslate2) instead of "
                             "exporting the checkpoint to a temporary folder first")
    engine.add_argument("--compute-type", choices=("float32", "int8"), default="float32",
                        help="CTranslate2 weights: float32 (default) or int8")
    engine.set_defaults(run=run_engine)


def needs_pairs(args: argparse.Namespace) -> str | None:
    if args.hf and not args.tsv:
        return ("--hf: a transformers model has no data of its own: give --tsv FILE (source<TAB>reference "
                "lines)")
    return None


def described(args: argparse.Namespace, checkpoint: str | None, data: Data) -> dict:
    """What the result records of what was scored."""
    model = {"hf_model": args.model} if getattr(args, "hf", False) else {}
    return {"data": data.name, "checkpoint": checkpoint, "averaged_checkpoints": args.average_last or 1,
            **model}


def report(result: dict, sentences: list[dict], output: str | None) -> int:
    """The summary, then the result as the last line; then --output, whose failed write (a full disk) costs
    the file, not the scores."""
    print(summary(result))
    print(json.dumps(result), flush=True)
    if output:
        try:
            write_sentences(Path(output), sentences)
        except OSError as error:
            say(f"error: --output {output}: {error.strerror or error}; it was not written")
            return 1
    return 0


def run_score(args: argparse.Namespace) -> int:
    checkpoint, data = checkpoint_of(args), Data(args.split, args.tsv)
    if args.output:
        check_output(args.output, args.overwrite)
    paths = None  # the head importance's files
    if args.head_importance:
        folder = analysis_folder(args.analysis_out, checkpoint=checkpoint, hf_model=args.model)
        paths = importance_paths(folder, data.stem)
        for path in paths.values():
            check_new(path, args.overwrite)
    device = resolve_device(args.device)
    run = load_model(args, checkpoint, device)
    dm = run.datamodule
    pairs = read_pairs(run, data)
    analysing = args.head_importance or args.prune_heads is not None or args.alignment
    check_lengths(run, pairs, data, targets=analysing)  # the head analyses read references teacher-forced
    tokenize = bleu_tokenize(run, pairs, args.bleu_tokenize)  # its packages, before any long computation
    if args.alignment:
        check_alignable(pairs, dm.src_tokenizer, dm.tgt_tokenizer)
    decode, about = decoding(args, run), described(args, checkpoint, data)
    with whole_analysis():  # the head importance's JSON and heatmaps stay only if all of it ends well
        added, silenced = {}, None
        if args.head_importance or args.prune_heads is not None:
            added, silenced = analyse_heads(args, run, pairs, decode, tokenize, paths, about)
        with progress_bar("translating", len(pairs), args.quiet) as progress:
            result, sentences = score(
                run, pairs, decode, tokenize=tokenize, device=device, silenced=silenced,
                alignment=args.alignment, sentences=bool(args.output), progress=progress,
            )
    return report({**result, **about, **added}, sentences, args.output)


def analyse_heads(args: argparse.Namespace, run: LoadedRun, pairs, decode: Decoding, tokenize: str,
                  paths: dict[str, Path] | None, about: dict) -> tuple[dict, list | None]:
    """--head-importance (its table printed, its JSON and heatmaps written to ``paths``) and --prune-heads:
    the keys they add to the result, and the heads to silence (None: no pruning)."""
    from viz.reports import draw_head_importance  # matplotlib only when needed

    dm, model = run.datamodule, run.module.model
    total = len(all_heads(model.config))
    count = 0 if args.prune_heads is None else prune_count(args.prune_heads, total)  # before all else
    decoded = min(args.importance_sentences, len(pairs)) if args.head_importance else 0
    start = time.perf_counter()
    with progress_bar("ablating heads", len(pairs) + decoded, args.quiet) as progress:
        importance = measure_head_importance(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, decode_sentences=decoded,
            batch_size=decode.batch_size, max_rows=args.ablation_batch, max_len=decode.max_len,
            progress=progress, bleu_tokenize=tokenize,
        )
    added: dict = {}
    if paths is not None:
        seconds = time.perf_counter() - start
        write_importance(importance, paths, about={"checkpoint": about["checkpoint"], "data": about["data"],
                                                   "global_step": run.global_step, "seconds": seconds})
        draw_head_importance(importance, paths)
        print(importance.table())
        say(f"wrote {', '.join(str(p) for p in paths.values())}")
        added["head_importance"] = str(paths["json"])
    if args.prune_heads is None:
        return added, None
    silenced = importance.ranking()[:count]
    added |= {"pruned_heads": [h.as_dict() for h in silenced], "num_heads": total,
              "unpruned_nll_per_token": importance.baseline_loss}
    return added, silenced


def run_engine(args: argparse.Namespace) -> int:
    import_ctranslate2()  # before anything is loaded
    checkpoint = checkpoint_of(args)
    if args.output:
        check_output(args.output, args.overwrite)
    run = load_model(args, checkpoint, torch.device("cpu"))  # CTranslate2 runs on the CPU
    dm, data = run.datamodule, Data(args.split, args.tsv)
    pairs = read_pairs(run, data)
    tokenize = bleu_tokenize(run, pairs, args.bleu_tokenize)  # its packages, before translating
    decode = decoding(args, run)
    if (note := length_penalty_note(decode.beam_size, decode.length_penalty)) is not None:
        say(note)
    with progress_bar("translating (ctranslate2)", len(pairs), args.quiet) as progress:
        done = translate_with_engine(
            run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs],
            **decode.options(), compute_type=args.compute_type, engine_model=args.engine_model,
            progress=progress,
        )
    result, sentences = scored_result(run, pairs, done.hypotheses_ids, tokenize=tokenize, decoding=decode,
                                      seconds=done.seconds, device="cpu", sentences=bool(args.output))
    return report({**result, **described(args, checkpoint, data), **done.settings}, sentences, args.output)
