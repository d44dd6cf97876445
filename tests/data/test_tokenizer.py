"""Tokenizers: special ids, word-level alignment with words, reversible subwords, save and restore."""

import json

import pytest
import tokenizers

from data.special import SPECIALS
from data.tokenizer import Tokenizer
from data.toy import make_toy_splits

GERMAN = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Mehrere Männer mit Schutzhelmen bedienen ein Antriebsradsystem.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster.",
    "Zwei Männer stehen am Herd und bereiten Essen zu.",
] * 20
SPECIAL_IDS = [SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id, SPECIALS.unk_id]


@pytest.fixture(scope="module")
def toy():
    return make_toy_splits(train_size=500, val_size=50, test_size=50, seed=3)


@pytest.fixture(scope="module")
def word(toy):
    return Tokenizer.train([p.source for p in toy["train"]], kind="word")


@pytest.fixture(scope="module")
def bpe():
    return Tokenizer.train(GERMAN, kind="bpe", vocab_size=80)


@pytest.mark.parametrize("kind", ["word", "bpe", "unigram"])
def test_special_tokens_take_ids_0_to_3_in_specials_order(kind):
    tok = Tokenizer.train(GERMAN, kind=kind, vocab_size=150)
    assert tok.tokens(SPECIAL_IDS) == SPECIALS.tokens == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tok.kind == kind
    ids = tok.encode(GERMAN[0])
    assert ids and all(len(SPECIALS.tokens) <= i < tok.vocab_size for i in ids)  # no specials added


def test_word_level_gives_one_token_per_word_so_alignments_index_tokens(toy, word):
    for pair in toy["val"]:
        assert len(word.encode(pair.source)) == len(pair.source.split())
    assert word.encode("the cat zzyzx") == [word.encode("the")[0], word.encode("cat")[0], SPECIALS.unk_id]


def test_word_level_decode_joins_words_and_skips_pad_bos_eos_but_not_unk(word):
    ids = word.encode("the big cat slept")
    padded = [SPECIALS.bos_id, *ids, SPECIALS.unk_id, SPECIALS.eos_id, SPECIALS.pad_id, SPECIALS.pad_id]
    assert word.decode(padded) == "the big cat slept <unk>"
    assert word.tokens(padded)[:2] == ["<s>", "the"] and word.tokens(padded)[-2:] == ["<pad>", "<pad>"]


def test_subword_decoding_gives_back_the_plain_text(bpe):
    for text in GERMAN[:5]:
        ids = bpe.encode(text)
        assert len(ids) > len(text.split())  # a small vocabulary: words are split into subwords
        assert bpe.decode(ids) == text
    tokens = bpe.tokens(bpe.encode("Zwei Männer"))
    assert tokens[0].startswith("▁") and "".join(tokens) == "▁Zwei▁Männer"


def test_subwords_normalise_with_nfkc_and_mark_unknown_characters(bpe):
    assert bpe.decode(bpe.encode("Ein Mann")) == bpe.decode(bpe.encode("Ein\u00a0Mann")) == "Ein Mann"
    assert SPECIALS.unk_id in bpe.encode("Ein 🦜")


PUNCTUATED = [
    "Ein Hund läuft.",
    "(Ein Hund) läuft, schnell!",
    'Zwei Männer... um 3:30 Uhr, "hier" - ja?',
    "Ein Mann in einem blauen Hemd steht auf einer Leiter.",
] * 20


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_split_punctuation_keeps_punctuation_out_of_words_and_decodes_back(kind):
    split = Tokenizer.train(PUNCTUATED, kind=kind, vocab_size=120, split_punctuation=True)
    joined = Tokenizer.train(PUNCTUATED, kind=kind, vocab_size=120)
    for text in {*PUNCTUATED, "Ein Hund. (Mann)!", "Hund,  (Mann) ..."}:
        assert split.decode(split.encode(text)) == text
    pieces = set(split.tokens(range(4, split.vocab_size)))
    assert {".", ",", "(", ")", "!"} <= pieces
    assert not [p for p in pieces if len(p) > 1 and any(not c.isalnum() and c != "▁" for c in p)]
    assert split.tokens(split.encode("Ein Hund läuft."))[-1] == "."
    assert any(len(p) > 1 and p[-1] in ".," for p in joined.tokens(range(4, joined.vocab_size)))
    restored = Tokenizer.from_json(split.to_json())  # the split is part of the saved tokenizer
    assert restored.encode(PUNCTUATED[2]) == split.encode(PUNCTUATED[2])


def test_unknown_ids_are_an_error(word):
    with pytest.raises(ValueError, match=f"id {word.vocab_size} is outside the vocabulary of size"):
        word.tokens([word.vocab_size])


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_training_twice_on_the_same_text_gives_the_same_tokenizer(kind):
    assert Tokenizer.train(GERMAN, kind=kind, vocab_size=150).to_json() == (
        Tokenizer.train(GERMAN, kind=kind, vocab_size=150).to_json()
    )


def test_vocab_size_caps_the_vocabulary():
    assert Tokenizer.train(GERMAN, kind="bpe", vocab_size=120).vocab_size == 120
    words = {w for text in GERMAN for w in text.split()}
    assert Tokenizer.train(GERMAN, kind="word", vocab_size=8000).vocab_size == len(words) + 4
    assert Tokenizer.train(GERMAN, kind="word", vocab_size=10).vocab_size == 10


@pytest.mark.parametrize("kind", ["word", "bpe", "unigram"])
def test_json_and_file_round_trips_restore_the_same_tokenizer(tmp_path, kind):
    tok = Tokenizer.train(GERMAN, kind=kind, vocab_size=150)
    path = tmp_path / "run" / "src_tokenizer.json"
    tok.save(path)
    every_id = range(tok.vocab_size)
    for restored in (Tokenizer.from_json(tok.to_json()), Tokenizer.load(path)):
        assert (restored.kind, restored.tokens(every_id)) == (kind, tok.tokens(every_id))
        assert restored.encode(GERMAN[3]) == tok.encode(GERMAN[3])
        assert restored.decode(tok.encode(GERMAN[3])) == tok.decode(tok.encode(GERMAN[3]))


def test_bad_tokenizer_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json: no such tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.json: not a tokenizer JSON"):
        Tokenizer.load(bad)


def test_a_tokenizer_with_other_special_ids_is_refused():
    raw = tokenizers.Tokenizer(tokenizers.models.WordLevel({"hello": 0, "<unk>": 1}, unk_token="<unk>"))
    with pytest.raises(ValueError, match="maps special token '<pad>' to id None, expected 0"):
        Tokenizer(raw)
    state = json.loads(Tokenizer.train(GERMAN, kind="word").to_json())
    state["model"]["vocab"]["<s>"], state["model"]["vocab"]["</s>"] = 2, 1
    with pytest.raises(ValueError, match="maps special token '<s>' to id 2, expected 1"):
        Tokenizer.from_json(json.dumps(state))


def test_bad_training_arguments_are_named():
    with pytest.raises(ValueError, match="kind must be 'word', 'bpe' or 'unigram', got 'chars'"):
        Tokenizer.train(GERMAN, kind="chars")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vocab_size must exceed the 4 special tokens, got 4"):
        Tokenizer.train(GERMAN, vocab_size=4)
    with pytest.raises(ValueError, match="split_punctuation needs a subword tokenizer"):
        Tokenizer.train(GERMAN, kind="word", split_punctuation=True)
