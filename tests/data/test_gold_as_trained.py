"""A gold set read the way the model was trained: each side as the run's corpus writes the same sentence
(case, segmentation, punctuation), its tokens mapped to the gold's words by characters, not by spaces.

The strings are KFTT's: its gold (KyTea's words, lowercased English, full-width ``（ ）``) and the lines of
its tune split the gold comes from (MeCab's words, cased English, ASCII ``( )``)."""


import pytest

from data.corpora import read_parallel
from data.gold import GoldSet, as_trained, read_gold
from data.pairs import Pair
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from data.words import NO_WORD, encode_pair_words, encode_words, joined, known_characters, word_characters
from tests.conftest import CORPORA

GOLD_JA = ("臼井 信義 『 足利 義満 』 （ 吉川 弘文 館 人物 叢書 、 "
           "1989 年 （ 平成 元年 ） 新装 版 ） isbn4642051503")
TUNE_JA = ("臼井 信義 『 足利 義満 』 ( 吉川弘文館 人物 叢書 、 "
           "1989 年 ( 平成 元年 ) 新装 版 ) ISBN 4642051503")
GOLD_EN = "yoshimitsu ashikaga was the 3rd seii taishogun of the muromachi shogunate"
TUNE_EN = "Yoshimitsu ASHIKAGA was the 3rd Seii Taishogun of the Muromachi Shogunate"
GOLD_NARU = "天皇 に な ろ う と し た 将軍"  # KyTea
TUNE_NARU = "天皇 に なろ う と し た 将軍"  # MeCab

KFTT = CORPORA / "kftt-ja-en"


def spelled(text: str, words: list[str]) -> list[str]:
    return [text[start:end] for start, end in word_characters(text, words)]


def test_gold_words_are_found_in_the_training_text_by_their_characters():
    # Japanese: full-width punctuation, a word MeCab writes apart (ISBN 4642051503) or joined (吉川弘文館)
    assert spelled(TUNE_JA, GOLD_JA.split()) == [
        "臼井", "信義", "『", "足利", "義満", "』", "(", "吉川", "弘文", "館", "人物", "叢書", "、",
        "1989", "年", "(", "平成", "元年", ")", "新装", "版", ")", "ISBN 4642051503"]
    # English: lowercased in the gold, cased in training
    assert spelled(TUNE_EN, GOLD_EN.split()) == TUNE_EN.split()
    assert spelled(TUNE_NARU, GOLD_NARU.split())[2:5] == ["な", "ろ", "う"]


def test_a_text_that_spells_other_words_is_refused_naming_the_word():
    with pytest.raises(ValueError, match=r"word 3 \('murasaki'\) is not at character 20 of"):
        word_characters(TUNE_EN, ["yoshimitsu", "ashikaga", "murasaki"])
    with pytest.raises(ValueError, match=r"goes on after its 2 words: 'was the"):
        word_characters(TUNE_EN[:30], ["yoshimitsu", "ashikaga"])


def test_tokens_of_the_training_text_belong_to_the_gold_words_they_spell():
    # A word-level tokenizer reads MeCab's words: one token each, mapped to KyTea's words by characters.
    tokenizer = Tokenizer.train([TUNE_NARU, TUNE_JA], kind="word")
    read = encode_words(tokenizer, GOLD_NARU.split(), TUNE_NARU)
    assert read.ids == tokenizer.encode(TUNE_NARU)
    # 天皇 に なろ う と し た 将軍: なろ spells な and ろ, and is the first's; ろ has no token of its own
    assert read.words == [0, 1, 2, 4, 5, 6, 7, 8] and read.count == 9
    # ... so ろ is read through な, whose token spells it; every other word reads itself
    assert read.readers == [0, 1, 2, 2, 4, 5, 6, 7, 8]
    read = encode_words(tokenizer, GOLD_JA.split(), TUNE_JA)
    # 吉川弘文館 is one token for the gold's 吉川 弘文 館: 弘文 and 館 are read through 吉川
    assert read.readers[6:11] == [6, 7, 7, 7, 10] and read.readers[22] == 22
    tokens = TUNE_JA.split()
    assert [tokens[i] for i, word in enumerate(read.words) if word == 7] == ["吉川弘文館"]
    assert [tokens[i] for i, word in enumerate(read.words) if word == 22] == ["ISBN", "4642051503"]


def test_subword_tokens_of_cased_english_belong_to_the_lowercased_gold_words():
    tokenizer = Tokenizer.train([TUNE_EN] * 3, kind="bpe", vocab_size=60)
    read = encode_words(tokenizer, GOLD_EN.split(), TUNE_EN)
    assert read.ids == tokenizer.encode(TUNE_EN)
    pieces = tokenizer.tokens(read.ids)
    for word, gold in enumerate(GOLD_EN.split()):
        spelt = "".join(p.lstrip("▁") for p, w in zip(pieces, read.words, strict=True) if w == word)
        assert spelt.lower() == gold
    assert NO_WORD not in read.words or "▁" in pieces


def test_full_width_punctuation_the_tokenizer_never_read_is_read_in_its_nfkc_form():
    # Japanese is NFC-normalised (full-width punctuation kept), and KFTT's training text writes ASCII ( ).
    tokenizer = Tokenizer.train([TUNE_JA] * 3, kind="bpe", vocab_size=80, normalization="nfc")
    assert SPECIALS.unk_id in tokenizer.encode("（")  # what the gold's own text would give
    assert known_characters("（ 平成 ）", tokenizer) == "( 平成 )"
    words = GOLD_JA.split()[:-1]  # the last, isbn4642051503, is lowercased: only the corpus line mends it
    read = encode_words(tokenizer, words)
    assert SPECIALS.unk_id not in read.ids
    assert read.ids == tokenizer.encode(" ".join(words).replace("（", "(").replace("）", ")"))
    assert sorted(set(read.words) - {NO_WORD}) == list(range(len(words)))


def test_words_are_joined_as_the_tokenizer_read_its_training_text():
    words = ["1989", "年", "（", "平成", "元年", "）", "tv", "アニメ", "shin", "-", "buddhism"]
    segmented = Tokenizer.train(["1989 年"], kind="word")
    assert joined(words, segmented) == " ".join(words)
    as_written = Tokenizer.train(["1989年"] * 3, kind="bpe", vocab_size=40, pre_tokenize="cjk",
                                 normalization="nfc")
    assert joined(words, as_written) == "1989年（平成元年）tvアニメshin - buddhism"
    assert joined(["한국어", "문장"], as_written) == "한국어 문장"  # Korean is written with spaces


def test_the_gold_is_read_as_the_corpus_writes_the_same_sentences():
    gold = GoldSet([Pair(GOLD_JA, "books", ((0, 0),)), Pair(GOLD_NARU, GOLD_EN, ((8, 6),)),
                    Pair("概要", "summary", ((0, 0),))], dropped=1, dropped_lines=(2,))
    corpus = [Pair("概要", "Outline"), Pair(TUNE_NARU, TUNE_EN), Pair(TUNE_JA, "Books")]
    read, line = as_trained(gold, corpus)
    assert line == "3 source and 2 target sides of the 3 gold pairs read as the corpus writes them"
    assert [(p.source, p.target) for p in read.pairs] == [(TUNE_JA, "Books"), (TUNE_NARU, TUNE_EN),
                                                           ("概要", "summary")]
    for before, after in zip(gold.pairs, read.pairs, strict=True):  # the links index the gold's words
        for side in ("source", "target"):
            assert after.words(side) == before.words(side)
        assert after.alignment == before.alignment
    assert read.pairs[2].target_words is None  # not in the corpus: as the gold writes it
    assert (read.dropped, read.dropped_lines) == (1, (2,))
    assert as_trained(gold, [])[0] == gold
    tokenizer = Tokenizer.train([TUNE_JA, TUNE_NARU, "概要"], kind="word")
    english = Tokenizer.train([TUNE_EN, "Books summary"], kind="word")
    source, target = encode_pair_words(read.pairs[1], tokenizer, english)
    assert source.ids == tokenizer.encode(TUNE_NARU) and target.ids == english.encode(TUNE_EN)
    assert SPECIALS.unk_id not in target.ids  # the lowercased gold would be unknown words here
    assert SPECIALS.unk_id in english.encode(GOLD_EN)


@pytest.mark.skipif(not KFTT.is_dir(), reason=f"KFTT not found in {KFTT} (set CORPORA_DIR)")
def test_every_kftt_gold_side_is_read_as_its_tune_line():
    gold = read_gold(KFTT / "gold" / "ja-en.src-tgt", KFTT / "gold" / "ja-en.gold", one_based=True)
    tune = read_parallel(KFTT / "tune.ja.gz", KFTT / "tune.en.gz")
    read, line = as_trained(gold, tune)
    assert line == "582 source and 582 target sides of the 582 gold pairs read as the corpus writes them"
    first = read.pairs[0]
    assert first.source.startswith("足利 義満 ( あしか が よし みつ ) は 室町 幕府")
    assert first.target.startswith("Yoshimitsu ASHIKAGA was the 3rd Seii Taishogun")
    assert first.words("source")[2] == "（" and first.words("target")[0] == "yoshimitsu"
    for pair in read.pairs:  # every gold word is found in the line by its characters
        assert len(word_characters(pair.source, pair.words("source"))) == len(pair.words("source"))
        assert len(word_characters(pair.target, pair.words("target"))) == len(pair.words("target"))


def test_training_reads_the_gold_as_evaluate_does(tmp_path):
    """The gold set a run scores at each validation is read as the run's corpus writes it, as evaluate.py
    --gold-alignments reads it: here the test split's cased MeCab line for the gold's lowercased KyTea one."""
    from data.datamodule import TranslationDataModule
    from data.gold import GoldFiles

    (tmp_path / "train.tsv").write_text(f"{TUNE_NARU}\t{TUNE_EN}\n概要\tOutline\n", encoding="utf-8")
    (tmp_path / "val.tsv").write_text("概要\tOutline\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_text(f"{TUNE_NARU}\t{TUNE_EN}\n", encoding="utf-8")
    sentences, links = tmp_path / "gold.txt", tmp_path / "gold.links"
    sentences.write_text(f"{GOLD_NARU} ||| {GOLD_EN}\n", encoding="utf-8")
    links.write_text("1-1 2-2\n", encoding="utf-8")
    dm = TranslationDataModule(dataset="tsv", path=str(tmp_path), tokenizer="word",
                               gold=GoldFiles(str(sentences), str(links)))
    (pair,) = dm.gold_set().pairs
    assert (pair.source, pair.target) == (TUNE_NARU, TUNE_EN)
    assert pair.words("source") == tuple(GOLD_NARU.split()) and pair.words("target") == tuple(GOLD_EN.split())
