"""A gold probe's words, as the logger writes them beside its tokens (``gold_words`` in the probe's text, see
``viz.tab.metadata``) and as the tab reads them back to score one map on words, the way the corpus scores
of a gold set are computed (``evaluation.gold_alignment``).

The record (checked when read, by ``viz.tab.events.sentence_text``): ``source_words``, the word of each
source token, and ``target_words``, of each target row (EOS last in both), -1 for a token of no word;
``source_count`` and ``target_count``, the words of each side; ``sure`` and ``possible`` (possible-only)
links as [target word, source word]; ``source_readers`` and ``target_readers``, the word each word is read
through (``data.words.word_readers``; a run logged before them reads every word as itself).
"""

import torch

from analysis.explain.scores import AlignmentScores
from analysis.explain.trace import Explanation
from analysis.heads import gold_matrix
from analysis.word_alignment import THRESHOLD
from evaluation.gold_alignment import BatchWords, GoldItem, count_words, word_explanation, word_scores


def gold_words_record(gold: GoldItem) -> dict:
    """The record of a gold pair read word by word, for a probe whose rows are its target tokens and EOS."""
    return {
        "source_words": [*gold.source.words, -1], "target_words": [*gold.target.words, -1],
        "source_count": gold.source.count, "target_count": gold.target.count,
        "sure": sorted([t, s] for s, t in gold.sure), "possible": sorted([t, s] for s, t in gold.possible),
        "source_readers": gold.source.readers, "target_readers": gold.target.readers,
    }


def word_aer(explanation: Explanation, record: dict) -> AlignmentScores:
    """One sentence's map (B = 1, over tokens) scored on its words: the forward arg-max's AER and agreement
    per layer and head, as ``evaluation.gold_alignment`` scores a corpus."""
    Sw, Tw = record["source_count"], record["target_count"]
    words = BatchWords(
        torch.tensor([record["source_words"]], dtype=torch.int64),
        torch.tensor([record["target_words"]], dtype=torch.int64),
        gold_matrix([{(s, t) for t, s in record["sure"]}], Tw, Sw),
        gold_matrix([{(s, t) for t, s in record["possible"]}], Tw, Sw),
        torch.tensor([record.get("source_readers", range(Sw))], dtype=torch.int64),
        torch.tensor([record.get("target_readers", range(Tw))], dtype=torch.int64),
    )
    counts = count_words(word_explanation(explanation, words), words, ["argmax"], THRESHOLD)
    return word_scores(counts, explanation.layers).alignment_scores()
