"""Two directions' models as one aligner: the soft word maps of a ja→en and an en→ja model's head averaged
(the second transposed), then links extracted from the average, the extraction and its threshold chosen on
the first gold pairs and reported on the others.

    python bench/kftt_joined.py JA_EN.ckpt EN_JA.ckpt                  # each run's supervised head, Shift-Att
    python bench/kftt_joined.py JA_EN.ckpt EN_JA.ckpt --method attention --head 2 1

Joining the hard links of two directions (grow-diag-final-and of each model's arg-max, as eflomal's two
directions are joined) keeps only what each direction's arg-max found; averaging the maps first lets a link
that both directions give a good share win over one that a single direction prefers by a hair, as
bidirectional agreement does in neural aligners (Liang et al. 2006's agreement, awesome-align's softmax of
both directions). Each model reads the gold as ``evaluate.py explain --gold-alignments`` has it read: each
side as its corpus writes the sentence, tokens mapped to gold words by characters; a word's map row is the
mean of its tokens' rows, its column the sum of its tokens' columns (``evaluation.gold_alignment``). Which
head is read is fixed beforehand (by default the head each run was trained to align, from its
hyperparameters), so only the extraction and threshold are chosen, on pairs 1–``--choose``.
"""

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/kftt_joined.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import Tensor

from analysis.aer import score_links
from analysis.explain.registry import METHODS, explain
from analysis.word_alignment import EXTRACTIONS, extract
from data.gold import GoldSet
from evaluation.forced import forced_pass
from evaluation.gold_alignment import BatchWords, gold_items, word_explanation
from evaluation.gold_report import read_gold_files
from evaluation.loading import load
from evaluation.translate import length_sorted_batches

REPO = Path(__file__).resolve().parent.parent
GOLD = REPO.parent / "shared" / "corpora" / "kftt-ja-en" / "gold"
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)  # the thresholded extractions' shares, chosen among


def supervised_head(run) -> tuple[int, int]:
    """The (layer, head) a run's guided alignment trained, counted from 0; the error names the option."""
    hparams = run.module.hparams
    layer, head = hparams.get("alignment_layer"), hparams.get("alignment_head")
    if layer is None or head is None:
        raise SystemExit("error: the run has no supervised head: name one with --head LAYER HEAD")
    return layer - 1, head - 1


def word_maps(checkpoint: Path, links: Path, sentences: Path, method: str,
              head: tuple[int, int] | None) -> tuple[list[Tensor], list, bool]:
    """Each gold pair's (target words × source words) map of one head of the run's ``method``, in the
    model's direction; the pairs as the model reads them; and whether that direction is the gold file's
    reversed."""
    run, _ = load(str(checkpoint), device=torch.device("cpu"))
    layer, index = supervised_head(run) if head is None else (head[0] - 1, head[1] - 1)
    dm, model = run.datamodule, run.module.model.eval()
    source = read_gold_files(dm, str(links), [str(sentences)])
    items = gold_items(GoldSet(source.gold.pairs), dm.src_tokenizer, dm.tgt_tokenizer, model.config.max_len,
                       source.sentences)
    maps: list[Tensor | None] = [None] * len(items)
    ids = [item.source.ids for item in items], [item.target.ids for item in items]
    with torch.inference_mode(not METHODS[method].gradients):
        for batch in length_sorted_batches(*ids, 32):
            words = BatchWords.of(items, batch)
            seen = forced_pass(model, batch, full_context=run.module.full_context_layer)  # as it trained
            e = word_explanation(explain(method, seen.trace), words)
            for row, i in enumerate(batch.index.tolist()):
                rows, columns = items[i].target.count, items[i].source.count
                maps[i] = e.per_head[row, layer, index, :rows, :columns].float().clone()
    return maps, items, source.swapped


def links_of(maps: list[Tensor], extraction: str, threshold: float) -> list[set[tuple[int, int]]]:
    """Each map's links under ``extraction``, as 0-based (source word, target word)."""
    found = []
    for m in maps:
        rows, columns = m.shape
        valid = torch.ones(1, columns, dtype=torch.bool), torch.ones(1, rows, dtype=torch.bool)
        linked = extract(m[None, None], *valid, [extraction], threshold=threshold)[extraction][0, 0]
        found.append({(s, t) for t, s in linked.nonzero().tolist()})
    return found


def choose_and_report(maps: list[Tensor], sure: list, possible: list, choose: int) -> dict:
    """The extraction (and threshold) of lowest AER on the first ``choose`` pairs, and its figures on the
    rest; every candidate's figures beside."""
    candidates = {}
    for extraction in EXTRACTIONS:
        shares = THRESHOLDS if extraction.startswith("threshold") else (None,)
        for share in shares:
            links = links_of(maps, extraction, share or 0.1)
            chosen = score_links(links[:choose], sure[:choose], possible[:choose])
            reported = score_links(links[choose:], sure[choose:], possible[choose:])
            name = extraction if share is None else f"{extraction} {share}"
            candidates[name] = {"chosen_aer": chosen.aer, **vars(reported)}
    best = min(candidates, key=lambda name: candidates[name]["chosen_aer"])
    return {"chosen": best, **candidates[best], "candidates": candidates}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("forward", type=Path, help="the ja→en run's checkpoint")
    p.add_argument("reverse", type=Path, help="the en→ja run's checkpoint")
    p.add_argument("--links", type=Path, default=GOLD / "ja-en.gold")
    p.add_argument("--sentences", type=Path, default=GOLD / "ja-en.src-tgt")
    p.add_argument("--method", choices=list(METHODS), default="shift_att")
    p.add_argument("--head", type=int, nargs=2, metavar=("LAYER", "HEAD"),
                   help="the head to read in both runs, counted from 1 (default: each run's supervised head)")
    p.add_argument("--choose", type=int, default=100, help="pairs 1–N choose the extraction (default 100)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    forward, items, swapped = word_maps(args.forward, args.links, args.sentences, args.method, args.head)
    reverse, reverse_items, reverse_swapped = word_maps(args.reverse, args.links, args.sentences, args.method,
                                                        args.head)
    if swapped or not reverse_swapped or len(items) != len(reverse_items):
        raise SystemExit("error: give the ja→en run first and the en→ja run second, of the same gold set")
    joined = [(f + r.T) / 2 for f, r in zip(forward, reverse, strict=True)]  # (ja→en rows: English words)
    sure, possible = [item.sure for item in items], [item.possible for item in items]
    results = {name: choose_and_report(maps, sure, possible, args.choose)
               for name, maps in (("ja→en", forward), ("en→ja", [r.T.contiguous() for r in reverse]),
                                  ("averaged", joined))}
    print(f"{args.method}, the runs' {'supervised head' if args.head is None else 'head ' + str(args.head)}; "
          f"extraction chosen on pairs 1–{args.choose}, reported on {args.choose + 1}–{len(items)}")
    for name, r in results.items():
        print(f"{name:9s} {r['chosen']:34s} precision {r['precision']:.1%} recall {r['recall']:.1%} "
              f"AER {100 * r['aer']:.1f} (where chosen {100 * r['chosen_aer']:.1f})")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
