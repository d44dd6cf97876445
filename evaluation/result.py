"""evaluate.py's result: the scores of a split or --tsv file and how they were obtained, as one JSON object,
and its printed form.

evaluate.py builds it here for both engines (PyTorch's translations, and CTranslate2's from
export/engine.py), so that their scores are computed alike (same sacreBLEU, chrF and exact match on the same
detokenized text) and their JSON has the same keys; each engine adds its own after these.
"""

import json
import os
from pathlib import Path

from analysis.metrics import bleu_metric, score_translations, sentence_scores
from data.pairs import Pair
from evaluation.inputs import InputError
from evaluation.translate import Decoding
from training.checkpoints import LoadedRun
from training.module import validation_bleu_tokenizer


def bleu_tokenize(run: LoadedRun, pairs: list[Pair], chosen: str | None = None) -> str:
    """The sacreBLEU tokenizer of the BLEU of ``pairs``: ``chosen`` (--bleu-tokenize), else the one prescribed
    for the run's target language or, where that is 13a, for the language their references' script tells, as
    its validation BLEU was tokenized (``zh`` for Chinese). A tokenizer whose packages are missing is refused
    here, in one line, before anything is translated."""
    references = [p.target for p in pairs]
    tokenize = chosen or validation_bleu_tokenizer(run.datamodule, references)
    try:
        bleu_metric(tokenize)
    except ValueError as error:
        raise InputError(f"--bleu-tokenize: {error}" if chosen else str(error)) from None
    return tokenize


def scored_result(
    run: LoadedRun,
    pairs: list[Pair],
    hypotheses_ids: list[list[int]],
    *,
    tokenize: str,
    decoding: Decoding,
    seconds: float,
    device: str,
    sentences: bool = False,
) -> tuple[dict, list[dict]]:
    """Score the translations of ``pairs`` against their references; return the scores with the decoding
    settings and the speed, and, with ``sentences`` (for --output), the scores of each sentence (else none).
    evaluate.py prints the first before it writes the second (``write_sentences``).

    Args:
        hypotheses_ids: per pair, the target token ids of its translation (EOS and padding removed).
        tokenize: sacreBLEU's tokenizer of the BLEU (``bleu_tokenize``).
        decoding: how they were translated, as recorded.
        seconds: how long translating took, for sentences per second.
        device: where it ran, as reported.
    """
    tokenizer = run.datamodule.tgt_tokenizer
    hypotheses = [tokenizer.decode(ids) for ids in hypotheses_ids]
    references = [p.target for p in pairs]
    scores = score_translations(hypotheses, references, tokenize=tokenize)
    each = sentence_scores([p.source for p in pairs], references, hypotheses) if sentences else []
    result = {
        **scores.as_dict(),
        "beam_size": decoding.beam_size,
        "length_penalty": decoding.length_penalty,
        "sentences_per_second": len(pairs) / max(seconds, 1e-9),
        "global_step": run.global_step,
        "device": device,
    }
    return result, each


def write_sentences(path: Path, sentences: list[dict]) -> None:
    """--output: one JSON line per sentence, written whole or not at all. The lines go to a temporary file
    beside ``path`` that is then renamed over it, so a full disk or a kill leaves the file that was there (or
    none), never part of one. ``path``'s folder was checked before decoding and is made now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # same folder: the rename cannot copy
    try:
        with open(temporary, "x", encoding="utf-8") as file:
            file.writelines(json.dumps(sentence, ensure_ascii=False) + "\n" for sentence in sentences)
            file.flush()
            os.fsync(file.fileno())  # on disk before the rename makes it the file
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # left only by a failed write


def summary(result: dict) -> str:
    """The result in a few lines for people, with the head analyses' figures when it holds them."""
    exact = 100 * result["exact_match"]
    lines = [
        f"{result['data']}: {result['num_sentences']} sentences, beam {result['beam_size']}",
        f"  BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  exact match {exact:.2f}%",
        f"  {result['sentences_per_second']:.1f} sentences/s on {result['device']}",
        f"  sacreBLEU {result['signature']}",
    ]
    if "pruned_heads" in result:
        pruned = result["pruned_heads"]
        names = ", ".join(f"{h['kind']} {h['layer']}.{h['head']}" for h in pruned) or "none"
        lines.append(
            f"  pruned {len(pruned)} of {result['num_heads']} heads (kind layer.head): {names}\n"
            f"  NLL per target token {result['nll_per_token']:.4f} "
            f"(unpruned {result['unpruned_nll_per_token']:.4f})"
        )
    if "alignment" in result:
        best, average = result["alignment"]["best_head"], result["alignment"]["head_average"]
        lines.append(
            f"  alignment: best cross-attention head (layer {best['layer']}, head {best['head']}) "
            f"AER {best['aer']:.3f}, agreement {100 * best['agreement']:.1f}%; "
            f"head average AER {average['aer']:.3f}, agreement {100 * average['agreement']:.1f}%"
        )
    return "\n".join(lines)
