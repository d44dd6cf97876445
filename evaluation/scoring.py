"""``evaluate.py CKPT`` on a split or ``--tsv`` file: the scores, with the head analyses asked for
(``--head-importance``, ``--prune-heads``, ``--alignment``), and ``--alignment-methods``. Each function reads
evaluate.py's parsed options (``args``) and returns what is printed last as JSON.
"""

import sys
import time
from pathlib import Path

from tqdm import tqdm

from data.batching import check_fits
from data.corpora import read_tsv
from data.gold import GoldSet
from data.pairs import Pair
from evaluation.alignment import check_alignable, cross_attention_alignment, one_token_per_word
from evaluation.explanation_report import DEFAULT_SENTENCES, AlignmentMethodsReport, run_alignment_methods
from evaluation.gold_report import run_gold_alignment
from evaluation.head_masks import all_heads, head_mask
from evaluation.importance import importance_paths, measure_head_importance, write_importance
from evaluation.inputs import analysis_directory, check_new
from evaluation.pruning import prune_count, pruned_loss
from evaluation.result import bleu_tokenize, scored_result
from evaluation.translate import translate
from training.checkpoints import LoadedRun


def read_pairs(args, run: LoadedRun) -> list[Pair]:
    """The pairs to score, read as the run reads its data: the --tsv file's, or the run's --split."""
    return run.datamodule.read_pairs(read_tsv(args.tsv)) if args.tsv else run.datamodule.pairs(args.split)


def analysing_heads(args) -> bool:
    """Whether a head analysis was asked for: they read each reference teacher-forced."""
    return args.head_importance or args.prune_heads is not None or args.alignment


def check_lengths(args, run: LoadedRun, pairs: list[Pair], *, targets: bool) -> None:
    """Stop at the first pair the model cannot read, naming its file and line. Its reference counts only with
    ``targets`` (the head analyses read it teacher-forced); scoring compares references as text."""
    dm, max_len = run.datamodule, run.module.model.config.max_len
    if not args.tsv:
        dm.check_fits(max_len, (args.split,), targets=targets)
        return
    sources = dm.src_tokenizer.encode_batch([p.source for p in pairs])
    references = dm.tgt_tokenizer.encode_batch([p.target for p in pairs]) if targets else [[] for _ in pairs]
    check_fits(list(zip(range(len(pairs)), sources, references)), max_len, lambda i, side: (args.tsv, i + 1))


def analyse_heads(args, run: LoadedRun, pairs: list[Pair], draw=None) -> tuple[dict, list]:
    """--head-importance and --prune-heads: the importance of every head, and the heads to prune.

    Returns the keys they add to the result, and the heads to silence during the evaluation.
    ``draw(importance, paths)`` draws the importance figures beside its JSON (the caller's: evaluation/ draws
    nothing).
    """
    dm, model = run.datamodule, run.module.model
    total = len(all_heads(model.config))
    count = 0 if args.prune_heads is None else prune_count(args.prune_heads, total)  # checked before all else
    paths = None
    if args.head_importance:
        name = Path(args.tsv).stem if args.tsv else args.split
        paths = importance_paths(analysis_directory(args), name)
        for path in paths.values():
            check_new(path, args.overwrite)
    decode = min(args.importance_sentences, len(pairs)) if args.head_importance else 0
    bar = tqdm(total=len(pairs) + decode, desc="ablating heads", unit="sent", disable=args.quiet,
               file=sys.stderr)
    start = time.perf_counter()
    importance = measure_head_importance(
        model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, decode_sentences=decode,
        batch_size=args.batch_size, max_rows=args.ablation_batch, max_len=args.max_len, progress=bar.update,
        bleu_tokenize=bleu_tokenize(args, run, pairs),
    )
    bar.close()
    added: dict = {}
    if paths is not None:
        about = {"checkpoint": args.checkpoint, "data": args.tsv or args.split,
                 "global_step": run.global_step, "seconds": time.perf_counter() - start}
        write_importance(importance, paths, about=about)
        if draw is not None:
            draw(importance, paths)
        print(importance.table())
        print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
        added["head_importance"] = str(paths["json"])
    pruned = []
    if args.prune_heads is not None:
        pruned = importance.ranking()[:count]
        added |= {"pruned_heads": [h.as_dict() for h in pruned], "num_heads": total,
                  "unpruned_nll_per_token": importance.baseline_loss}
    return added, pruned


def score(args, run: LoadedRun, device, draw_importance=None) -> tuple[dict, list[dict]]:
    """The scores (with the head analyses asked for) and, for --output, each sentence's; ``draw_importance``
    as ``analyse_heads``'s ``draw``."""
    dm, model = run.datamodule, run.module.model
    pairs = read_pairs(args, run)
    check_lengths(args, run, pairs, targets=analysing_heads(args))
    bleu_tokenize(args, run, pairs)  # its packages, before any long computation
    if args.alignment:  # before any long computation
        check_alignable(pairs, dm.src_tokenizer, dm.tgt_tokenizer)
    added, pruned = {}, []
    if args.head_importance or args.prune_heads is not None:
        added, pruned = analyse_heads(args, run, pairs, draw_importance)
    mask = head_mask(model.config, pruned, device=device) if pruned else None
    if args.prune_heads is not None:
        added["nll_per_token"] = pruned_loss(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, pruned, batch_size=args.batch_size
        )
    bar = tqdm(total=len(pairs), desc="translating", unit="sent", disable=args.quiet, file=sys.stderr)
    start = time.perf_counter()
    hypotheses_ids = translate(
        model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs], beam_size=args.beam_size,
        length_penalty=args.length_penalty, batch_size=args.batch_size, max_len=args.max_len,
        head_mask=mask, progress=bar.update,
    )
    elapsed = time.perf_counter() - start
    bar.close()
    result, sentences = scored_result(args, run, pairs, hypotheses_ids, seconds=elapsed, device=str(device))
    if args.alignment:
        report = cross_attention_alignment(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, batch_size=args.batch_size, silenced=pruned
        )
        added["alignment"] = report.as_dict()
    return {**result, **added, "engine": "pytorch"}, sentences


def score_alignment_methods(args, run: LoadedRun) -> AlignmentMethodsReport:
    """--alignment-methods: every explanation method scored against the gold alignments of the data, or of
    --gold-alignments on its words; the report's figures are the caller's to draw
    (``viz.reports.draw_alignment_methods``)."""
    if args.gold_alignments is not None:
        return run_gold_alignment(args, run, analysis_directory(args), check_new)
    pairs = read_pairs(args, run)
    check_lengths(args, run, pairs, targets=True)
    dm = run.datamodule
    if pairs and all(p.alignment is not None for p in pairs) and not one_token_per_word(
        pairs, dm.src_tokenizer, dm.tgt_tokenizer
    ):  # gold links of words written without spaces (the Han-script toy): scored on words, as gold sets are
        data = (GoldSet(list(pairs[: args.alignment_sentences or DEFAULT_SENTENCES])), args.split)
        return run_gold_alignment(args, run, analysis_directory(args), check_new, data=data)
    return run_alignment_methods(args, run, pairs, analysis_directory(args), check_new)

