"""Text read as the run reads its data: a sentence typed in the tab or given to evaluate.py, and every text a
run scores, goes through the data's script conversion (``--data.chinese_script``, OpenCC) before the
tokenizer normalises it, by one function (``TranslationDataModule.read_text``); the pieces the run still
cannot read are reported by evaluate.py and returned by the tab's route."""

from urllib.parse import quote

import pytest

pytest.importorskip("opencc")

from data.datamodule import TranslationDataModule
from data.gold import GoldFiles
from tests.conftest import CHINESE_PAIRS, chinese_tsv_corpus, last_json, run_evaluate, train_chinese
from tests.helpers.tab_client import get, serve
from training.checkpoints import load_run


@pytest.fixture(scope="module")
def traditional_data(tmp_path_factory):
    """English → Chinese, the Chinese side written in Traditional characters."""
    folder = chinese_tsv_corpus(tmp_path_factory.mktemp("traditional"))
    return TranslationDataModule(dataset="tsv", path=str(folder), vocab_size=120,
                                 chinese_script="traditional")


def test_one_function_reads_the_splits_and_typed_text_into_the_runs_script(traditional_data, tmp_path):
    """Typed Simplified text of the Chinese side is converted as the splits were; the English side is not
    Chinese, and stays as typed."""
    data = traditional_data
    assert data.read_text("让他进来。", "target") == "讓他進來。"
    assert data.read_text("让他进来。", "source") == "让他进来。"
    targets = [p.target for p in data.pairs("val")]
    assert targets == [data.read_text(zh, "target") for _, zh in CHINESE_PAIRS[:6]]
    assert targets[0] == "我喜歡貓。"
    assert TranslationDataModule(dataset="tsv", path=str(tmp_path)).read_text("我們", "target") == "我們"


def test_without_chinese_sides_a_checkpoint_has_them_read_off_its_vocabularies(traditional_data, tmp_path):
    """A checkpoint saved before the sides were kept: its vocabularies were learnt from the converted text."""
    state = traditional_data.state_dict()
    assert state["chinese_sides"] == ["target"]
    loaded = TranslationDataModule(dataset="tsv", path=str(tmp_path / "gone"), chinese_script="traditional")
    loaded.load_state_dict({name: state[name] for name in ("src_tokenizer", "tgt_tokenizer")})
    assert loaded.chinese_sides == ("target",) and loaded.read_text("让他进来。", "target") == "讓他進來。"
    with pytest.raises(ValueError, match="chinese_sides must be a list of source and target, got 'target'"):
        loaded.load_state_dict(state | {"chinese_sides": "target"})


def test_a_gold_set_is_read_as_the_data(tmp_path):
    sentences, links = tmp_path / "en-zh.src-tgt", tmp_path / "en-zh.gold"
    sentences.write_text("We drink tea . ||| 我们 喝 茶 。\n", encoding="utf-8")
    links.write_text("1-1 2-2 3-3 4-4\n", encoding="utf-8")
    corpus = chinese_tsv_corpus(tmp_path / "data")
    data = TranslationDataModule(dataset="tsv", path=str(corpus), vocab_size=120,
                                 chinese_script="traditional", gold=GoldFiles(str(sentences), str(links)),
                                 source_lang="en", target_lang="zh")
    (pair,) = data.gold_set().pairs
    # Converted to the run's script, then read as the corpus writes the same sentence (its words kept).
    assert pair.target == "我們喝茶。" and pair.words("target") == ("我們", "喝", "茶", "。")
    assert pair.source == "We drink tea." and pair.words("source") == ("We", "drink", "tea", ".")


@pytest.fixture(scope="module")
def simplified_run(tmp_path_factory):
    """A Chinese → English run of one epoch, trained with chinese_script simplified (its Chinese is
    Simplified already); 龙 is in none of its sentences."""
    folder = tmp_path_factory.mktemp("simplified")
    return train_chinese(folder, "--data.chinese_script", "simplified", "--attention.every_n_epochs", "1",
                         chinese_source=True)


def test_evaluate_reads_typed_traditional_text_and_reports_unknown_pieces(simplified_run, capsys):
    checkpoint = simplified_run / "checkpoints" / "last.ckpt"
    code, typed, err = run_evaluate(capsys, "translate", checkpoint, "我們喝茶。")
    assert code == 0 and "unknown" not in err, err
    code, converted, _ = run_evaluate(capsys, "translate", checkpoint, "我们喝茶。")
    assert code == 0 and typed == converted
    code, _, err = run_evaluate(capsys, "translate", checkpoint, "我們喝龍茶。")
    assert code == 0 and "1 source piece unknown to this run: 龙" in err.splitlines()


def test_scored_pairs_are_read_as_the_data(simplified_run, tmp_path, capsys):
    pairs, output = tmp_path / "traditional.tsv", tmp_path / "sentences.jsonl"
    pairs.write_text("我們喝茶。\tWe drink tea.\n他們看書。\tThey read books.\n", encoding="utf-8")
    code, _, err = run_evaluate(capsys, simplified_run, "--tsv", pairs, "--output", output, "--quiet")
    assert code == 0, err
    assert '"source": "我们喝茶。"' in output.read_text(encoding="utf-8")
    assert '"source": "他们看书。"' in output.read_text(encoding="utf-8")


def test_a_gold_set_evaluate_scores_is_read_as_the_data(simplified_run, tmp_path, capsys):
    sentences, links = tmp_path / "zh-en.src-tgt", tmp_path / "zh-en.gold"
    sentences.write_text("我們 喝 茶 。 ||| We drink tea .\n他們 看 書 。 ||| They read books .\n",
                         encoding="utf-8")
    links.write_text("1-1 2-2 3-3 4-4\n1-1 2-2 3-3 4-4\n", encoding="utf-8")
    code, out, err = run_evaluate(capsys, "explain", simplified_run, "--gold-alignments", links,
                                  "--gold-sentences", sentences, "--methods", "attention",
                                  "--analysis-out", tmp_path / "a")
    assert code == 0, err
    assert last_json(out)["read"]["source"]["unknown"] == 0  # 們 and 書 read as 们 and 书


def test_a_loaded_run_converts_without_its_data(simplified_run, tmp_path):
    """Which sides are converted is decided from the training text once and kept in the checkpoint: a run
    whose data is gone reads typed text as it read its data."""
    run = load_run(simplified_run / "checkpoints" / "last.ckpt", data_path=str(tmp_path / "gone"))
    assert run.datamodule.read_text("我們喝龍茶。") == "我们喝龙茶。"
    assert run.datamodule.unknown_spans("我们喝龙茶。") == [(3, 4)]


def test_the_tab_translates_typed_text_as_read_and_marks_unknown_pieces(simplified_run):
    client, _ = serve(simplified_run.parent)
    run = simplified_run.name
    answer = get(client, f"/translate?run={run}&text={quote('我們喝茶。')}&kind=cross&layer=0&head=0")
    assert answer["text"] == "我們喝茶。" and answer["read"] == "我们喝茶。" and answer["unknown"] == []
    assert "<unk>" not in answer["cols"]
    answer = get(client, f"/translate?run={run}&text={quote('我們喝龍茶。')}&kind=cross&layer=0&head=0")
    assert answer["read"] == "我们喝龙茶。" and answer["unknown"] == [[3, 4]]
    assert answer["cols"].count("<unk>") == 1
