"""The built-in toy tasks: the translation rules on literal examples, gold alignments, determinism, splits."""

import pytest

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
