"""Chinese and Japanese as a learner tries them: Tatoeba's files as downloaded, which script a side is in,
a piece per Han or Kana character before subwords, full-width punctuation kept, Simplified/Traditional."""

import codecs
import gzip
import importlib.util
from pathlib import Path

import pytest
import torch

from data.corpora import CorpusError
from data.datamodule import TranslationDataModule
from data.scripts import TextHandling, is_chinese, script_shares, text_handling
from data.tatoeba import read_tatoeba
from data.tokenizer import Tokenizer
from tests.conftest import CORPORA

CMN = CORPORA / "tatoeba-cmn-eng" / "cmn.txt.gz"
ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #{} (CM) & #{} (someone)"

# Tatoeba-style pairs: English first, then Chinese with full-width punctuation; "Hi." has two translations.
PAIRS = [
    ("Hi.", "嗨。"), ("Hi.", "你好。"), ("Run.", "你用跑的。"), ("Wait!", "等等！"), ("I try.", "让我来。"),
    ("I won!", "我赢了。"), ("Help me.", "帮我一下。"), ("Come in.", "进来。"), ("Get out!", "滚出去！"),
    ("Is it far?", "远吗？"), ("Tom left.", "汤姆离开了。"), ("Be quiet.", "安静点。"),
    ("Tom, hi!", "汤姆，你好！"),
]


def tatoeba_file(path: Path, pairs=PAIRS, *, bom: bool = True, attribution: bool = True) -> Path:
    lines = [
        "\t".join([english, chinese, *([ATTRIBUTION.format(i, i + 1)] if attribution else [])])
        for i, (english, chinese) in enumerate(pairs)
    ]
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


# --- Reading -----------------------------------------------------------------------------------------------


def test_a_tatoeba_file_reads_as_downloaded_in_either_direction(tmp_path):
    path = tatoeba_file(tmp_path / "cmn.txt")
    english_first = read_tatoeba(path, english_source=True)
    chinese_first = read_tatoeba(path, english_source=False)
    assert [(p.source, p.target) for p in english_first] == PAIRS  # no BOM in the first sentence
    assert [(p.target, p.source) for p in chinese_first] == PAIRS
    assert not any("tatoeba.org" in p.source + p.target for p in english_first)  # attribution kept out


def test_two_column_files_and_gzipped_files_read_too(tmp_path):
    plain = tatoeba_file(tmp_path / "cmn.txt", attribution=False, bom=False)
    gzipped = tmp_path / "jpn.txt.gz"
    gzipped.write_bytes(gzip.compress(tatoeba_file(tmp_path / "x.txt").read_bytes()))
    assert read_tatoeba(plain, english_source=True) == read_tatoeba(gzipped, english_source=True)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("Hi.", "2 or 3 tab-separated columns (English, translation, attribution), this one 1"),
        ("Hi.\t嗨。\tCC-BY\textra", "this one 4"),
        ("Hi.\t \tCC-BY", "empty translation column"),
        ("\t嗨。\tCC-BY", "empty English column"),
    ],
)
def test_malformed_lines_are_one_line_errors_naming_file_and_line(tmp_path, line, reason):
    path = tmp_path / "cmn.txt"
    path.write_text("Run.\t跑。\tCC-BY\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CorpusError) as error:
        read_tatoeba(path, english_source=True)
    message = str(error.value)
    assert message.startswith(f"{path}:2: ") and reason in message and "\n" not in message


def test_the_zip_as_downloaded_is_refused_with_what_to_do(tmp_path):
    import zipfile

    archive = tmp_path / "cmn-eng.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(tatoeba_file(tmp_path / "cmn.txt"), "cmn.txt")
    with pytest.raises(CorpusError, match="is a zip archive, expected a text file: unzip it, give the file"):
        read_tatoeba(archive, english_source=True)


def tatoeba_data(path: Path, **overrides) -> TranslationDataModule:
    options = {"dataset": "tatoeba", "path": str(path), "source_lang": "zh", "target_lang": "en",
               "held_out_pairs": 2, "vocab_size": 120, "seed": 7} | overrides
    return TranslationDataModule(**options)


def test_tatoeba_holds_out_val_and_test_keeping_pairs_of_one_english_sentence_together(tmp_path):
    data = tatoeba_data(tatoeba_file(tmp_path / "cmn.txt"))
    splits = {split: data.pairs(split) for split in ("train", "val", "test")}
    assert sum(len(pairs) for pairs in splits.values()) == len(PAIRS)
    assert len(splits["val"]) >= 2 and len(splits["test"]) >= 2
    english = {split: {p.target for p in pairs} for split, pairs in splits.items()}
    assert not english["train"] & english["test"] and not english["train"] & english["val"]
    assert not english["val"] & english["test"]
    both_his = [split for split, pairs in splits.items() if any(p.target == "Hi." for p in pairs)]
    assert len(both_his) == 1  # "Hi." and its two translations stay in one split
    # Chinese source, English target, and each pair's line in the file for messages.
    for split, pairs in splits.items():
        for index, pair in enumerate(pairs):
            _, line = data.origin(split, index)
            assert PAIRS[line - 1] == (pair.target, pair.source)


def test_pairs_that_share_a_chinese_sentence_stay_in_one_split_too(tmp_path):
    # 我们走吧。 translates two English sentences, and "Let's leave." has a second translation: one group.
    linked = [("Let's go.", "我们走吧。"), ("Let's leave.", "我们走吧。"), ("Let's leave.", "我们离开吧。")]
    path = tatoeba_file(tmp_path / "cmn.txt", linked + PAIRS)
    for seed in range(8):
        data = tatoeba_data(path, held_out_pairs=1, seed=seed)
        homes = {split for split in ("train", "val", "test") for p in data.pairs(split)
                 if (p.target, p.source) in linked}
        assert len(homes) == 1, (seed, homes)
        chinese = {split: {p.source for p in data.pairs(split)} for split in ("train", "val", "test")}
        assert not chinese["train"] & (chinese["val"] | chinese["test"])


def test_the_hold_out_is_seeded_and_the_same_for_both_directions(tmp_path):
    path = tatoeba_file(tmp_path / "cmn.txt")
    zh_en, en_zh = tatoeba_data(path), tatoeba_data(path, source_lang="en", target_lang="zh")
    assert [(p.target, p.source) for p in zh_en.pairs("test")] == [
        (p.source, p.target) for p in en_zh.pairs("test")
    ]
    other_seed = tatoeba_data(path, seed=8)
    assert {p.target for p in other_seed.pairs("test")} != {p.target for p in zh_en.pairs("test")}


def test_tatoeba_languages_not_given_come_from_the_file_name_and_english(tmp_path):
    path = tatoeba_file(tmp_path / "cmn.txt")

    def languages(**given):
        data = tatoeba_data(path, **{"source_lang": None, "target_lang": None} | given)
        return data.source_lang, data.target_lang, data.hparams.source_lang, data.hparams.target_lang

    assert languages() == ("zh", "en", "zh", "en")  # as downloaded: into English
    assert languages(source_lang="en") == ("en", "zh", "en", "zh")
    assert languages(target_lang="en") == ("zh", "en", "zh", "en")
    assert languages(target_lang="zh") == ("en", "zh", "en", "zh")
    assert languages(source_lang="ja") == ("ja", "en", "ja", "en")
    english_source = tatoeba_data(path, source_lang="en", target_lang=None)
    assert {p.source for p in english_source.pairs("train")} <= {english for english, _ in PAIRS}
    renamed = tatoeba_file(tmp_path / "pairs.txt")
    with pytest.raises(ValueError, match=r"name the language of .*pairs.txt with source_lang or target_lang"):
        tatoeba_data(renamed, source_lang=None, target_lang=None)
    with pytest.raises(ValueError, match=r"name the language of .*pairs.txt with source_lang \("):
        tatoeba_data(renamed, source_lang=None, target_lang="en")
    yue = tatoeba_file(tmp_path / "yue.txt")  # no two-letter code: Tatoeba's own
    assert tatoeba_data(yue, source_lang=None, target_lang=None).source_lang == "yue"
    assert tatoeba_data(renamed, source_lang="zh", target_lang=None).target_lang == "en"


def test_a_run_on_a_tatoeba_file_records_the_languages_its_name_gave(tmp_path):
    """LightningCLI saves the options as typed (none); the checkpoint holds them resolved, so it loads and
    scores BLEU as Chinese → English even from a file renamed since."""
    from tests.conftest import train_tiny
    from training.checkpoints import load_run

    path = tatoeba_file(tmp_path / "cmn.txt", PAIRS * 4)
    run = train_tiny(tmp_path / "runs", "--data.dataset", "tatoeba", "--data.path", str(path),
                     "--data.held_out_pairs", "2", "--data.vocab_size", "120", "--trainer.max_epochs", "1",
                     "--attention.every_n_epochs", "0")  # fmt: skip
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    saved = checkpoint["datamodule_hyper_parameters"]
    assert (saved["source_lang"], saved["target_lang"]) == ("zh", "en")
    renamed = path.rename(tmp_path / "tatoeba-pairs.txt")
    loaded = load_run(run / "checkpoints" / "last.ckpt", data_path=str(renamed))
    assert (loaded.datamodule.source_lang, loaded.datamodule.target_lang) == ("zh", "en")


def test_tatoeba_options_that_cannot_work_are_refused(tmp_path):
    path = tatoeba_file(tmp_path / "cmn.txt")
    with pytest.raises(ValueError, match="exactly one of source_lang and target_lang must be en"):
        tatoeba_data(path, source_lang="zh", target_lang="ja")
    with pytest.raises(ValueError, match="exactly one of source_lang and target_lang must be en"):
        tatoeba_data(path, source_lang="en", target_lang="eng")
    with pytest.raises(ValueError, match="test_split names a file"):
        tatoeba_data(path, test_split="test2016")
    with pytest.raises(CorpusError, match="is a folder; dataset 'tatoeba' reads one file"):
        tatoeba_data(tmp_path).pairs("train")
    with pytest.raises(CorpusError, match="leave none for training"):
        tatoeba_data(path, held_out_pairs=7).pairs("train")


# --- Which script, and what the tokenizer does with it ------------------------------------------------------


def test_the_script_of_a_side_is_read_from_its_characters():
    assert script_shares(["汤姆来了。"]) == {"han": 0.8, "kana": 0.0, "hangul": 0.0, "run": 5.0}
    assert script_shares(["Tom 来了 。"])["run"] == 2.0  # runs with Han or Kana only
    # Chinese or Japanese already segmented into words keeps its words (KFTT's Japanese is).
    assert text_handling(["日本 の 水墨 画 を 一変 さ せ た 。"]) == TextHandling("whitespace", "nfc")
    assert text_handling(["汤姆来了。"]) == TextHandling("cjk", "nfc")
    assert text_handling(["トムは来ました。"]) == TextHandling("cjk", "nfc")  # Japanese: Kana and Han
    assert text_handling(["톰이 왔어요."]) == TextHandling("whitespace", "nfc")  # Korean has spaces
    mostly_latin = ["Tom came, saw 东京 and left for ever and ever."]
    assert text_handling(mostly_latin) == TextHandling("whitespace", "nfkc")
    assert text_handling([]) == TextHandling("whitespace", "nfkc")
    assert is_chinese(["汤姆来了。", "我喜欢猫。"]) and not is_chinese(["トムは来ました。"])
    assert not is_chinese(["Tom came."])


def train_cjk(texts, **options) -> Tokenizer:
    return Tokenizer.train(texts, kind="bpe", vocab_size=200, split_punctuation=True, **options)


CHINESE = [zh for _, zh in PAIRS] * 10 + ["我们明天去北京，好吗？", "汤姆买了3个iPhone。"] * 10


def test_cjk_pre_tokenization_gives_every_han_character_its_own_piece_and_decodes_back():
    tok = train_cjk(CHINESE, pre_tokenize="cjk", normalization="nfc")
    for text in ("我们明天去北京，好吗？", "汤姆买了3个iPhone。", "iPhone 离开了。"):
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        pieces = [piece.removeprefix("▁") for piece in tok.tokens(ids)]
        han = [piece for piece in pieces if any("\u4e00" <= c <= "\u9fff" for c in piece)]
        assert han and all(len(piece) == 1 for piece in han), pieces
    # Whitespace pre-tokenization learns multi-character Chinese pieces from the same text.
    whole = train_cjk(CHINESE, pre_tokenize="whitespace", normalization="nfc")
    assert any(len(piece.removeprefix("▁")) > 1 for piece in whole.tokens(whole.encode("我们明天去北京")))


def test_nfc_keeps_full_width_punctuation_that_nfkc_turns_into_ascii():
    text = "你好，汤姆！远吗？"
    nfc = train_cjk(CHINESE, pre_tokenize="cjk", normalization="nfc")
    nfkc = train_cjk(CHINESE, pre_tokenize="cjk", normalization="nfkc")
    assert nfc.decode(nfc.encode(text)) == text
    assert nfkc.decode(nfkc.encode(text)) == "你好,汤姆!远吗?"


def test_word_level_tokenizers_refuse_subword_text_options():
    with pytest.raises(ValueError, match="pre_tokenize and normalization are for subword tokenizers"):
        Tokenizer.train(["a b"], kind="word", pre_tokenize="cjk")
    with pytest.raises(ValueError, match="pre_tokenize must be 'whitespace' or 'cjk', got 'chars'"):
        Tokenizer.train(["a b"], kind="bpe", pre_tokenize="chars")
    with pytest.raises(ValueError, match="pre_tokenize needs tokenizer bpe or unigram"):
        TranslationDataModule(dataset="toy", pre_tokenize="cjk")


def test_the_data_module_chooses_cjk_and_nfc_for_chinese_and_the_option_overrides_it(tmp_path):
    path = tatoeba_file(tmp_path / "cmn.txt", PAIRS * 3)
    auto = tatoeba_data(path, held_out_pairs=1)
    text = "你好！你好。"  # characters of several English sentences: some stay in training
    assert auto.src_tokenizer.decode(auto.src_tokenizer.encode(text)) == text  # NFC: full-width kept
    pieces = auto.src_tokenizer.tokens(auto.src_tokenizer.encode(text))
    assert all(len(t.removeprefix("▁")) == 1 for t in pieces)
    separate = tatoeba_data(path, held_out_pairs=1, pre_tokenize="whitespace", shared_vocab=False)
    pieces = separate.src_tokenizer.tokens(separate.src_tokenizer.encode("离开了。"))
    assert any(len(t.removeprefix("▁")) > 1 for t in pieces)
    english = separate.tgt_tokenizer  # the English side alone: NFKC as before
    assert english.decode(english.encode("ﬁne")) == "fine"


@pytest.mark.skipif(importlib.util.find_spec("opencc") is None, reason="no OpenCC (pip install .[cjk])")
def test_chinese_script_converts_the_chinese_side_of_every_split(tmp_path):
    traditional = [("Tom left.", "湯姆離開了。"), ("My hair.", "我的頭髮。")] * 4 + PAIRS
    path = tatoeba_file(tmp_path / "cmn.txt", traditional)
    data = tatoeba_data(path, chinese_script="simplified", held_out_pairs=1, seed=1)
    everything = [p for split in ("train", "val", "test") for p in data.pairs(split)]
    chinese = {p.source for p in everything}
    assert "汤姆离开了。" in chinese and "我的头发。" in chinese and "湯姆離開了。" not in chinese
    assert {p.target for p in everything} == {english for english, _ in traditional}  # English unchanged
    kept = tatoeba_data(path, held_out_pairs=1, seed=1)
    assert "湯姆離開了。" in {p.source for split in ("train", "val", "test") for p in kept.pairs(split)}


@pytest.mark.skipif(not CMN.is_file(), reason=f"cmn.txt not found at {CMN} (set CORPORA_DIR)")
def test_the_downloaded_cmn_txt_reads_whole_in_both_directions():
    zh_en = TranslationDataModule(dataset="tatoeba", path=str(CMN), source_lang="zh", target_lang="en")
    sizes = {split: len(zh_en.pairs(split)) for split in ("train", "val", "test")}
    assert sum(sizes.values()) == 28146 and 1000 <= sizes["val"] <= 1010 and 1000 <= sizes["test"] <= 1010
    first = read_tatoeba(CMN, english_source=True)[0]
    assert (first.source, first.target) == ("Hi.", "嗨。")
    assert text_handling(p.source for p in zh_en.pairs("train")) == TextHandling("cjk", "nfc")
    en_zh = TranslationDataModule(dataset="tatoeba", path=str(CMN), source_lang="en", target_lang="zh")
    reversed_test = [(p.target, p.source) for p in en_zh.pairs("test")]
    assert reversed_test == [(p.source, p.target) for p in zh_en.pairs("test")]


def test_the_examples_in_data_scripts_docstring_hold():
    import doctest

    import data.scripts

    result = doctest.testmod(data.scripts)
    assert result.attempted >= 5 and result.failed == 0


def test_a_side_written_without_spaces_is_read_as_written_when_scored_on_words():
    # The model read the Han-script toy's target without spaces in training; its words joined by spaces
    # would be other tokens (a lone ▁ before each word).
    from data.toy import make_toy_splits
    from data.words import encode_pair_words

    pairs = make_toy_splits(train_size=200, val_size=0, test_size=0, script="han", seed=2)["train"]
    src = Tokenizer.train([p.source for p in pairs])
    tgt = Tokenizer.train([p.target for p in pairs], kind="bpe", vocab_size=300, pre_tokenize="cjk",
                          normalization="nfc")
    for pair in pairs[:20]:
        source, target = encode_pair_words(pair, src, tgt)
        assert target.ids == tgt.encode(pair.target) and source.ids == src.encode(pair.source)
        assert target.count == len(pair.target_words) and len(target.words) == len(target.ids)
        pieces = tgt.tokens(target.ids)
        for word in range(target.count):  # each word's pieces spell it
            spelled = "".join(p for p, w in zip(pieces, target.words, strict=True) if w == word)
            assert spelled.removeprefix("▁") == pair.target_words[word]
