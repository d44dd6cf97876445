"""Maps chosen on one part of a gold set and reported on another; the diagonal baseline; Pharaoh links
written 1-based and read back."""

from analysis.aer import score_links
from data.gold import format_links, parse_links, write_links
from evaluation.gold_alignment import (
    Choice,
    LinkScores,
    Parts,
    WordAlignmentScores,
    choose,
    diagonal_links,
    reported,
)

LAYERS = ("layer 1", "layer 2")


def scores(argmax_aer: list[float], head_aer: list[list[float]], threshold_aer: list[float]
           ) -> WordAlignmentScores:
    """Figures of two layers of two heads: precision and recall are 1 − AER, enough to tell maps apart."""

    def links(aer: list) -> LinkScores:
        def flip(values):
            return [flip(v) for v in values] if isinstance(values, list) else round(1 - values, 6)

        return LinkScores(flip(aer), flip(aer), aer)

    per_layer = {"argmax": links(argmax_aer), "threshold": links(threshold_aer)}
    per_head = {"argmax": links(head_aer), "threshold": links([[0.9, 0.9], [0.9, 0.9]])}
    return WordAlignmentScores(LAYERS, per_layer, per_head, [0.0, 0.0], None)


def test_the_parts_choose_on_the_first_pairs_and_report_on_the_others():
    kftt = Parts.of(582, 100)
    assert (kftt.choose, kftt.report, kftt.apart) == ((0, 100), (100, 582), True)
    assert kftt.describe() == "chosen on gold pairs 1–100, reported on pairs 101–582 (482)"
    assert kftt.as_dict() == {"choose": [1, 100], "report": [101, 582], "apart": True}
    for few in (Parts.of(80, 100), Parts.of(100, 100), Parts.of(582, 0)):
        assert few.choose == few.report and not few.apart
    assert Parts.of(3, 100).describe() == ("chosen and reported on the same gold pairs 1–3 (3): no pairs "
                                           "held out to report on")


def test_the_map_chosen_on_one_part_is_reported_with_its_figures_on_the_other():
    choosing = scores([0.6, 0.5], [[0.7, 0.4], [0.8, 0.8]], [0.35, 0.9])  # best: threshold, layer 1
    reporting = scores([0.6, 0.3], [[0.7, 0.65], [0.2, 0.8]], [0.55, 0.1])  # its own best would differ
    chosen = choose(choosing)
    assert chosen == {"argmax": Choice("argmax", 0, 1), "threshold": Choice("threshold", 0, None),
                      "best": Choice("threshold", 0, None)}
    rows = reported(chosen, choosing, reporting)
    assert rows["argmax"] == {"layer": "layer 1", "head": 2, "precision": 0.35, "recall": 0.35, "aer": 0.65,
                              "extraction": "argmax", "chosen_aer": 0.4}
    assert rows["best"] == {"layer": "layer 1", "head": None, "precision": 0.45, "recall": 0.45, "aer": 0.55,
                            "extraction": "threshold", "chosen_aer": 0.35}
    assert reporting.best("argmax")["aer"] == 0.2  # what choosing on the reported pairs would have claimed


def test_the_diagonal_links_each_target_word_to_its_share_of_the_source():
    assert diagonal_links(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    assert diagonal_links(5, 2) == {(1, 0), (3, 1)}  # the source words under 1.25 and 3.75
    score = score_links([diagonal_links(2, 4)], [{(0, 0), (1, 1), (1, 2)}], [{(0, 1)}])
    assert (score.precision, score.recall) == (0.75, 2 / 3)


def test_links_written_one_based_read_back_as_they_were(tmp_path):
    found = [{(0, 0), (2, 1), (1, 2)}, set(), {(4, 0)}]
    assert format_links(found[0], one_based=True) == "1-1 2-3 3-2"
    path = tmp_path / "attention.links"
    write_links(path, found, one_based=True)
    assert path.read_text(encoding="utf-8") == "1-1 2-3 3-2\n\n5-1\n"
    assert [parse_links(line, one_based=True)[0] for line in path.read_text().splitlines()] == found
