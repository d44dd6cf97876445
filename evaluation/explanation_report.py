"""``evaluate.py CKPT --alignment-methods``: every explanation method scored against the gold alignments of a
split, as one JSON table (method × layer: AER and agreement), with pictures.

Files written to the analysis folder (``--analysis-out``, default ``<run>/analysis/<checkpoint>``):
    alignment_methods_<data>.json        the table, per-head scores, the options and timings
    alignment_methods_<data>_aer.png     methods × layers AER (and ``_agreement.png``)
    alignment_methods_<data>_heads_<method>.png   layers × heads AER of each method that has heads
    alignment_methods_<data>_sentence<k>.png      sentence k under every method, gold links circled
    alignment_methods_<data>_sentence<k>_lens.png the logit lens of sentence k (and ``_lens.json``)
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from analysis.explain.registry import METHODS, check_methods

PICTURED_SENTENCES = 3


def method_options(args) -> dict[str, dict]:
    return {"integrated_gradients": {"steps": args.ig_steps}}


def flat_table(scores: dict[str, dict]) -> list[dict]:
    """method -> scores (``evaluation.explanations.explanation_alignment``) as rows {method, layer, aer,
    agreement}."""
    return [
        {"method": name, "layer": row["layer"], "aer": row["aer"], "agreement": row["agreement"]}
        for name, method in scores.items() for row in method["layers"]
    ]


def print_table(rows: list[dict]) -> None:
    print(f"{'method':22s} {'layer':12s} {'AER':>6s} {'agreement':>10s}")
    for row in rows:
        print(f"{row['method']:22s} {row['layer']:12s} {row['aer']:6.3f} {row['agreement']:10.3f}")


def write_figures(scores: dict[str, dict], stem: Path) -> list[Path]:
    """The methods × layers AER and agreement figures and the per-head AER figures."""
    from viz.explain_figures import scores_figure
    from viz.plots import layer_head_matrix

    methods = list(scores)
    layers = sorted({row["layer"] for m in scores.values() for row in m["layers"]}, key=_layer_order)
    written = []
    for score in ("aer", "agreement"):
        values = np.full((len(methods), len(layers)), np.nan)
        for i, name in enumerate(methods):
            for row in scores[name]["layers"]:
                values[i, layers.index(row["layer"])] = row[score]
        title = f"{'AER' if score == 'aer' else 'agreement'} by method and layer"
        figure = scores_figure(values, methods, layers, title)
        written.append(_save(figure, stem.with_name(f"{stem.name}_{score}.png")))
    for name, method in scores.items():
        if method["heads"] is not None:
            figure = layer_head_matrix(method["heads"]["aer"], f"{name}: AER per head", vmin=0.0, vmax=1.0,
                                       cmap="viridis_r")
            written.append(_save(figure, stem.with_name(f"{stem.name}_heads_{name}.png")))
    return written


def _layer_order(label: str) -> tuple[int, str]:
    """"embeddings" first, then layers by number."""
    number = label.rsplit(" ", 1)[-1]
    return (int(number) if number.isdigit() else 0, label)


def _save(figure, path: Path) -> Path:
    figure.savefig(path)
    return path


def write_sentence(model, dm, pair, methods, options, stem: Path, number: int) -> list[Path]:
    """Sentence ``number``'s methods figure, logit-lens figure and logit-lens JSON."""
    from evaluation.explanations import sentence_explanations
    from viz.explain_figures import logit_lens_figure, methods_figure

    src_ids, tgt_ids = dm.src_tokenizer.encode(pair.source), dm.tgt_tokenizer.encode(pair.target)
    explanations, lens = sentence_explanations(model, src_ids, tgt_ids, methods=methods, options=options)
    c = model.config
    source = dm.src_tokenizer.tokens(src_ids + [c.eos_id])
    target = dm.tgt_tokenizer.tokens(tgt_ids + [c.eos_id])
    labels = {name: name for name in methods}
    figure = methods_figure(explanations, labels, source, target, gold=set(pair.alignment or ()),
                            title=pair.source)
    paths = [_save(figure, stem.with_name(f"{stem.name}_sentence{number}.png"))]
    L = lens.produced_prob.size(1)
    layer_labels = [f"layer {i + 1}" for i in range(L)]
    top = [[dm.tgt_tokenizer.tokens(lens.top_ids[0, layer, t].tolist()) for t in range(len(target))]
           for layer in range(L)]  # (L, T, k) token strings
    figure = logit_lens_figure(lens.produced_prob[0].numpy(), [[row[0] for row in layer] for layer in top],
                               target, layer_labels, f"logit lens: {pair.target}")
    paths.append(_save(figure, stem.with_name(f"{stem.name}_sentence{number}_lens.png")))
    about = {"source": source, "target": target, "layers": [
        {"layer": label, "positions": [_lens_position(lens, top, target, i, t) for t in range(len(target))]}
        for i, label in enumerate(layer_labels)
    ]}
    path = stem.with_name(f"{stem.name}_sentence{number}_lens.json")
    path.write_text(json.dumps(about, ensure_ascii=False, indent=1), encoding="utf-8")
    return [*paths, path]


def _lens_position(lens, top, target, layer: int, t: int) -> dict:
    """What a layer reads at target position t: the produced token's probability and rank, and the top k."""
    probs = lens.top_probs[0, layer, t].tolist()
    return {
        "produced": target[t], "prob": float(lens.produced_prob[0, layer, t]),
        "rank": int(lens.produced_rank[0, layer, t]),
        "top": [{"token": token, "prob": p} for token, p in zip(top[layer][t], probs)],
    }


def run_alignment_methods(args, run, pairs, directory: Path, check_new) -> dict:
    """Score the methods on the first --alignment-sentences pairs, write the files, print the table; return
    the JSON object printed last."""
    from evaluation.alignment import check_alignable
    from evaluation.explanations import explanation_alignment

    dm, model = run.datamodule, run.module.model
    methods = check_methods(args.alignment_methods or list(METHODS))
    pairs = pairs[: args.alignment_sentences]
    check_alignable(pairs, dm.src_tokenizer, dm.tgt_tokenizer, "--alignment-methods")
    name = Path(args.tsv).stem if args.tsv else args.split
    stem = directory / f"alignment_methods_{name}"
    json_path = stem.with_name(f"{stem.name}.json")
    check_new(json_path, args.overwrite)
    directory.mkdir(parents=True, exist_ok=True)
    options = method_options(args)
    start = time.perf_counter()
    scores = explanation_alignment(
        model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, methods=methods, options=options,
        batch_size=min(args.batch_size, 32), option="--alignment-methods",
    )
    seconds = time.perf_counter() - start
    rows = flat_table(scores)
    written = write_figures(scores, stem)
    for number, pair in enumerate(pairs[:PICTURED_SENTENCES], start=1):
        written += write_sentence(model, dm, pair, methods, options, stem, number)
    result = {
        "checkpoint": args.checkpoint, "data": args.tsv or args.split, "global_step": run.global_step,
        "sentences": len(pairs), "options": options, "seconds": seconds,
        "table": rows,
        "best": {name: method["best"] for name, method in scores.items()},
        "heads": {name: method["heads"] for name, method in scores.items() if method["heads"] is not None},
        "method_seconds": {name: method["seconds"] for name, method in scores.items()},
    }
    json_path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print_table(rows)
    print(f"wrote {json_path} and {len(written)} other files to {directory}", file=sys.stderr)
    return result
