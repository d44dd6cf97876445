"""Two directions' models (or more) as one aligner: the soft word maps of ja→en and en→ja models' heads
averaged (the en→ja maps transposed), then links extracted from the average; the way to average (arithmetic
or geometric mean), the extraction and its threshold chosen on the first gold pairs, reported on the others.

    python bench/kftt_joined.py JA_EN.ckpt EN_JA.ckpt                  # each run's supervised head, Shift-Att
    python bench/kftt_joined.py JA_EN.ckpt EN_JA.ckpt --method attention --head 2 1
    python bench/kftt_joined.py A/JA_EN.ckpt A/EN_JA.ckpt B/JA_EN.ckpt B/EN_JA.ckpt   # four models

Joining the hard links of two directions (grow-diag-final-and of each model's arg-max, as eflomal's two
directions are joined) keeps only what each direction's arg-max found; averaging the maps first lets a link
that both directions give a good share win over one that a single direction prefers by a hair, as
bidirectional agreement does in neural aligners (Liang et al. 2006's agreement, awesome-align's softmax of
both directions). Each model reads the gold as ``evaluate.py explain --gold-alignments`` has it read: each
side as its corpus writes the sentence, tokens mapped to gold words by characters; a word's map row is the
mean of its tokens' rows, its column the sum of its tokens' columns (``evaluation.gold_alignment``). Which
head is read is fixed beforehand (by default the head each run was trained to align, from its
hyperparameters), so only the mean, the extraction and its threshold are chosen, on pairs 1–``--choose``
(grow-diag-final-and also with a floor: its links whose share in the averaged map falls below it dropped, as
a word the gold leaves unaligned still gets the arg-max of its row). A
gold word without a token of its own (one token spells it and the word before) takes the links of the word it
is read through, as every scorer of the project reads it.
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
from analysis.word_alignment import EXTRACTIONS, extract, read_through
from data.gold import GoldSet
from evaluation.forced import forced_pass
from evaluation.gold_alignment import BatchWords, gold_items, word_explanation
from evaluation.gold_report import read_gold_files
from evaluation.loading import load
from evaluation.translate import length_sorted_batches

REPO = Path(__file__).resolve().parent.parent
GOLD = REPO.parent / "shared" / "corpora" / "kftt-ja-en" / "gold"
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)  # the thresholded extractions' shares, chosen among
FLOORS = (0.05, 0.1, 0.15, 0.2, 0.3)  # grow-diag-final-and's links below this share dropped, chosen among
FLOORED = "argmax_grow_diag_final_and"


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


Readers = tuple[list[int], list[int]]  # per pair: each source word's reader, each target word's


def readers_of(runs_items: list[list], swapped: list[bool]) -> list[Readers]:
    """Per gold pair, the word each source and target word (in the gold's direction) is read through
    (``data.words.word_readers``): itself where any run gives it a token of its own, else the first run's
    reader for it."""
    found = []
    for pair in zip(*runs_items, strict=True):
        sides = []
        for side, other in (("source", "target"), ("target", "source")):
            # each run's reading of the gold's side: the model's other side where it reads the gold reversed
            read = [getattr(item, other if back else side) for item, back in zip(pair, swapped)]
            owned = set().union(*(set(r.words) for r in read))
            sides.append([w if w in owned else reader for w, reader in enumerate(read[0].readers)])
        found.append((sides[0], sides[1]))
    return found


def links_of(maps: list[Tensor], extraction: str, threshold: float, readers: list[Readers] | None = None,
             floor: float = 0.0) -> list[set[tuple[int, int]]]:
    """Each map's links under ``extraction``, as 0-based (source word, target word), less those whose share
    in the map is below ``floor``; with ``readers``, each word linked as the word it is read through
    (``analysis.word_alignment.read_through``)."""
    found = []
    for i, m in enumerate(maps):
        rows, columns = m.shape
        valid = torch.ones(1, columns, dtype=torch.bool), torch.ones(1, rows, dtype=torch.bool)
        linked = extract(m[None, None], *valid, [extraction], threshold=threshold)[extraction]
        if floor > 0:  # signed maps (gradient × input) keep their negative links without a floor
            linked = linked & (m >= floor)
        if readers is not None:
            src, tgt = readers[i]
            linked = read_through(linked, torch.tensor([src]), torch.tensor([tgt]))
        found.append({(s, t) for t, s in linked[0, 0].nonzero().tolist()})
    return found


def means(maps: list[list[Tensor]]) -> dict[str, list[Tensor]]:
    """Several models' maps of each pair as one: their arithmetic mean, and with two or more, their
    geometric mean (a link all of them give a share to over one that some give none)."""
    if len(maps) == 1:
        return {"": maps[0]}
    arithmetic = [torch.stack(pair).mean(0) for pair in zip(*maps, strict=True)]
    geometric = [torch.stack(pair).clamp(min=1e-12).log().mean(0).exp() for pair in zip(*maps, strict=True)]
    return {"mean ": arithmetic, "geometric mean ": geometric}


def settings(extraction: str) -> list[tuple[float | None, float]]:
    """The (threshold, floor) pairs an extraction is tried with: each threshold of a thresholded one, each
    floor (and none) of grow-diag-final-and's."""
    if extraction.startswith("threshold"):
        return [(share, 0.0) for share in THRESHOLDS]
    return [(None, floor) for floor in (0.0, *FLOORS)] if extraction == FLOORED else [(None, 0.0)]


def choose_and_report(maps: list[Tensor] | dict[str, list[Tensor]], sure: list, possible: list, choose: int,
                      readers: list[Readers] | None = None) -> dict:
    """The map (of ``maps``, where it names several ways to join them), extraction and threshold of lowest
    AER on the first ``choose`` pairs, and its figures on the rest; every candidate's figures beside."""
    candidates = {}
    for way, joined in (maps if isinstance(maps, dict) else {"": maps}).items():
        for extraction in EXTRACTIONS:
            for share, floor in settings(extraction):
                links = links_of(joined, extraction, share or 0.1, readers, floor)
                chosen = score_links(links[:choose], sure[:choose], possible[:choose])
                reported = score_links(links[choose:], sure[choose:], possible[choose:])
                name = way + extraction + (f" {share}" if share else "")
                name += f" floor {floor}" if floor else ""
                candidates[name] = {"chosen_aer": chosen.aer, **vars(reported)}
    best = min(candidates, key=lambda name: candidates[name]["chosen_aer"])
    return {"chosen": best, **candidates[best], "candidates": candidates}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+", metavar="CKPT",
                   help="checkpoints of ja→en and en→ja runs, in any order (each one's direction is read)")
    p.add_argument("--links", type=Path, default=GOLD / "ja-en.gold")
    p.add_argument("--sentences", type=Path, default=GOLD / "ja-en.src-tgt")
    p.add_argument("--method", choices=list(METHODS), default="shift_att")
    p.add_argument("--head", type=int, nargs=2, metavar=("LAYER", "HEAD"),
                   help="the head to read in every run, counted from 1 (default: each run's supervised head)")
    p.add_argument("--choose", type=int, default=100, help="pairs 1–N choose the extraction (default 100)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    read = [word_maps(run, args.links, args.sentences, args.method, args.head) for run in args.runs]
    if len({len(items) for _, items, _ in read}) != 1:
        raise SystemExit("error: the runs read different numbers of gold pairs")
    swapped = [back for _, _, back in read]
    # Every map in the gold's direction: rows its target words (English for ja-en), columns its source words.
    oriented = [[m.T.contiguous() for m in maps] if back else maps for maps, _, back in read]
    readers = readers_of([items for _, items, _ in read], swapped)
    items = read[0][1]
    sure, possible = [item.sure for item in items], [item.possible for item in items]
    groups = {"ja→en": [m for m, back in zip(oriented, swapped) if not back],
              "en→ja": [m for m, back in zip(oriented, swapped) if back]}
    if groups["ja→en"] and groups["en→ja"]:
        groups["averaged"] = oriented
    results = {name: choose_and_report(means(maps), sure, possible, args.choose, readers)
               for name, maps in groups.items() if maps}
    print(f"{args.method}, the runs' {'supervised head' if args.head is None else 'head ' + str(args.head)}; "
          f"{len(args.runs)} runs; the map and extraction chosen on pairs 1–{args.choose}, reported on "
          f"{args.choose + 1}–{len(items)}")
    for name, r in results.items():
        count = len(groups[name])
        print(f"{name:9s} {count} run{'s' if count > 1 else ' '} {r['chosen']:50s} "
              f"precision {r['precision']:.1%} recall {r['recall']:.1%} AER {100 * r['aer']:.1f} "
              f"(where chosen {100 * r['chosen_aer']:.1f})")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
