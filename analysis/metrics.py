"""Translation quality on detokenized text: corpus sacreBLEU, chrF and exact match."""

from dataclasses import asdict, dataclass

import sacrebleu


@dataclass(frozen=True)
class TranslationScores:
    bleu: float  # corpus BLEU, 0..100 (sacreBLEU, 13a tokenization)
    chrf: float  # corpus chrF, 0..100
    exact_match: float  # share of hypotheses equal to their reference after whitespace normalisation, 0..1
    num_sentences: int
    signature: str  # sacreBLEU's BLEU signature, so the figure can be reproduced

    def as_dict(self) -> dict:
        return asdict(self)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def score_translations(hypotheses: list[str], references: list[str]) -> TranslationScores:
    """Corpus-level scores of detokenized hypotheses against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    exact = sum(_normalise(h) == _normalise(r) for h, r in zip(hypotheses, references)) / len(hypotheses)
    return TranslationScores(
        bleu=bleu_score.score,
        chrf=chrf_score.score,
        exact_match=exact,
        num_sentences=len(hypotheses),
        signature=str(bleu.get_signature()),
    )


def sentence_chrf(hypothesis: str, reference: str) -> float:
    return sacrebleu.sentence_chrf(hypothesis, [reference]).score


def sentence_scores(sources: list[str], references: list[str], hypotheses: list[str]) -> list[dict]:
    """Per sentence: its source, reference, hypothesis and sentence-level chrF."""
    return [
        {"source": source, "reference": reference, "hypothesis": hypothesis,
         "chrf": sentence_chrf(hypothesis, reference)}
        for source, reference, hypothesis in zip(sources, references, hypotheses, strict=True)
    ]
