"""The built-in toy tasks: the translation rules on literal examples, gold alignments, determinism, splits."""

import doctest

import pytest

import data.toy
from analysis.metrics import bleu_tokenizer
from data.pairs import word_spans
from data.toy import MAX_WORDS, MIN_WORDS, NUMERALS, make_toy_splits, translate

SMALL = {"train_size": 2000, "val_size": 200, "test_size": 200}


def tr(source: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    words, alignment = translate(source.split())
    return " ".join(words), alignment


# --- The translation rules, on hand-checked sentences -------------------------------------------------------


def test_adjectives_follow_the_noun_and_the_verb_comes_last():
    #   source: the(0) big(1) cats(2) saw(3) a(4) dog(5)
    assert tr("the big cats saw a dog") == (
        "li kati grandes un hundo vidan",
        ((0, 0), (2, 1), (1, 2), (4, 3), (5, 4), (3, 5)),
    )


def test_determiner_adjective_and_verb_agree_in_number_with_their_noun():
    assert tr("the old cat slept")[0] == "lo kato vete dorma"
    assert tr("the old cats slept")[0] == "li kati vetes dorman"
    # The verb agrees with its subject, not with its object: same source verb, two target forms.
    assert tr("a dog saw the cats")[0] == "un hundo li kati vida"
    assert tr("two dogs saw the cat")[0] == "hundi du lo kato vidan"


def test_numerals_follow_the_adjectives():
    #   source: three(0) small(1) red(2) dogs(3) ran(4)
    assert tr("three small red dogs ran") == (
        "hundi pikoles ruges tri kuran",
        ((3, 0), (1, 1), (2, 2), (0, 3), (4, 4)),
    )
    assert tr("these two birds sang")[0] == "sti paski du kantan"


def test_prepositional_phrase_becomes_a_postpositional_phrase_before_the_object():
    #   source: a(0) girl(1) found(2) the(3) ball(4) under(5) the(6) old(7) table(8)
    assert tr("a girl found the ball under the old table") == (
        "un puelo lo tablo vete sub lo balo trova",
        ((0, 0), (1, 1), (6, 2), (8, 3), (7, 4), (5, 5), (3, 6), (4, 7), (2, 8)),
    )


def test_clauses_keep_their_order_around_a_conjunction():
    assert tr("the dog ran and these two cats slept") == (
        "lo hundo kura kaj sti kati du dorman",
        ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (6, 5), (5, 6), (7, 7)),
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("cat the slept", "expected a determiner or numeral before the noun at word 0, found 'cat'"),
        ("a cats slept", "expected a singular noun after 'a' at word 1"),
        ("three cat slept", "expected a plural noun after a numeral at word 1"),
        ("the cat slept the dog", "expected a conjunction or the end of the sentence at word 3"),
        ("the cat saw", "expected a noun phrase at word 3, found the end of the sentence"),
        ("the big slept", "expected a noun at word 2, found 'slept'"),
        ("some two birds sang", "expected a noun at word 1, found 'two'"),  # only the, these take numerals
    ],
)
def test_translate_rejects_sentences_outside_the_language(source, message):
    with pytest.raises(ValueError, match=message):
        translate(source.split())


# --- Generated data -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_splits():
    return make_toy_splits()


def test_default_splits_have_the_requested_sizes_and_are_disjoint(default_splits):
    assert {k: len(v) for k, v in default_splits.items()} == {"train": 50_000, "val": 1_000, "test": 1_000}
    sources = [p.source for split in default_splits.values() for p in split]
    assert len(set(sources)) == len(sources) == 52_000


def test_default_sentences_span_3_to_25_words_over_a_few_hundred_words(default_splits):
    pairs = [p for split in default_splits.values() for p in split]
    lengths = {len(p.source.split()) for p in pairs}
    assert min(lengths) == MIN_WORDS == 3 and max(lengths) == MAX_WORDS == 25
    source_vocab = {w for p in pairs for w in p.source.split()}
    target_vocab = {w for p in pairs for w in p.target.split()}
    assert 150 <= len(source_vocab) <= 400 and 150 <= len(target_vocab) <= 400


def test_train_and_val_share_one_distribution_even_when_the_sentences_nearly_run_out():
    # 4000 distinct 3-word sentences are most of those the generator makes, so the last ones drawn are of
    # the rarer kinds (a bare numeral is one); the pool is shuffled before it is cut, so val is not left them.
    splits = make_toy_splits(train_size=3000, val_size=1000, test_size=0, split="length", max_train_words=3)

    def bare_numeral_share(pairs):
        return sum(p.source.split()[0] in NUMERALS for p in pairs) / len(pairs)

    assert abs(bare_numeral_share(splits["train"]) - bare_numeral_share(splits["val"])) < 0.06


def test_every_pair_is_its_own_translation_with_a_permutation_alignment(default_splits):
    for pair in default_splits["val"]:
        words, alignment = translate(pair.source.split())
        assert pair.target == " ".join(words) and pair.alignment == alignment
        assert sorted(i for i, _ in alignment) == list(
            range(len(pair.source.split()))
        )  # each source word once
        assert [j for _, j in alignment] == list(range(len(words)))  # each target word once, in order


def test_alignments_are_not_monotonic(default_splits):
    crossing = sum(
        any(a[0] > b[0] for a, b in zip(p.alignment, p.alignment[1:])) for p in default_splits["val"]
    )
    assert crossing > 0.9 * len(default_splits["val"])


def test_same_seed_same_data_and_another_seed_other_data():
    assert make_toy_splits(**SMALL, seed=7) == make_toy_splits(**SMALL, seed=7)
    other = make_toy_splits(**SMALL, seed=8)
    assert {p.source for p in other["train"]} != {p.source for p in make_toy_splits(**SMALL, seed=7)["train"]}


def test_length_split_trains_short_and_tests_long():
    splits = make_toy_splits(**SMALL, split="length", max_train_words=10)
    assert max(len(p.source.split()) for p in splits["train"] + splits["val"]) == 10
    assert min(len(p.source.split()) for p in splits["test"]) == 11
    sources = [p.source for split in splits.values() for p in split]
    assert len(set(sources)) == len(sources)


@pytest.mark.parametrize("split", ["random", "length"])
def test_copy_and_reverse_carry_identity_and_anti_diagonal_alignments(split):
    copy = make_toy_splits(task="copy", split=split, **SMALL)
    reverse = make_toy_splits(task="reverse", split=split, **SMALL)
    for pair in copy["test"][:50]:
        n = len(pair.source.split())
        assert pair.target == pair.source and pair.alignment == tuple((i, i) for i in range(n))
    for pair in reverse["test"][:50]:
        words = pair.source.split()
        n = len(words)
        assert pair.target.split() == words[::-1]
        assert pair.alignment == tuple((n - 1 - j, j) for j in range(n))
    assert {p.source for p in copy["train"]}.isdisjoint(p.source for p in copy["test"])


def test_copy_strings_span_3_to_25_letters():
    splits = make_toy_splits(task="copy", **SMALL)
    lengths = {len(p.source.split()) for split in splits.values() for p in split}
    assert lengths == set(range(MIN_WORDS, MAX_WORDS + 1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "sort"}, "task must be 'translate', 'copy' or 'reverse', got 'sort'"),
        ({"split": "odd"}, "split must be 'random' or 'length', got 'odd'"),
        ({"train_size": 0}, "need train_size >= 1"),
        ({"split": "length", "max_train_words": 25}, r"max_train_words must be in \[3, 24\], got 25"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_toy_splits(**{**SMALL, **kwargs})


# -- alignment phenomena -------------------------------------------------------------------------------------


def test_phenomena_translation_has_each_phenomenon_with_its_gold_links():
    words, links = translate(["the", "two", "big", "cats", "saw", "the", "dog"], phenomena=True)
    assert words == ["kati", "grandes", "du", "hundo", "ha", "vidan", "ja"]
    by_target = {t: sorted(s for s, tt in links if tt == t) for t in range(len(words))}
    assert by_target[2] == [0, 1]  # many-to-one: "the two" -> "du"
    assert by_target[4] == by_target[5] == [4]  # one-to-many: "saw" -> "ha vidan"
    assert by_target[6] == []  # unaligned target word: the particle "ja"
    assert 5 not in {s for s, _ in links}  # unaligned source word: the singular "the"
    # Without phenomena the same sentence is a permutation.
    plain_words, plain_links = translate(["the", "two", "big", "cats", "saw", "the", "dog"])
    assert sorted(s for s, _ in plain_links) == list(range(7)) and len(plain_words) == 7


def test_phenomena_splits_keep_the_sources_and_are_checked():
    plain = make_toy_splits(train_size=50, val_size=10, test_size=10, seed=3)
    varied = make_toy_splits(train_size=50, val_size=10, test_size=10, seed=3, phenomena=True)
    assert [p.source for p in plain["val"]] == [p.source for p in varied["val"]]
    for pair in varied["train"]:
        n_src, n_tgt = len(pair.source.split()), len(pair.target.split())
        assert all(0 <= s < n_src and 0 <= t < n_tgt for s, t in pair.alignment)
    assert any(p.target != q.target for p, q in zip(plain["train"], varied["train"]))
    with pytest.raises(ValueError, match="phenomena are a variant of the translate task, not of 'copy'"):
        make_toy_splits(task="copy", train_size=5, phenomena=True)


def test_the_module_docstring_examples_hold():
    """The examples in ``data.toy``'s docstring, Latin and Han script, are its specification too."""
    result = doctest.testmod(data.toy)
    assert result.failed == 0 and result.attempted == 7


# -- the target in Chinese characters ------------------------------------------------------------------------


def han(source: str) -> tuple[list[str], dict[int, list[int]]]:
    """The Han-script words of ``source`` and, per target word, the source words it is linked to."""
    words, links = translate(source.split(), script="han")
    assert list(links) == sorted(links, key=lambda link: (link[1], link[0]))
    return words, {t: [s for s, tt in links if tt == t] for t in range(len(words))}


def test_han_target_is_chinese_in_chinese_order():
    #   source: a(0) girl(1) found(2) the(3) ball(4) under(5) the(6) old(7) table(8)
    sentence = "a girl found the ball under the old table"
    words, links = translate(sentence.split(), script="han")
    assert "".join(words) == "一个女孩在老桌子下找到了球"
    assert words == ["一", "个", "女孩", "在", "老", "桌子", "下", "找到", "了", "球"]
    assert links == ((0, 0), (0, 1), (1, 2), (5, 3), (7, 4), (8, 5), (5, 6), (2, 7), (4, 9))


def test_han_measure_words_link_two_target_words_to_one_source_numeral():
    words, by_target = han("the two big cats saw three books")
    assert words == ["两", "只", "大", "猫", "看见", "了", "三", "本", "书"]
    assert by_target[0] == by_target[1] == [1]  # 两只 <- two
    assert by_target[6] == by_target[7] == [5]  # 三本 <- three: the measure word is the noun's
    assert han("these two horses ran")[0] == ["这", "两", "匹", "马", "跑", "了"]
    words, by_target = han("every teacher saw this letter")
    assert words == ["每", "位", "老师", "看见", "了", "这", "封", "信"]
    assert by_target[0] == by_target[1] == [0] and by_target[5] == by_target[6] == [3]


def test_han_aspect_particle_is_unaligned_and_the_has_no_translation():
    words, by_target = han("the dog chased the cats and the children laughed")
    assert words == ["狗", "追赶", "了", "猫", "而且", "孩子", "笑", "了"]
    assert by_target[2] == by_target[7] == []  # 了 after each verb of an action, linked to nothing
    assert {s for links in by_target.values() for s in links} == {1, 2, 4, 5, 7, 8}  # no "the" (0, 3, 6)
    assert han("the dog liked the cat")[0] == ["狗", "喜欢", "猫"]  # a state takes no 了


def test_han_pairs_have_no_spaces_and_list_the_words_their_links_index():
    splits = make_toy_splits(train_size=300, val_size=50, test_size=50, seed=3, script="han")
    for pair in [p for split in splits.values() for p in split]:
        words = pair.target_words
        assert words is not None and pair.words("target") == words
        assert " " not in pair.target and pair.target == "".join(words)
        assert all(1 <= len(w) <= 2 for w in words)
        spans = word_spans(pair.target, words)
        assert [pair.target[a:b] for a, b in spans] == list(words)
        n_src = len(pair.source.split())
        assert all(0 <= s < n_src and 0 <= t < len(words) for s, t in pair.alignment)
        linked = {t for _, t in pair.alignment}
        assert {words[t] for t in range(len(words)) if t not in linked} <= {"了"}


def test_han_splits_are_seeded_and_translate_the_latin_sources():
    han_splits = make_toy_splits(**SMALL, seed=7, script="han")
    assert han_splits == make_toy_splits(**SMALL, seed=7, script="han")
    latin = make_toy_splits(**SMALL, seed=7)
    assert [p.source for p in han_splits["train"]] == [p.source for p in latin["train"]]
    assert make_toy_splits(**SMALL, seed=8, script="han")["train"] != han_splits["train"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"script": "kana"}, "script must be 'latin' or 'han', got 'kana'"),
        ({"script": "han", "task": "copy"}, "script 'han' is a variant of the translate task, not of 'copy'"),
        ({"script": "han", "phenomena": True}, "phenomena are a variant of script 'latin'"),
    ],
)
def test_han_script_refuses_what_it_is_not_for(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_toy_splits(**{**SMALL, **kwargs})


# -- the Han-script toy in the data module -------------------------------------------------------------------


def test_datamodule_reads_the_han_toy_with_a_subword_tokenizer():
    from data.datamodule import TranslationDataModule
    from data.reader import ToyOptions

    dm = TranslationDataModule(toy=ToyOptions(script="han", train_size=300, val_size=20, test_size=20))
    assert dm.tokenizer_kind == "bpe"
    assert bleu_tokenizer(dm.target_lang) == "zh"  # BLEU of the Chinese target counts Chinese words
    for pair in dm.pairs("val"):
        assert pair.target == "".join(pair.target_words) and " " not in pair.target
        ids = dm.tgt_tokenizer.encode(pair.target)
        # Each Chinese character a piece of its own (the first with the ▁ of the sentence's start, or after a
        # lone ▁ where training never began a sentence with it), so that no token straddles two words.
        pieces = [t.removeprefix("▁") for t in dm.tgt_tokenizer.tokens(ids)]
        assert [p for p in pieces if p] == list(pair.target)
        assert dm.tgt_tokenizer.decode(ids) == pair.target
        assert len(dm.src_tokenizer.encode(pair.source)) == len(pair.source.split())  # English: word pieces


def test_datamodule_converts_the_han_toy_to_traditional_characters_word_by_word():
    pytest.importorskip("opencc")
    from data.datamodule import TranslationDataModule
    from data.reader import ToyOptions

    toy = ToyOptions(script="han", train_size=300, val_size=50, test_size=20)
    simplified = TranslationDataModule(toy=toy).pairs("val")
    traditional = TranslationDataModule(toy=toy, chinese_script="traditional").pairs("val")
    for before, after in zip(simplified, traditional, strict=True):
        assert after.target == "".join(after.target_words)
        assert [len(w) for w in after.target_words] == [len(w) for w in before.target_words]
        assert "们" not in after.target and "见" not in after.target  # 看见 -> 看見
    # Converted in context: the measure word 只 becomes 隻 (alone, OpenCC leaves it as the adverb "only").
    assert any("隻" in p.target_words for p in traditional)
