"""Subwords to words and links from word maps (analysis.word_alignment, data.words), on handmade tensors."""

import unicodedata

import pytest
import torch

from analysis.aer import count_links
from analysis.heads import gold_matrix
from analysis.word_alignment import (
    EXTRACTIONS,
    NO_WORD,
    aer_of_counts,
    agreement_counts,
    argmax_links,
    extract,
    link_counts,
    read_through,
    threshold_links,
    word_maps,
    word_valid,
)
from data.tokenizer import Tokenizer
from data.words import encode_words, token_words, word_readers

X = NO_WORD


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def test_source_words_sum_their_subwords_and_target_words_average_theirs():
    # 3 target tokens (words 0, 0, 1) × 4 source tokens (words 0, 1, 1, none)
    scores = torch.tensor([[0.1, 0.2, 0.3, 0.4],
                           [0.3, 0.4, 0.1, 0.2],
                           [0.5, 0.0, 0.5, 0.0]])[None]  # (1, T, S)
    words = word_maps(scores, torch.tensor([[0, 1, 1, X]]), torch.tensor([[0, 0, 1]]), 2, 2)
    expected = torch.tensor([[(0.1 + 0.3) / 2, (0.2 + 0.3 + 0.4 + 0.1) / 2],
                             [0.5, 0.5]])
    torch.testing.assert_close(words[0], expected)


def test_tokens_of_no_word_and_words_of_no_token_are_left_out():
    scores = torch.arange(12.0).view(1, 1, 3, 4)  # (B, M, T, S): one map
    src_words, tgt_words = torch.tensor([[X, 0, X, 2]]), torch.tensor([[X, 1, X]])
    words = word_maps(scores, src_words, tgt_words, 3, 2)  # source word 1 and target word 0 have no token
    torch.testing.assert_close(words[0, 0], torch.tensor([[0.0, 0.0, 0.0], [5.0, 0.0, 7.0]]))
    assert word_valid(src_words, 3).tolist() == [[True, False, True]]
    assert word_valid(tgt_words, 2).tolist() == [[False, True]]


def test_word_maps_keep_leading_dimensions_and_refuse_bad_indices():
    scores = torch.rand(2, 3, 4, 5, 6)  # (B, L, H, T, S)
    src_words = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 1, X, X]])
    tgt_words = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, X, X]])
    words = word_maps(scores, src_words, tgt_words, 6, 5)
    assert words.shape == (2, 3, 4, 5, 6)
    torch.testing.assert_close(words[0], scores[0])  # one token per word: the same map
    with pytest.raises(ValueError, match=r"word indices must lie in \[-1, 5\)"):
        word_maps(scores, src_words, tgt_words, 5, 5)
    with pytest.raises(ValueError, match=r"must be \(B, S\) = \(2, 6\)"):
        word_maps(scores, src_words[:, :5], tgt_words, 6, 5)


def test_attention_rows_stay_distributions_over_words():
    weights = torch.softmax(torch.randn(1, 2, 5, 7), dim=-1)  # (B, H, T, S)
    src_words = torch.tensor([[0, 0, 1, 2, 2, 2, X]])
    tgt_words = torch.tensor([[0, 1, 1, 2, X]])
    words = word_maps(weights * (src_words >= 0)[:, None, None, :], src_words, tgt_words, 3, 3)
    on_words = weights[..., :6].sum(-1)  # (B, H, T): what the rows put on words
    expected = torch.stack([on_words[..., 0], on_words[..., 1:3].mean(-1), on_words[..., 3]], dim=-1)
    torch.testing.assert_close(words.sum(-1), expected)


def maps_of(rows):
    return torch.tensor(rows, dtype=torch.float32)[None, None]  # (1, 1, Tw, Sw)


def links_of(links: torch.Tensor) -> set[tuple[int, int]]:
    return {(s, t) for t, s in links[0, 0].nonzero().tolist()}


ALL = torch.ones(1, 3, dtype=torch.bool)


def test_argmax_forward_and_reverse():
    maps = maps_of([[0.7, 0.2, 0.1],
                    [0.6, 0.3, 0.1],
                    [0.1, 0.1, 0.8]])
    assert links_of(argmax_links(maps, ALL, ALL)) == {(0, 0), (0, 1), (2, 2)}
    found = extract(maps, ALL, ALL, ["argmax_reverse", "argmax_intersection", "argmax_union",
                                     "argmax_grow_diag_final_and"])
    assert links_of(found["argmax_reverse"]) == {(0, 0), (1, 1), (2, 2)}  # column 1's best is row 1
    assert links_of(found["argmax_intersection"]) == {(0, 0), (2, 2)}
    assert links_of(found["argmax_union"]) == {(0, 0), (0, 1), (1, 1), (2, 2)}
    # grow-diag: (0, 1) and (1, 1) touch (0, 0); (0, 1) first in (source, target) order, then (1, 1)
    # aligns source 1, still unaligned
    assert links_of(found["argmax_grow_diag_final_and"]) == {(0, 0), (0, 1), (1, 1), (2, 2)}


def test_argmax_skips_words_without_a_reading_and_takes_signed_scores():
    maps = maps_of([[-0.5, -0.1, 0.9],
                    [0.0, 0.0, 0.0],
                    [-0.3, -0.2, -0.9]])
    src_valid = torch.tensor([[True, True, False]])
    tgt_valid = torch.tensor([[True, False, True]])
    assert links_of(argmax_links(maps, src_valid, tgt_valid)) == {(1, 0), (1, 2)}


def test_threshold_keeps_every_share_of_the_row_above_it():
    maps = maps_of([[0.5, 0.4, 0.1],
                    [-1.0, 2.0, 2.0],
                    [-1.0, -2.0, 0.0]])  # negative scores count as nothing; a row of none links nothing
    assert links_of(threshold_links(maps, ALL, ALL, 0.3)) == {(0, 0), (1, 0), (1, 1), (2, 1)}
    assert links_of(threshold_links(maps, ALL, ALL, 0.1)) == {(0, 0), (1, 0), (2, 0), (1, 1), (2, 1)}
    both = extract(maps, ALL, ALL, ["threshold_both"], threshold=0.3)["threshold_both"]
    # columns: 0 → (0.5, 0, 0): row 0 only; 1 → (0.4, 2, 0): 0.4/2.4 < 0.3; 2 → (0.1, 2, 0): row 1
    assert links_of(both) == {(0, 0), (1, 1), (2, 1)}
    with pytest.raises(ValueError, match="threshold must be in"):
        threshold_links(maps, ALL, ALL, 0.0)
    with pytest.raises(ValueError, match="unknown extraction 'max'"):
        extract(maps, ALL, ALL, ["max"])


def test_counts_give_the_aer_of_analysis_aer():
    torch.manual_seed(0)
    maps = torch.rand(3, 4, 5, 6)  # (B, M, Tw, Sw)
    valid_src, valid_tgt = torch.ones(3, 6, dtype=torch.bool), torch.ones(3, 5, dtype=torch.bool)
    sure = [{(0, 0), (1, 1), (2, 3)}, {(5, 4), (3, 2)}, {(1, 0)}]
    possible = [{(1, 0)}, {(4, 4), (2, 2)}, set()]
    S, P = gold_matrix(sure, 5, 6), gold_matrix(possible, 5, 6)
    for name, links in extract(maps, valid_src, valid_tgt, list(EXTRACTIONS)).items():
        counts = link_counts(links, S, P)  # (4, M)
        precision, recall, aer = aer_of_counts(counts)
        for m in range(4):
            predicted = [{(s, t) for t, s in links[b, m].nonzero().tolist()} for b in range(3)]
            expected = count_links(predicted, sure, possible)
            assert counts[:, m].tolist() == [expected.a_and_s, expected.a_and_p, expected.a, expected.s], name
            score = expected.score()
            assert (float(precision[m]), float(recall[m])) == pytest.approx((score.precision, score.recall))
            assert float(aer[m]) == pytest.approx(score.aer)


def test_agreement_counts_the_aligned_target_words_whose_link_is_gold():
    links = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    links[0, 0, 0, 0] = links[0, 0, 1, 2] = links[0, 0, 2, 1] = True  # (source, target): (0,0) (2,1) (1,2)
    sure = gold_matrix([{(0, 0), (1, 1)}], 3, 3)  # target 2 has no sure link: not counted
    possible = gold_matrix([{(2, 1)}], 3, 3)  # target 1's link is possible: a hit
    assert agreement_counts(links, sure, possible).tolist() == [[2], [2]]
    with pytest.raises(ValueError, match="AER is undefined"):
        aer_of_counts(torch.zeros(4, 1, dtype=torch.int64))


def test_words_read_through_another_take_its_links():
    # 3 target words × 4 source words; source word 2 is read through word 1 (one token spells both),
    # target word 2 through word 0, source word 3 through none (no token spells it).
    links = torch.zeros(1, 2, 3, 4, dtype=torch.bool)
    links[0, 0, 0, 1] = True  # target 0 - source 1
    links[0, 1, 1, 0] = True  # second map: target 1 - source 0
    read = read_through(links, torch.tensor([[0, 1, 1, X]]), torch.tensor([[0, 1, 0]]))
    expected = torch.zeros_like(links)
    expected[0, 0, 0, 1] = expected[0, 0, 0, 2] = expected[0, 0, 2, 1] = expected[0, 0, 2, 2] = True
    expected[0, 1, 1, 0] = True
    assert torch.equal(read, expected)
    # every word its own reader: the links unchanged
    assert torch.equal(read_through(links, torch.arange(4)[None], torch.arange(3)[None]), links)
    with pytest.raises(ValueError, match="must be"):
        read_through(links, torch.arange(3)[None], torch.arange(3)[None])


def test_word_readers_by_character_overlap():
    # words "ab" [0, 2), "c" [2, 3), "d" [3, 4), "e" [4, 5); one token spells "abc", one "d"; none "e"
    spans, words = [(0, 3), (3, 4)], [(0, 2), (2, 3), (3, 4), (4, 5)]
    owners = token_words(spans, words)
    assert owners == [0, 2]
    assert word_readers(spans, words, owners) == [0, 0, 2, X]


def test_token_words_by_character_overlap():
    # "ab cd": words [0, 2) and [3, 5); a token of nothing, one of the space, one across both words
    spans = [(0, 2), (3, 4), (4, 5), (2, 2), (2, 3), (1, 4)]
    assert token_words(spans, [(0, 2), (3, 5)]) == [0, 1, 1, X, X, 0]


@pytest.mark.parametrize("split_punctuation", [False, True])
def test_subword_tokens_belong_to_the_words_they_spell(split_punctuation):
    texts = ["yoshimitsu ashikaga was the shogun .", "足利 義満 （ あしかが ） は 将軍 。"] * 3
    tokenizer = Tokenizer.train(texts, kind="bpe", vocab_size=60, split_punctuation=split_punctuation)
    for text in texts[:2]:
        words = text.split()
        encoded = encode_words(tokenizer, words)
        assert encoded.ids == tokenizer.encode(text) and encoded.count == len(words)
        assert len(encoded.ids) > len(words)  # words really split into pieces
        pieces = tokenizer.tokens(encoded.ids)
        for word, piece in zip(encoded.words, pieces, strict=True):
            if word == X:
                assert piece == "▁"  # a lone Metaspace spells no character
            else:
                assert piece.removeprefix("▁") in nfkc(words[word])
        # every word is spelled by its pieces, in order (after NFKC: "（" is read as "(")
        spelled = ["".join(p.removeprefix("▁") for p, w in zip(pieces, encoded.words) if w == i)
                   for i in range(len(words))]
        assert spelled == [nfkc(word) for word in words]


def test_normalised_characters_keep_their_word():
    tokenizer = Tokenizer.train(["ｱｲｳ ㍿ test"] * 3, kind="bpe", vocab_size=50)
    encoded = encode_words(tokenizer, ["ｱｲｳ", "㍿", "test"])  # NFKC: アイウ, 株式会社
    assert sorted(set(encoded.words) - {X}) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"word 2 \('a b'\) is empty or holds whitespace"):
        encode_words(tokenizer, ["x", "a b"])


def test_encode_spans_leave_out_the_space_of_a_metaspace():
    tokenizer = Tokenizer.train(["the dog ran", "the cat"] * 3, kind="bpe", vocab_size=40)
    ids, spans = tokenizer.encode_spans("the dogs")
    assert ids == tokenizer.encode("the dogs")
    text = "the dogs"
    pieces = tokenizer.tokens(ids)
    assert "".join(text[start:end] for start, end in spans) == "thedogs"
    assert all(start == end for (start, end), piece in zip(spans, pieces) if piece == "▁")
