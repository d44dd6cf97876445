"""Corpus readers: good files, each kind of bad file (with the message it must give), and the real corpora."""

import gzip
from pathlib import Path

import pytest

from data.corpora import (
    CorpusError,
    filter_by_length,
    read_bitext,
    read_lines,
    read_parallel,
    read_scan,
    read_tsv,
)
from data.pairs import Pair, word_spans
from tests.conftest import CORPORA

MULTI30K = CORPORA / "multi30k"
SCAN = CORPORA / "scan"


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- Good input ---------------------------------------------------------------------------------------------


def test_parallel_files_with_crlf_and_stray_whitespace(tmp_path):
    src = write(tmp_path / "train.de", b"  ein  Hund \r\nzwei\tKatzen\r\n")
    tgt = write(tmp_path / "train.en", b"a dog\r\ntwo cats  \r\n\r\n")  # trailing blank lines are not data
    assert read_parallel(src, tgt) == [Pair("ein Hund", "a dog"), Pair("zwei Katzen", "two cats")]
    assert read_parallel(tgt, src) == [Pair("a dog", "ein Hund"), Pair("two cats", "zwei Katzen")]


def test_a_line_separator_inside_a_sentence_does_not_split_the_line(tmp_path):
    src = write(tmp_path / "a.de", "eins\u2028zwei\ndrei\n".encode())
    tgt = write(tmp_path / "a.en", b"one two\nthree\n")
    assert [p.source for p in read_parallel(src, tgt)] == ["eins zwei", "drei"]


def test_tsv(tmp_path):
    path = write(tmp_path / "train.tsv", "Guten Tag\tGood day\r\n  Danke \t thanks\t\nÄpfel\tapples".encode())
    assert read_tsv(path) == [Pair("Guten Tag", "Good day"), Pair("Danke", "thanks"), Pair("Äpfel", "apples")]


def test_scan_plain_and_gzipped(tmp_path):
    text = b"IN: jump twice OUT: I_JUMP I_JUMP\nIN: walk left OUT: I_TURN_LEFT I_WALK\n"
    expected = [Pair("jump twice", "I_JUMP I_JUMP"), Pair("walk left", "I_TURN_LEFT I_WALK")]
    assert read_scan(write(tmp_path / "tasks.txt", text)) == expected
    assert read_scan(write(tmp_path / "tasks.txt.gz", gzip.compress(text))) == expected


def test_utf8_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    assert read_lines(write(tmp_path / "bom.txt", b"\xef\xbb\xbfhello\n")) == ["hello"]


def test_read_lines_splits_on_newlines_only_and_drops_the_carriage_return_of_crlf(tmp_path):
    path = write(tmp_path / "a.txt", b"one \r\ntwo\rthree\r\n\r\n")
    assert read_lines(path) == ["one ", "two\rthree"]


def test_old_mac_cr_line_endings_are_line_endings(tmp_path):
    # A file with no "\n" at all ends its lines with "\r"; it is not one long line with tabs in the target.
    path = write(tmp_path / "mac.tsv", b"Guten Tag\tGood day\rDanke\tthanks\r")
    assert read_tsv(path) == [Pair("Guten Tag", "Good day"), Pair("Danke", "thanks")]
    src = write(tmp_path / "mac.de", b"ein Hund\rzwei Katzen")
    tgt = write(tmp_path / "mac.en", b"a dog\rtwo cats\r")
    assert read_parallel(src, tgt) == [Pair("ein Hund", "a dog"), Pair("zwei Katzen", "two cats")]


def test_crlf_and_a_byte_order_mark_still_read_as_before(tmp_path):
    path = write(tmp_path / "win.tsv", b"\xef\xbb\xbfGuten Tag\tGood day\r\nDanke\tthanks\r\n")
    assert read_tsv(path) == [Pair("Guten Tag", "Good day"), Pair("Danke", "thanks")]


@pytest.mark.parametrize(
    "header", ["source\ttarget", "\ufeffen\tde", "English\tFrench", "src_text\ttgt_text", "zh-CN\ten"]
)
def test_a_header_line_of_column_names_is_refused(tmp_path, header):
    path = write(tmp_path / "train.tsv", f"{header}\r\nHallo\tHello\r\n".encode())
    fields = header.removeprefix("\ufeff").replace("\t", "<TAB>")
    assert error_of(read_tsv, path) == (
        f"{path}:1: '{fields}' looks like a header line, not a sentence pair (both fields name a column or a "
        "language); remove it, or move it below the first line if it is a real pair"
    )


@pytest.mark.parametrize(
    "first", ["Englisch\tEnglish", "text\ttext", "ja\tyes", "Deutsch ist schwer\tGerman is hard", "no\tnein"]
)
def test_a_real_first_pair_is_not_taken_for_a_header(tmp_path, first):
    path = write(tmp_path / "train.tsv", f"{first}\nHallo\tHello\n".encode())
    assert len(read_tsv(path)) == 2


def test_only_the_first_line_can_be_a_header(tmp_path):
    path = write(tmp_path / "train.tsv", b"Hallo\tHello\nsource\ttarget\n")
    assert read_tsv(path)[1] == Pair("source", "target")


# --- Bad input: one clear message naming the file and line --------------------------------------------------


def error_of(read, *paths) -> str:
    with pytest.raises(CorpusError) as info:
        read(*paths)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_parallel_files_with_different_line_counts(tmp_path):
    src = write(tmp_path / "val.de", b"a\nb\nc\n")
    tgt = write(tmp_path / "val.en", b"a\nb\n")
    assert error_of(read_parallel, src, tgt) == (
        f"{tgt}: has 2 lines but {src} has 3; parallel files must match line for line"
    )


def test_blank_line_inside_a_parallel_file(tmp_path):
    src = write(tmp_path / "x.de", b"a\n  \nc\n")
    tgt = write(tmp_path / "x.en", b"a\nb\nc\n")
    assert error_of(read_parallel, src, tgt) == f"{src}:2: empty line; every line must hold one sentence"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a\tb\nno tab here\n", "2: TSV line has no tab between source and target"),
        (b"a\tb\nc\t \n", "2: TSV line has an empty target side"),
        (b"\tb\n", "1: TSV line has an empty source side"),
        (b"a\tb\tc\n", "1: TSV line has more than one tab; expected source<TAB>target"),
        (b"a\tb\n\nc\td\n", "2: empty line; expected source<TAB>target"),
    ],
)
def test_bad_tsv_lines(tmp_path, content, message):
    path = write(tmp_path / "bad.tsv", content)
    assert error_of(read_tsv, path) == f"{path}:{message}"


def test_a_word_too_long_for_subword_training_is_refused_with_its_line(tmp_path):
    word = "x" * 2_000_000
    path = write(tmp_path / "train.tsv", f"a\tb\nein {word} Wort\ta word\n".encode())
    assert error_of(read_tsv, path) == (
        f"{path}:2: a 2000000-character word; words longer than 1000 characters are not supported "
        "(subword training slows down with the square of a word's length): split or remove it"
    )
    path = write(tmp_path / "train.de", f"a\nb\n{word}\n".encode())
    assert error_of(read_parallel, path, path).startswith(f"{path}:3: a 2000000-character word;")


def test_a_whole_cjk_sentence_without_spaces_is_not_too_long(tmp_path):
    # Chinese and Japanese write a sentence as one whitespace-free run; 300 characters is a long one.
    sentence = "吾輩は猫である。名前はまだ無い。" * 20  # 320 characters
    path = write(tmp_path / "train.tsv", f"{sentence}\tI am a cat.\n".encode())
    assert read_tsv(path) == [Pair(sentence, "I am a cat.")]
    word = "x" * 1000  # the longest word allowed
    assert read_tsv(write(tmp_path / "long.tsv", f"{word}\tb\n".encode())) == [Pair(word, "b")]


def test_invalid_utf8_names_the_line_and_byte(tmp_path):
    path = write(tmp_path / "train.en", b"fine\nalso fine\nbad \xff byte\n")
    assert error_of(read_lines, path) == f"{path}:3: invalid UTF-8 (byte 0xff at column 5)"
    other = write(tmp_path / "train.de", b"x\ny\nz\n")
    assert error_of(read_parallel, other, path).startswith(f"{path}:3: invalid UTF-8")


@pytest.mark.parametrize("content", [b"", b"\n\r\n  \n"])
def test_empty_file(tmp_path, content):
    path = write(tmp_path / "empty.tsv", content)
    assert error_of(read_tsv, path) == f"{path}: file is empty"


def test_missing_path_and_folder(tmp_path):
    missing = tmp_path / "nope" / "train.de"
    assert error_of(read_parallel, missing, tmp_path / "train.en") == f"{missing}: no such file"
    assert error_of(read_scan, tmp_path) == f"{tmp_path}: is a folder, expected a text file"


def test_bad_scan_lines_and_bad_gzip(tmp_path):
    path = write(tmp_path / "tasks.txt", b"IN: jump OUT: I_JUMP\njump => I_JUMP\n")
    assert error_of(read_scan, path) == f"{path}:2: SCAN line must look like 'IN: <command> OUT: <actions>'"
    path = write(tmp_path / "tasks2.txt", b"IN: OUT: I_JUMP\n")
    assert error_of(read_scan, path) == f"{path}:1: SCAN line has an empty command side"
    path = write(tmp_path / "tasks3.txt", b"IN: jump OUT: I_JUMP\nIN: walk OUT:\n")
    assert error_of(read_scan, path) == f"{path}:2: SCAN line has an empty action side"
    path = write(tmp_path / "tasks4.txt", b"IN: jump OUT: I_JUMP\nXX: walk OUT: I_WALK\n")
    assert error_of(read_scan, path) == f"{path}:2: SCAN line must look like 'IN: <command> OUT: <actions>'"
    path = write(tmp_path / "tasks.txt.gz", b"not gzip at all")
    assert error_of(read_scan, path).startswith(f"{path}: cannot read file: ")


def test_corpus_error_is_a_value_error_with_its_parts():
    error = CorpusError("a/b.tsv", 17, "TSV line has no tab between source and target")
    assert isinstance(error, ValueError)
    assert (error.path, error.line, str(error)) == (
        "a/b.tsv",
        17,
        "a/b.tsv:17: TSV line has no tab between source and target",
    )


# --- Length filter ------------------------------------------------------------------------------------------


def test_filter_by_length_counts_words_of_the_longer_side_by_default():
    pairs = [Pair("a b", "c"), Pair("a", "b c d"), Pair("a b c", "d e f")]
    assert filter_by_length(pairs, max_len=2) == ([pairs[0]], 2)
    assert filter_by_length(pairs, max_len=3) == (pairs, 0)


def test_filter_by_length_with_given_lengths_keeps_any_items():
    assert filter_by_length(["x", "y", "z"], max_len=5, lengths=[6, 5, 7]) == (["y"], 2)
    with pytest.raises(ValueError, match="got 2 lengths for 3 items"):
        filter_by_length(["x", "y", "z"], max_len=5, lengths=[1, 2])
    with pytest.raises(ValueError, match="max_len must be >= 1, got 0"):
        filter_by_length(["x"], max_len=0, lengths=[1])


# --- The real corpora, when present -------------------------------------------------------------------------


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found in {MULTI30K} (set CORPORA_DIR)")
def test_multi30k_split_sizes_and_first_pair():
    train = read_parallel(MULTI30K / "train.de", MULTI30K / "train.en")
    sizes = {
        "train": len(train),
        "val": len(read_parallel(MULTI30K / "val.de", MULTI30K / "val.en")),
        "test2016": len(read_parallel(MULTI30K / "test2016.de", MULTI30K / "test2016.en")),
    }
    assert sizes == {"train": 29000, "val": 1014, "test2016": 1000}
    assert train[0] == Pair(
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )


@pytest.mark.skipif(not SCAN.is_dir(), reason=f"SCAN not found in {SCAN} (set CORPORA_DIR)")
def test_scan_simple_split_sizes_and_first_pair():
    train = read_scan(SCAN / "simple_split" / "tasks_train_simple.txt.gz")
    test = read_scan(SCAN / "simple_split" / "tasks_test_simple.txt.gz")
    assert (len(train), len(test)) == (16728, 4182)
    assert train[1] == Pair(
        "run opposite left after walk right", "I_TURN_RIGHT I_WALK I_TURN_LEFT I_TURN_LEFT I_RUN"
    )


def test_bitext_lines_read_source_and_target_around_the_bars(tmp_path):
    path = tmp_path / "gold.src-tgt"
    path.write_text("京都 の  寺 ||| a temple  in kyoto\nx|||y\n", encoding="utf-8")
    assert read_bitext(path) == [Pair("京都 の 寺", "a temple in kyoto"), Pair("x", "y")]
    path.write_text("ok ||| fine\nno bars here\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"gold.src-tgt:2: expected one 'source \|\|\| target' pair a line"):
        read_bitext(path)
    path.write_text("ok ||| \n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"gold.src-tgt:1: empty target side"):
        read_bitext(path)


def test_a_pair_without_spaces_between_its_words_names_them_and_their_spans():
    words = ("两", "只", "猫", "吃", "了")
    pair = Pair("two cats eat", "两只猫吃了", ((0, 0), (0, 1), (1, 2), (2, 3)), target_words=words)
    assert pair.words("source") == ("two", "cats", "eat")
    assert pair.words("target") == ("两", "只", "猫", "吃", "了")
    assert word_spans(pair.target, pair.words("target")) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert word_spans("  苹果 吃了", ["苹果", "吃", "了"]) == [(2, 4), (5, 6), (6, 7)]
    assert word_spans(pair.source, pair.words("source")) == [(0, 3), (4, 8), (9, 12)]
    with pytest.raises(ValueError, match=r"word 2 \('狗'\) is not at character 2 of '苹果吃了'"):
        word_spans("苹果吃了", ["苹果", "狗"])
    with pytest.raises(ValueError, match="goes on after its 1 words"):
        word_spans("苹果吃了", ["苹果"])
