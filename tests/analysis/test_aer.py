"""AER with sure and possible links (Och & Ney 2003), on handmade cases and against a published scorer."""

import pytest

from analysis.aer import AERScore, LinkCounts, count_links, score_links


def test_all_sure_aer_is_one_minus_f1():
    sure = [{(0, 0), (1, 1), (2, 2)}, {(0, 1)}]
    predicted = [{(0, 0), (1, 2), (2, 2)}, {(0, 1), (1, 1)}]
    score = score_links(predicted, sure, [set(), set()])
    # |A ∩ S| = 3, |A| = 5, |S| = 4
    assert score == AERScore(precision=3 / 5, recall=3 / 4, aer=pytest.approx(1 - 6 / 9))
    f1 = 2 * score.precision * score.recall / (score.precision + score.recall)
    assert score.aer == pytest.approx(1 - f1)


def test_perfect_prediction_scores_zero_and_possibles_may_be_left_out():
    sure, possible = [{(0, 0), (1, 1)}], [{(1, 0)}]
    assert score_links([{(0, 0), (1, 1)}], sure, possible) == AERScore(1.0, 1.0, 0.0)
    assert score_links([{(0, 0), (1, 1), (1, 0)}], sure, possible) == AERScore(1.0, 1.0, 0.0)


def test_predicting_a_possible_link_costs_no_precision_but_a_wrong_link_does():
    sure, possible = [{(0, 0)}], [{(0, 1)}]
    with_possible = score_links([{(0, 0), (0, 1)}], sure, possible)
    with_wrong = score_links([{(0, 0), (1, 1)}], sure, possible)
    assert with_possible.precision == 1.0 and with_possible.aer == pytest.approx(0.0)
    assert with_wrong.precision == 0.5 and with_wrong.aer == pytest.approx(1 - 2 / 3)


def test_a_possible_only_prediction_earns_no_recall():
    score = score_links([{(1, 1)}], [{(0, 0)}], [{(1, 1)}])
    assert score.precision == 1.0 and score.recall == 0.0
    assert score.aer == pytest.approx(1 - 1 / 2)  # (|A∩S| + |A∩P|) / (|A| + |S|) = (0 + 1) / (1 + 1)


def test_empty_prediction_has_aer_one_and_nothing_to_score_is_an_error():
    assert score_links([set(), set()], [{(0, 0)}, {(1, 1)}], [set(), set()]) == AERScore(0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="AER is undefined"):
        score_links([set()], [set()], [{(0, 0)}])
    with pytest.raises(ValueError, match="2 predicted alignments for 1 sure and 1 possible"):
        score_links([set(), set()], [{(0, 0)}], [set()])


def test_counts_sum_batch_by_batch_to_the_corpus_score():
    predicted = [{(0, 0), (1, 2)}, {(0, 1), (1, 1), (2, 0)}, set(), {(3, 3)}]
    sure = [{(0, 0), (1, 1)}, {(0, 1)}, {(0, 0)}, {(3, 3)}]
    possible = [{(1, 2)}, {(2, 0), (2, 1)}, set(), set()]
    whole = count_links(predicted, sure, possible)
    assert whole == LinkCounts(a_and_s=3, a_and_p=5, a=6, s=5)
    batches = count_links(predicted[:1], sure[:1], possible[:1]) + count_links(
        predicted[1:], sure[1:], possible[1:]
    )
    assert batches == whole
    assert sum((LinkCounts.of(*k) for k in zip(predicted, sure, possible)), LinkCounts()) == whole
    assert whole.score() == score_links(predicted, sure, possible)
    assert whole.score().aer == pytest.approx(1 - 8 / 11)


# lilt/alignment-scripts, scripts/aer.py (commit 4da9bbfae633b1c8765281b0cd337233ed8d1446), run on these two
# files, 0-based as it reads them by default, printed:
#     hyp.talp: 38.5% (71.4%/50.0%/7)              python aer.py ref.talp hyp.talp
#     hyp.talp: 41.2% (71.4%/50.0%/7)              python aer.py ref.talp hyp.talp --allSure
# and its calculate_metrics returned precision 0.7142857142857143, recall 0.5, AER 0.3846153846153846.
REFERENCE = "0-0 1-1 2p2 1p2\n0-1 1-0 2-2 3p3\n0-0 1p1\n"
HYPOTHESIS = "0-0 1-2 2-1\n0-1 1-1 3-3 2-2\n\n"


def test_agrees_with_lilt_alignment_scripts_on_a_small_file():
    from data.gold import parse_links

    gold = [parse_links(line, one_based=False) for line in REFERENCE.splitlines()]
    predicted = [parse_links(line, one_based=False)[0] for line in HYPOTHESIS.splitlines()]
    sure, possible = [s for s, _ in gold], [p for _, p in gold]
    score = score_links(predicted, sure, possible)
    assert (score.precision, score.recall, score.aer) == pytest.approx(
        (0.7142857142857143, 0.5, 0.3846153846153846), abs=1e-15
    )
    assert f"{score.aer:.1%} ({score.precision:.1%}/{score.recall:.1%}/{sum(map(len, predicted))})" == (
        "38.5% (71.4%/50.0%/7)"
    )
    all_sure = [s | p for s, p in gold]
    score = score_links(predicted, all_sure, [set()] * len(all_sure))
    assert f"{score.aer:.1%} ({score.precision:.1%}/{score.recall:.1%})" == "41.2% (71.4%/50.0%)"
