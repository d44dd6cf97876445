"""Explanation methods scored on words against gold sets (evaluation.gold_alignment): the word path against
the token path on the toy language, subword pieces, and the real KFTT gold set where it is at hand."""

import dataclasses

import pytest
import torch

from analysis.explain.registry import METHODS, explain
from analysis.explain.scores import alignment_scores
from analysis.explain.trace import Explanation
from analysis.word_alignment import EXTRACTIONS
from data.corpora import CorpusError
from data.gold import GoldSet, read_gold
from data.pairs import Pair
from data.tokenizer import Tokenizer
from data.toy import make_toy_splits
from evaluation.forced import forced_pass
from evaluation.gold_alignment import (
    BatchWords,
    count_words,
    gold_alignment,
    gold_items,
    word_explanation,
    word_scores,
)
from evaluation.translate import length_sorted_batches
from model import Transformer
from tests.conftest import CORPORA, tiny_config

KFTT = CORPORA / "kftt-ja-en"


def toy_setting(pairs: int = 12):
    """Toy pairs (one word per token, a permutation as gold), word tokenizers, and a small random model."""
    splits = make_toy_splits(train_size=200, val_size=pairs, test_size=1, seed=5)
    src = Tokenizer.train([p.source for p in splits["train"] + splits["val"]], kind="word")
    tgt = Tokenizer.train([p.target for p in splits["train"] + splits["val"]], kind="word")
    torch.manual_seed(0)
    model = Transformer(tiny_config(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size)).eval()
    return splits["val"], src, tgt, model


def test_one_token_per_word_gives_the_token_path_numbers():
    """On the toy language, the word path scores every method at every layer and head as the token path
    (``analysis.explain.scores``) does, once EOS is no candidate there either (the word path never links a
    word to EOS)."""
    pairs, src, tgt, model = toy_setting()
    items = gold_items(GoldSet(pairs), src, tgt, model.config.max_len, "toy val")
    methods = [name for name in METHODS if name != "integrated_gradients"]
    for batch in length_sorted_batches([i.source.ids for i in items], [i.target.ids for i in items], 5):
        trace = forced_pass(model, batch).trace
        gold = [set(pairs[i].alignment) for i in batch.index.tolist()]
        words = BatchWords.of(items, batch)
        for name in methods:
            explanation = explain(name, trace)
            without_eos = dataclasses.replace(explanation, src_valid=explanation.src_valid & trace.words)
            old = alignment_scores(without_eos, gold)
            counts = count_words(word_explanation(explanation, words), words, ["argmax"], 0.1)
            new = word_scores(counts, explanation.layers).alignment_scores()
            assert [r.layer for r in new.layers] == [r.layer for r in old.layers]
            for mine, theirs in zip(new.layers, old.layers, strict=True):
                assert mine.aer == pytest.approx(theirs.aer, abs=1e-6), name
                assert mine.agreement == pytest.approx(theirs.agreement, abs=1e-6), name
            if old.heads is not None:
                torch.testing.assert_close(torch.tensor(new.heads.aer, dtype=torch.float32),
                                           torch.tensor(old.heads.aer), atol=1e-6, rtol=0)
                torch.testing.assert_close(torch.tensor(new.heads.agreement, dtype=torch.float32),
                                           torch.tensor(old.heads.agreement), atol=1e-6, rtol=0)


def test_every_method_and_extraction_is_scored_per_layer_and_head():
    pairs, src, tgt, model = toy_setting(6)
    items = gold_items(GoldSet(pairs), src, tgt, model.config.max_len, "toy val")
    scores = gold_alignment(model, items, methods=["attention", "grad_x_input"], batch_size=4, ig_steps=2)
    attention = scores["attention"]
    assert set(attention.per_layer) == set(EXTRACTIONS) and attention.layers == ("layer 1", "layer 2")
    for name, layer in attention.per_layer.items():
        head = attention.per_head[name]
        assert len(layer.aer) == 2 and [len(row) for row in head.aer] == [4, 4]
        assert all(0.0 <= value <= 1.0 for value in [*layer.aer, *layer.precision, *layer.recall])
        best = attention.best(name)
        assert best["aer"] == min([*layer.aer, *(a for row in head.aer for a in row)])
    assert scores["grad_x_input"].per_head is None and scores["grad_x_input"].layers == ("embeddings",)
    # a permutation's forward arg-max proposes one link per target word: AER is 1 − agreement
    forward = attention.per_layer["argmax"]
    for aer, agreement, precision in zip(forward.aer, attention.agreement, forward.precision, strict=True):
        assert aer == pytest.approx(1 - agreement) and precision == pytest.approx(agreement)


def test_a_word_split_into_pieces_is_one_row_and_one_column():
    """Subwords really split the words here; the scores are over the gold words, whatever the pieces."""
    texts = ["the dogs ran home", "a dog runs", "the cats sat"] * 3
    tokenizer = Tokenizer.train(texts, kind="bpe", vocab_size=40)
    pair = Pair("the doghouses ran", "a dog runs home", alignment=((0, 0), (1, 1), (2, 2), (2, 3)),
                possible=((1, 3),))
    items = gold_items(GoldSet([pair]), tokenizer, tokenizer, 64, "gold.txt")
    assert len(items[0].source.ids) > 3 and items[0].source.count == 3
    torch.manual_seed(1)
    model = Transformer(tiny_config(src_vocab_size=tokenizer.vocab_size,
                                    tgt_vocab_size=tokenizer.vocab_size)).eval()
    batch = next(length_sorted_batches([items[0].source.ids], [items[0].target.ids], 1))
    words = BatchWords.of(items, batch)
    explained = word_explanation(explain("attention", forced_pass(model, batch).trace), words)
    assert explained.per_layer.shape == (1, 2, 4, 3) and explained.per_head.shape == (1, 2, 4, 4, 3)
    assert bool(explained.src_valid.all()) and bool(explained.tgt_valid.all())
    # rows are distributions over tokens; a word row keeps what its pieces put on words, EOS excluded
    assert bool((explained.per_layer.sum(-1) <= 1 + 1e-5).all())
    assert words.sure.sum() == 4 and words.possible.sum() == 1


def test_a_word_inside_another_words_token_is_scored_with_that_words_links():
    """The gold's な ろ in the training text's one token なろ: ろ has no token, so no map has a row or column
    for it; it is scored with the links of な, through whose token the model reads it."""
    pair = Pair("天皇 に なろ う", "emperor to become", alignment=((0, 0), (2, 2), (3, 2), (4, 2)),
                source_words=("天皇", "に", "な", "ろ", "う"))
    src = Tokenizer.train([pair.source] * 3, kind="word")
    tgt = Tokenizer.train([pair.target] * 3, kind="word")
    items = gold_items(GoldSet([pair]), src, tgt, 64, "gold.txt")
    assert items[0].source.words == [0, 1, 2, 4] and items[0].source.readers == [0, 1, 2, 2, 4]
    batch = next(length_sorted_batches([items[0].source.ids], [items[0].target.ids], 1))
    words = BatchWords.of(items, batch)
    # A word map (Tw 3, Sw 5) whose arg-max is the gold: emperor-天皇, to-に (wrong), become-な; ろ's column
    # is empty, as word_maps leaves a word without tokens.
    maps = torch.tensor([[0.9, 0.1, 0.0, 0.0, 0.0], [0.2, 0.7, 0.1, 0.0, 0.0], [0.0, 0.1, 0.8, 0.0, 0.1]])
    src_valid = torch.tensor([[True, True, True, False, True]])
    explanation = Explanation("attention", maps[None, None], None, ("layer 1",), src_valid,
                              torch.ones(1, 3, dtype=torch.bool), False)
    counts = count_words(explanation, words, ["argmax"], 0.1).layer["argmax"][:, 0].tolist()
    # proposed: (天皇, emperor), (に, to), (な, become) and, read through な, (ろ, become): 3 of 4 sure found
    assert counts == [3, 3, 4, 4]


def test_a_pair_the_model_cannot_read_is_named_by_file_and_line():
    pairs, src, tgt, _ = toy_setting(3)
    with pytest.raises(CorpusError, match=r"^gold\.txt:1: source has \d+ tokens, \d+ with EOS"):
        gold_items(GoldSet(pairs), src, tgt, 3, "gold.txt")


@pytest.mark.skipif(not (KFTT / "gold").is_dir(), reason=f"no KFTT corpus at {KFTT} (CORPORA_DIR)")
def test_the_kftt_gold_set_reads_as_words_of_subwords():
    """The real set: 582 pairs, every gold word spelled by at least one piece of a BPE tokenizer trained on
    a slice of KFTT's training text, and a model scores pairs (a random one here: numbers, not a result)."""
    import gzip

    gold = read_gold(KFTT / "gold" / "ja-en.src-tgt", KFTT / "gold" / "ja-en.gold", one_based=True)
    assert len(gold.pairs) == 582 and gold.dropped == 6
    with gzip.open(KFTT / "train.ja.gz", "rt", encoding="utf-8") as ja, \
            gzip.open(KFTT / "train.en.gz", "rt", encoding="utf-8") as en:
        text = [line for _, line in zip(range(2000), ja)] + [line for _, line in zip(range(2000), en)]
    tokenizer = Tokenizer.train(text, kind="bpe", vocab_size=2000, split_punctuation=True)
    items = gold_items(gold, tokenizer, tokenizer, 1024, "ja-en.src-tgt")
    for item in items:
        for side in (item.source, item.target):
            assert sorted(set(side.words) - {-1}) == list(range(side.count))
    assert sum(len(item.source.ids) for item in items) > sum(item.source.count for item in items)
    torch.manual_seed(0)
    model = Transformer(tiny_config(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
                                    max_len=1024)).eval()
    scores = gold_alignment(model, items[:16], methods=["attention", "shift_att"], batch_size=8)
    for method in scores.values():
        assert all(0.0 <= aer <= 1.0 for aer in method.per_layer["argmax"].aer)
