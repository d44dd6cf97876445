"""Two directional alignments made one: intersection, union, grow-diag-final-and (as fast_align's atools)."""

from analysis.symmetrise import SYMMETRISATIONS, grow_diag_final_and, intersection, union


def test_grow_adds_union_links_next_to_the_alignment_sweep_after_sweep():
    # (1, 1) touches (2, 2) diagonally; (0, 0) touches (1, 1) only once that is in: a second sweep adds it.
    forward, reverse = {(2, 2), (1, 1), (0, 0)}, {(2, 2)}
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 2)}
    assert intersection(forward, reverse) == {(2, 2)}


def test_grow_never_links_two_words_already_aligned():
    forward, reverse = {(0, 0), (1, 1)}, {(0, 0), (1, 1), (0, 1)}
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1)}
    assert union(forward, reverse) == {(0, 0), (1, 1), (0, 1)}


def test_final_and_adds_isolated_links_between_unaligned_words_forward_first():
    forward = {(0, 0), (1, 1), (2, 2), (4, 3)}
    reverse = {(0, 0), (1, 1), (2, 2), (3, 4), (4, 0)}
    # Nothing is next to the diagonal, so grow adds nothing; then forward's (4, 3) joins two unaligned words,
    # so does reverse's (3, 4); reverse's (4, 0) does not, as source word 4 is aligned by then.
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 2), (4, 3), (3, 4)}
    assert grow_diag_final_and(set(), {(0, 1), (0, 2)}) == {(0, 1)}


def test_matches_atools_on_a_pinned_case():
    # fast_align's atools (clab/fast_align, src/atools.cc), -c intersect / union / grow-diag-final-and with
    # -i holding the forward line and -j the reverse line, printed these three lines.
    forward = {(0, 0), (1, 2), (2, 1), (3, 3), (3, 4), (5, 5), (0, 6)}
    reverse = {(0, 0), (1, 1), (2, 1), (3, 4), (4, 6), (5, 5)}
    expected = {
        "intersection": "0-0 2-1 3-4 5-5",
        "union": "0-0 0-6 1-1 1-2 2-1 3-3 3-4 4-6 5-5",
        "grow-diag-final-and": "0-0 1-1 1-2 2-1 3-3 3-4 4-6 5-5",
    }
    got = {
        name: " ".join(f"{s}-{t}" for s, t in sorted(symmetrise(forward, reverse)))
        for name, symmetrise in SYMMETRISATIONS.items()
    }
    assert got == expected
