"""Gold alignment files: Pharaoh links, sure and possible, 0- or 1-based, beside their sentences."""

import gzip
from pathlib import Path

import pytest

from data.corpora import CorpusError
from data.gold import (
    GoldSet,
    format_links,
    gold_reversed,
    not_repeating,
    parse_links,
    read_gold,
    read_gold_for,
    write_links,
)
from data.pairs import Pair
from tests.conftest import CORPORA

KFTT_GOLD = CORPORA / "kftt-ja-en" / "gold"


def test_parse_links_sure_and_possible_in_either_base():
    assert parse_links("1-2 2p1 3?3", one_based=True) == ({(0, 1)}, {(1, 0), (2, 2)})
    assert parse_links("1-2 2p1 3?3", one_based=False) == ({(1, 2)}, {(2, 1), (3, 3)})
    assert parse_links("", one_based=True) == (set(), set())
    assert parse_links("  0-0\t1-1 ", one_based=False) == ({(0, 0), (1, 1)}, set())


def test_a_link_marked_both_sure_and_possible_is_sure():
    assert parse_links("0-1 0p1 2p2", one_based=False) == ({(0, 1)}, {(2, 2)})


@pytest.mark.parametrize(
    ("line", "one_based", "reason"),
    [
        ("0-1 2x3", False, "'2x3' is not i-j"),
        ("1-2 3-", True, "'3-' does not join two word positions"),
        ("a-1", False, "'a-1' does not join"),
        ("1--2", False, "'1--2' does not join"),
        ("0-2", True, "'0-2' has a position 0"),
        ("1-٣", False, "does not join"),  # an Arabic-Indic digit is a digit to str.isdigit, not to us
    ],
)
def test_parse_links_names_the_malformed_token(line, one_based, reason):
    with pytest.raises(ValueError, match=reason):
        parse_links(line, one_based=one_based)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_gold_bitext_one_based_sorted_by_target_with_empty_lines(tmp_path):
    sentences = write(tmp_path / "s.txt", "猫 が 寝る ||| the cat sleeps\n犬 ||| dog\n雨 だ ||| it rains\n")
    links = write(tmp_path / "a.txt", "3-3 1-2 2p1 1p2\n\n1-1 2p2 2p1\n")
    gold = read_gold(sentences, links, one_based=True)

    first, second, third = gold.pairs
    assert first == Pair("猫 が 寝る", "the cat sleeps", alignment=((0, 1), (2, 2)), possible=((1, 0),))
    assert second.alignment == () and second.possible is None
    assert third.alignment == ((0, 0),) and third.possible == ((1, 0), (1, 1))
    assert gold.dropped == 0 and gold.dropped_lines == ()
    assert gold.sure() == [{(0, 1), (2, 2)}, set(), {(0, 0)}]
    assert gold.possible() == [{(1, 0)}, set(), {(1, 0), (1, 1)}]
    assert gold.summary() == "gold alignments: 3 sentence pairs, 3 sure and 3 possible links"


def test_read_gold_from_two_files_zero_based_gz(tmp_path):
    source = write(tmp_path / "s.de", "das Haus\nja\n")
    target = write(tmp_path / "s.en", "the house\nyes\n")
    links = tmp_path / "a.gz"
    links.write_bytes(gzip.compress(b"1-1 0-0\n0p0\n"))
    gold = read_gold(source, links, one_based=False, target_sentences=target)
    assert [p.source for p in gold.pairs] == ["das Haus", "ja"]
    assert gold.sure() == [{(0, 0), (1, 1)}, set()]
    assert gold.possible() == [set(), {(0, 0)}]


def test_links_past_the_end_are_dropped_and_counted(tmp_path):
    sentences = write(tmp_path / "s.txt", "a b ||| x y\na ||| x\na b c ||| x\n")
    # 3-1 is past 'a b'; 1-2 past 'x'; 2p2 past 'x'
    links = write(tmp_path / "a.txt", "1-1 3-1 2-2\n1-1\n1-1 1-2 2p2 3p1\n")
    gold = read_gold(sentences, links, one_based=True)
    assert gold.sure() == [{(0, 0), (1, 1)}, {(0, 0)}, {(0, 0)}]
    assert gold.possible() == [set(), set(), {(2, 0)}]
    assert gold.dropped == 3 and gold.dropped_lines == (1, 3)
    assert gold.summary().endswith("; dropped 3 past the end of their sentence (lines 1, 3)")


def test_blank_last_lines_are_pairs_without_links(tmp_path):
    sentences = write(tmp_path / "s.txt", "a ||| x\nb ||| y\nc ||| z\n")
    gold = read_gold(sentences, write(tmp_path / "a.txt", "0-0\n\n\n"), one_based=False)
    assert gold.sure() == [{(0, 0)}, set(), set()]
    # a last line without its newline is a line all the same
    gold = read_gold(sentences, write(tmp_path / "b.txt", "0-0\n\n0-0"), one_based=False)
    assert gold.sure() == [{(0, 0)}, set(), {(0, 0)}]


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ("0-0\n0-0\n", r"a\.txt:3: ends after 2 lines of links, but .*s\.txt has 3 sentence pairs"),
        ("0-0\n0-0\n0-0\n0-0\n", r"a\.txt:4: goes on after 3 lines of links, but .*s\.txt has 3"),
        ("0-0\n0-0 1_1\n0-0\n", r"a\.txt:2: link '1_1' is not i-j \(sure\), ipj or i\?j \(possible\)$"),
    ],
)
def test_bad_gold_files_name_file_and_line(tmp_path, links, message):
    sentences = write(tmp_path / "s.txt", "a b ||| x y\na ||| x\na ||| x\n")
    with pytest.raises(CorpusError, match=message):
        read_gold(sentences, write(tmp_path / "a.txt", links), one_based=False)


def test_reversed_swaps_sides_and_links():
    gold = GoldSet(
        [Pair("a b", "x y z", alignment=((1, 0), (0, 2)), possible=((0, 1),), target_words=("x", "y", "z"))],
        dropped=1,
    )
    back = gold.reversed()
    assert back.pairs == [
        Pair("x y z", "a b", alignment=((2, 0), (0, 1)), possible=((1, 0),), source_words=("x", "y", "z"))
    ]
    assert back.dropped == 1
    assert back.reversed() == gold


def test_write_links_round_trips_through_parse(tmp_path):
    alignments = [{(2, 0), (0, 1), (0, 0)}, set(), {(10, 3)}]
    path = tmp_path / "out.talp"
    write_links(path, alignments)
    assert path.read_text() == "0-0 0-1 2-0\n\n10-3\n"
    assert [parse_links(line, one_based=False)[0] for line in path.read_text().splitlines()] == alignments
    assert format_links([(1, 1), (0, 3)]) == "0-3 1-1"


@pytest.mark.skipif(not KFTT_GOLD.is_dir(), reason=f"KFTT gold not found in {KFTT_GOLD} (set CORPORA_DIR)")
def test_kftt_gold_set_reads_with_its_six_links_past_the_end():
    gold = read_gold(KFTT_GOLD / "ja-en.src-tgt", KFTT_GOLD / "ja-en.gold", one_based=True)
    assert len(gold.pairs) == 582
    assert gold.dropped == 6 and gold.dropped_lines == (351, 354, 355, 356)  # as its README says
    assert all(pair.possible is None for pair in gold.pairs)  # all its links are sure
    first = gold.pairs[0]
    assert first.words("source")[:2] == ("足利", "義満")
    assert first.words("target")[:2] == ("yoshimitsu", "ashikaga")
    assert (0, 1) in first.alignment  # "1-2": 足利 – ashikaga


def test_the_direction_comes_from_the_file_names_or_is_asked():
    assert gold_reversed("auto", ["x/ja-en.gold"], "ja", "en") == (
        False, "forward: ja-en.gold is ja-en and the model translates ja to en")
    assert gold_reversed("auto", ["gold.txt", "JA-EN.src-tgt"], "en", "ja")[0] is True
    swapped, why = gold_reversed("auto", ["gold.txt", "de-en.txt"], "ja", "en")
    assert not swapped and why.startswith("forward, assumed: no file name says ja-en or the reverse")
    assert gold_reversed("reversed", ["ja-en.gold"], "ja", "en") == (
        True, "reversed, as asked (the model translates ja to en)")
    with pytest.raises(ValueError, match="gold direction must be one of auto, forward, reversed, got 'up'"):
        gold_reversed("up", [], "ja", "en")


def test_read_gold_for_a_reversed_model_swaps_the_sides(tmp_path):
    sentences = write(tmp_path / "ja-en.src-tgt", "犬 が 走る ||| the dog runs\n")
    links = write(tmp_path / "ja-en.gold", "1-2 3-3 1p1\n")
    gold, why = read_gold_for(sentences, links, "en", "ja", one_based=True)
    assert why.startswith("reversed: ja-en.gold is ja-en")
    pair = gold.pairs[0]
    assert (pair.source, pair.target) == ("the dog runs", "犬 が 走る")
    assert pair.alignment == ((1, 0), (2, 2)) and pair.possible == ((0, 0),)


def test_training_pairs_repeating_gold_either_way_round_are_left_out():
    pairs = [Pair("概要", "Summary"), Pair("summary", "概 要"), Pair("沿革", "History")]
    assert not_repeating(pairs, [Pair("概 要", "summary")]) == [2]
