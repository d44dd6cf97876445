"""Per-head attention statistics on hand-made maps whose answers are known.

Shapes: B batch, H heads, L layers, Tq query and Tk key positions, S source and T target length.
"""

import math

import pytest
import torch

from analysis.heads import (
    STATISTIC,
    STATISTICS,
    alignment_agreement,
    alignment_error_rate,
    entropy,
    gold_matrix,
    mean_distance,
    offset_share,
    summarize,
)


def as_map(*rows: list[float]) -> torch.Tensor:
    """One head of one sentence: a (1, 1, Tq, Tk) map from its rows."""
    return torch.tensor(rows, dtype=torch.float32)[None, None]


IDENTITY = as_map([1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1])
ANTI_DIAGONAL = as_map([0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0])
# Each query on the previous token; query 0 has none and stays on itself.
PREVIOUS = as_map([1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0])
UNIFORM = torch.full((1, 1, 4, 4), 0.25)


def test_one_hot_rows_have_zero_entropy():
    assert entropy(IDENTITY).tolist() == [0.0]
    assert entropy(ANTI_DIAGONAL).tolist() == [0.0]


def test_uniform_rows_have_entropy_log_n():
    assert entropy(UNIFORM).item() == pytest.approx(math.log(4))


def test_statistics_are_per_head():
    two_heads = torch.cat([IDENTITY, UNIFORM], dim=1)  # (1, 2, 4, 4)
    assert entropy(two_heads).tolist() == pytest.approx([0.0, math.log(4)])
    # Uniform over 4 keys: mean |q - k| over all 16 pairs = 20 / 16.
    assert mean_distance(two_heads).tolist() == pytest.approx([0.0, 1.25])


def test_identity_is_all_diagonal_and_at_distance_zero():
    assert mean_distance(IDENTITY).tolist() == [0.0]
    assert offset_share(IDENTITY, 0).tolist() == [1.0]
    assert offset_share(IDENTITY, -1).tolist() == [0.0]
    assert offset_share(IDENTITY, +1).tolist() == [0.0]


def test_anti_diagonal_distances():
    # Query q looks at key 3 - q: distances 3, 1, 1, 3.
    assert mean_distance(ANTI_DIAGONAL).tolist() == [2.0]
    assert offset_share(ANTI_DIAGONAL, 0).tolist() == [0.0]
    # Offset +1 exists for queries 0..2 and only query 1 -> key 2 carries weight.
    assert offset_share(ANTI_DIAGONAL, +1).item() == pytest.approx(1 / 3)


def test_shifted_by_one_is_all_previous():
    # Query 0 has no previous key, so only queries 1..3 count.
    assert offset_share(PREVIOUS, -1).tolist() == [1.0]
    assert offset_share(PREVIOUS, 0).tolist() == [0.25]
    assert mean_distance(PREVIOUS).tolist() == [0.75]


def test_padded_queries_are_ignored_and_padded_keys_excluded():
    # Sentence 0: 4 real tokens, identity. Sentence 1: 2 real tokens, uniform over them; its padded
    # query rows hold junk that must not count.
    second = as_map([0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25], [0, 0, 0, 1])
    weights = torch.cat([IDENTITY, second])  # (2, 1, 4, 4)
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    # 6 real queries: 4 with entropy 0, 2 with entropy log 2.
    assert entropy(weights, valid, valid).item() == pytest.approx(2 * math.log(2) / 6)
    # Distances: 0 for sentence 0; 0.5 for each real query of sentence 1.
    assert mean_distance(weights, valid, valid).item() == pytest.approx(1 / 6)
    # Next key exists for 3 queries of sentence 0 (weight 0) and 1 of sentence 1 (weight 0.5); query 1 of
    # sentence 1 has a padded next key and does not count.
    assert offset_share(weights, +1, valid, valid).item() == pytest.approx(0.5 / 4)
    assert offset_share(weights, 0, valid, valid).item() == pytest.approx((4 + 0.5 + 0.5) / 6)


def test_entropy_of_padded_batch_equals_unpadded_sentence():
    # The same sentence, once alone and once padded with a junk column and row.
    alone = torch.softmax(torch.arange(9.0).reshape(1, 1, 3, 3), dim=-1)
    padded = torch.zeros(1, 1, 4, 4)
    padded[..., :3, :3] = alone
    padded[..., 3, :] = 0.25
    valid = torch.tensor([[True, True, True, False]])
    assert torch.allclose(entropy(padded, valid, valid), entropy(alone))
    assert torch.allclose(mean_distance(padded, valid, valid), mean_distance(alone))


def test_gold_matrix_marks_target_rows_and_source_columns():
    links = gold_matrix([{(2, 0), (0, 1)}], T=2, S=3)
    assert links.int().tolist() == [[[0, 0, 1], [1, 0, 0]]]


DIAGONAL_GOLD = [{(0, 0), (1, 1), (2, 2), (3, 3)}]
ANTI_DIAGONAL_GOLD = [{(3, 0), (2, 1), (1, 2), (0, 3)}]


def test_alignment_agreement_of_anti_diagonal():
    assert alignment_agreement(ANTI_DIAGONAL, ANTI_DIAGONAL_GOLD).tolist() == [1.0]
    assert alignment_agreement(ANTI_DIAGONAL, DIAGONAL_GOLD).tolist() == [0.0]


def test_aer_perfect_and_disjoint():
    assert alignment_error_rate(ANTI_DIAGONAL, ANTI_DIAGONAL_GOLD).tolist() == [0.0]
    assert alignment_error_rate(ANTI_DIAGONAL, DIAGONAL_GOLD).tolist() == [1.0]


def test_aer_partial_by_hand():
    # Targets 0, 1, 2; target 2 has two gold sources. Arg-max: t0 -> s0 (gold), t1 -> s0 (not gold),
    # t2 -> s1 (gold). |A ∩ S| = 2, |A| = 3, |S| = 4: AER = 1 - 4/7.
    weights = as_map([0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.5, 0.4])
    gold = [{(0, 0), (1, 1), (2, 2), (1, 2)}]
    assert alignment_error_rate(weights, gold).item() == pytest.approx(3 / 7)
    assert alignment_agreement(weights, gold).item() == pytest.approx(2 / 3)


def test_aer_sums_over_the_corpus_before_the_ratio():
    # Sentence 0: one link, found (AER 0). Sentence 1: three links, none found (AER 1).
    # Corpus: 1 - 2*1 / (4 + 4) = 0.75, not the mean of sentence AERs (0.5).
    weights = torch.zeros(2, 1, 3, 3)
    weights[0, 0, 0, 0] = 1.0
    weights[0, 0, 1:, :] = 1 / 3  # unaligned target positions: ignored
    weights[1, 0] = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    gold = [{(0, 0)}, {(0, 0), (1, 1), (2, 2)}]
    assert alignment_error_rate(weights, gold).item() == pytest.approx(0.75)
    assert alignment_agreement(weights, gold).item() == pytest.approx(0.25)


def test_alignment_of_a_head_average():
    heads = torch.cat([ANTI_DIAGONAL, ANTI_DIAGONAL, IDENTITY], dim=1)  # (1, 3, 4, 4)
    average = heads.mean(dim=1, keepdim=True)  # (1, 1, 4, 4): 2/3 on the anti-diagonal
    assert alignment_agreement(heads, ANTI_DIAGONAL_GOLD).tolist() == [1.0, 1.0, 0.0]
    assert alignment_agreement(average, ANTI_DIAGONAL_GOLD).tolist() == [1.0]


def test_alignment_ignores_padded_source_keys_and_rejects_padded_gold():
    # Target 0 puts stray weight on the padded source position 2; with the mask its arg-max is source 0.
    weights = as_map([0.3, 0.0, 0.7], [0.0, 1.0, 0.0])
    src_valid = torch.tensor([[True, True, False]])
    tgt_valid = torch.tensor([[True, True]])
    gold = [{(0, 0), (1, 1)}]
    assert alignment_error_rate(weights, gold, tgt_valid, src_valid).tolist() == [0.0]
    assert alignment_error_rate(weights, gold).tolist() == [0.5]
    with pytest.raises(ValueError, match=r"\(src=2, tgt=1\) of sentence 0 points at a padded"):
        alignment_error_rate(weights, [{(2, 1)}], tgt_valid, src_valid)
    with pytest.raises(ValueError, match=r"\(src=5, tgt=0\) of sentence 0 is outside"):
        alignment_agreement(weights, [{(5, 0)}])
    with pytest.raises(ValueError, match="gold has 2 sentences but the attention batch has B=1"):
        alignment_agreement(weights, gold * 2)


def test_bad_inputs_name_the_values():
    with pytest.raises(ValueError, match=r"must be \(B, H, Tq, Tk\), got shape \(4, 4\)"):
        entropy(IDENTITY[0, 0])
    with pytest.raises(ValueError, match=r"query_valid must have shape \(B, 4\) = \(1, 4\).*got \(1, 3\)"):
        entropy(IDENTITY, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_valid must be a boolean mask"):
        entropy(IDENTITY, None, torch.ones(1, 4))
    with pytest.raises(ValueError, match="no query as valid"):
        entropy(IDENTITY, torch.zeros(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="offset 4 leaves no"):
        offset_share(IDENTITY, 4)


def test_summarize_stacks_layers_by_heads():
    two_heads = torch.cat([IDENTITY, ANTI_DIAGONAL], dim=1)  # (1, 2, 4, 4)
    swapped = torch.cat([ANTI_DIAGONAL, IDENTITY], dim=1)
    maps = {"encoder": [two_heads, swapped], "decoder": [IDENTITY], "cross": [two_heads, swapped]}
    summary = summarize(maps, gold=ANTI_DIAGONAL_GOLD)

    assert set(summary) == {"encoder", "decoder", "cross"}
    assert set(summary["encoder"]) == {"entropy", "distance", "diagonal", "previous", "next"}
    assert set(summary["decoder"]) == {"entropy", "distance", "diagonal", "previous"}
    assert set(summary["cross"]) == {"entropy", "distance", "diagonal", "agreement", "aer"}
    assert summary["encoder"]["distance"].tolist() == [[0.0, 2.0], [2.0, 0.0]]  # (L, H)
    assert summary["encoder"]["diagonal"].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert summary["decoder"]["entropy"].shape == (1, 1)
    assert summary["cross"]["agreement"].tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert summary["cross"]["aer"].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_summarize_uses_source_and_target_masks_by_kind():
    # Source has 3 real tokens of 4, target 2 of 2: cross-attention rows live on the target side.
    cross = torch.tensor([[[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])[None]  # (1, 1, 2, 4)
    src_valid = torch.tensor([[True, True, True, False]])
    tgt_valid = torch.tensor([[True, True]])
    summary = summarize({"cross": [cross]}, src_valid=src_valid, tgt_valid=tgt_valid)
    assert summary["cross"]["entropy"].item() == pytest.approx(math.log(2) / 2)
    assert summary["cross"]["diagonal"].item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="unknown attention kind 'self'"):
        summarize({"self": [cross]})


def test_offset_share_pairs_query_and_key_masks_at_their_own_positions():
    # Queries 1 and 2 on the previous key, query 3 on itself. Only queries 0..2 are real (keys 0..3 all are):
    # the pairs (query 1, key 0) and (query 2, key 1) count, (query 3, key 2) does not.
    weights = as_map([1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1])
    query_valid = torch.tensor([[True, True, True, False]])
    key_valid = torch.tensor([[True, True, True, True]])
    assert offset_share(weights, -1, query_valid, key_valid).tolist() == [1.0]
    assert offset_share(weights, -1).item() == pytest.approx(2 / 3)


def test_summarize_scores_alignment_on_real_source_tokens_only():
    # Target 0 puts its largest weight on the padded source position 2; masked, its arg-max is source 0.
    cross = as_map([0.3, 0.0, 0.7], [0.0, 1.0, 0.0])
    src_valid, tgt_valid = torch.tensor([[True, True, False]]), torch.tensor([[True, True]])
    summary = summarize({"cross": [cross]}, src_valid=src_valid, tgt_valid=tgt_valid, gold=[{(0, 0), (1, 1)}])
    assert summary["cross"]["agreement"].tolist() == [[1.0]]
    assert summary["cross"]["aer"].tolist() == [[0.0]]


def test_every_statistic_computed_is_defined_once_in_reading_order():
    weights = torch.softmax(torch.randn(1, 2, 3, 3), dim=-1)
    maps = {"encoder": [weights], "decoder": [weights], "cross": [weights]}
    computed = summarize(maps, gold=[{(0, 0), (1, 2)}])
    names = [s.name for s in STATISTICS]
    assert names == ["entropy", "distance", "diagonal", "previous", "next", "agreement", "aer"]
    assert {name for named in computed.values() for name in named} == set(names) == set(STATISTIC)
    # The shares in [0, 1] are the bounded ones; only the alignment scores have a better direction.
    assert [s.name for s in STATISTICS if s.bounded] == ["diagonal", "previous", "next", "agreement", "aer"]
    assert {s.name: s.lower_is_better for s in STATISTICS if s.lower_is_better is not None} == {
        "agreement": False, "aer": True
    }
    for named in computed.values():
        for name, values in named.items():
            if STATISTIC[name].bounded:
                assert 0 <= values.min() and values.max() <= 1
