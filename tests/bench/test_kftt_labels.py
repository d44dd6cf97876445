"""bench/kftt_alignment.py's symmetrised training labels and bench/kftt_joined.py's two directions joined:
what each computes, on small hand-made inputs (no eflomal, no training)."""

import gzip
from pathlib import Path

import pytest
import torch

from analysis.symmetrise import grow_diag_final_and
from data.alignment_labels import read_alignment_labels
from data.corpora import read_parallel


def write_kftt(root, train, gold):
    kftt = root / "kftt-ja-en"
    (kftt / "gold").mkdir(parents=True)
    for index, lang in enumerate(("ja", "en")):
        text = "".join(pair[index] + "\n" for pair in train)
        (kftt / f"train.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    (kftt / "gold" / "ja-en.src-tgt").write_text("".join(f"{s} ||| {t}\n" for s, t in gold), encoding="utf-8")
    (kftt / "gold" / "ja-en.gold").write_text("1-1\n" * len(gold), encoding="utf-8")
    return kftt


def test_symmetrised_labels_join_both_directions_and_leave_gold_repeats_blank(tmp_path, monkeypatch):
    import bench.kftt_eflomal
    from bench.kftt_alignment import Run, gold_files, labels_file, symmetrised_labels

    train = [("猫 が 寝る", "The cat sleeps"), ("犬 だ", "a dog"), ("鳥 が 飛ぶ", "Birds fly")]
    write_kftt(tmp_path, train, gold=[("犬だ", "A  dog")])  # the second pair, spaced and cased otherwise
    aligned = {}

    def align(sources, targets, **options):  # eflomal's two directions, made up: each pair's own
        aligned["pairs"] = list(zip(sources, targets, strict=True))
        forward = [{(0, 0), (2, 2)}, {(1, 1), (2, 0)}]
        reverse = [{(0, 0), (1, 2)}, {(2, 1)}]
        return forward, reverse

    monkeypatch.setattr(bench.kftt_eflomal, "align", align)
    out = tmp_path / "out"
    symmetrised_labels(gold_files(tmp_path), out)

    # eflomal sees the training pairs lowercased, never the one that repeats a gold pair.
    assert aligned["pairs"] == [("猫 が 寝る", "the cat sleeps"), ("鳥 が 飛ぶ", "birds fly")]
    pairs = read_parallel(tmp_path / "kftt-ja-en" / "train.ja.gz", tmp_path / "kftt-ja-en" / "train.en.gz")
    forward_file = read_alignment_labels(labels_file(out, Run("ja", "en", True)), pairs)
    assert forward_file == [grow_diag_final_and({(0, 0), (2, 2)}, {(0, 0), (1, 2)}), set(),
                            grow_diag_final_and({(1, 1), (2, 0)}, {(2, 1)})]
    swapped = [type(pair)(pair.target, pair.source) for pair in pairs]
    reverse_file = read_alignment_labels(labels_file(out, Run("en", "ja", True)), swapped)
    assert reverse_file == [{(t, s) for s, t in links} for links in forward_file]

    aligned.clear()  # made once: a second call reuses the files
    symmetrised_labels(gold_files(tmp_path), out)
    assert aligned == {}


def test_labels_of_english_cut_short_and_longer_sampling_are_files_of_their_own(tmp_path, monkeypatch):
    import bench.kftt_eflomal
    from bench.kftt_alignment import Run, gold_files, labels_file, symmetrised_labels

    train = [("猫 が 寝る", "The cats sleeping"), ("鳥 が 飛ぶ", "Birds fly")]
    write_kftt(tmp_path, train, gold=[("犬だ", "a dog")])
    calls = []

    def align(sources, targets, *, samplers, length):
        calls.append((list(targets), length))
        return [{(0, 0), (2, 2)}, {(1, 1)}], [{(0, 0), (1, 2)}, {(1, 1)}]

    monkeypatch.setattr(bench.kftt_eflomal, "align", align)
    out = tmp_path / "out"
    symmetrised_labels(gold_files(tmp_path), out, stem=3, iterations=4)

    # eflomal reads each English word's first three characters, lowercased, for four times its iterations
    assert calls == [(["the cat sle", "bir fly"], 4)]
    made = labels_file(out, Run("ja", "en", True), 3, 4)
    assert made.name == "ja-en.grow-diag-final-and.en3.x4.txt"
    assert labels_file(out, Run("en", "ja", True), 3, 4).is_file()
    assert not labels_file(out, Run("ja", "en", True)).exists()  # whole words' links keep their own name
    pairs = read_parallel(tmp_path / "kftt-ja-en" / "train.ja.gz", tmp_path / "kftt-ja-en" / "train.en.gz")
    assert read_alignment_labels(made, pairs) == [
        grow_diag_final_and({(0, 0), (2, 2)}, {(0, 0), (1, 2)}), {(1, 1)}]  # the whole words, by position

    symmetrised_labels(gold_files(tmp_path), out, stem=3, iterations=4)  # made once
    assert len(calls) == 1
    symmetrised_labels(gold_files(tmp_path), out)  # other settings: made again, beside the first
    assert calls[1] == (["the cats sleeping", "birds fly"], 1.0)


@pytest.mark.parametrize("options, message", [
    (["--label-stem", "-1", "--labels", "grow-diag-final-and"], "--label-stem must be 0 or more"),
    (["--label-iterations", "0", "--labels", "grow-diag-final-and"], "--label-iterations more than 0"),
    (["--label-stem", "4"], "make the links of --labels grow-diag-final-and"),
    (["--alignment-layer", "0"], "--alignment-layer counts decoder layers from 1, got 0"),
])
def test_label_settings_out_of_range_or_without_joined_links_are_refused(options, message, capsys):
    from bench.kftt_alignment import parse_args

    with pytest.raises(SystemExit):
        parse_args(options)
    assert message in capsys.readouterr().err


def test_alignment_layer_names_the_supervised_layer_of_supervised_runs_only(tmp_path, capsys):
    from bench.kftt_alignment import main

    out = tmp_path / "o"
    assert main(["--dry-run", "--out", str(out), "--corpora", str(tmp_path), "--no-eflomal",
                 "--alignment-layer", "1", "--runs", "sup_ja_en", "unsup_ja_en"]) == 0
    supervised, unsupervised = capsys.readouterr().out.splitlines()[:2]
    assert "--model.alignment_layer 1 --model.alignment_head 1" in supervised
    assert "name sup_ja_en" in supervised and "--model.alignment_layer" not in unsupervised


def test_cut_words_keeps_each_words_first_characters():
    from bench.kftt_eflomal import cut_words

    assert cut_words("the temples of kyoto", 4) == "the temp of kyot"
    assert cut_words("the temples", 0) == "the temples"
    assert cut_words("", 4) == ""


def test_joined_links_and_the_extraction_chosen_on_the_first_pairs():
    from bench.kftt_joined import choose_and_report, links_of

    # Rows: target words; columns: source words. The first pair's map reads a diagonal, the second an
    # anti-diagonal whose second row spreads over two source words.
    first = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    second = torch.tensor([[0.1, 0.1, 0.8], [0.05, 0.5, 0.45], [0.9, 0.05, 0.05]])
    assert links_of([first, second], "argmax", 0.1) == [{(0, 0), (1, 1)}, {(2, 0), (1, 1), (0, 2)}]
    assert links_of([second], "threshold", 0.4) == [{(2, 0), (1, 1), (2, 1), (0, 2)}]

    sure = [{(0, 0), (1, 1)}, {(2, 0), (1, 1), (2, 1), (0, 2)}]
    possible = [set(), set()]
    result = choose_and_report([first, second], sure, possible, choose=1)
    # Pair 1 alone chooses: its arg-max is perfect, and the first candidate of AER 0 wins ties.
    assert result["chosen"] == "argmax" and result["chosen_aer"] == 0.0
    # Reported on pair 2 only: 3 of its 4 sure links found, none wrong.
    assert result["precision"] == 1.0 and result["recall"] == pytest.approx(0.75)
    assert result["aer"] == pytest.approx(1 - 6 / 7)
    assert result["candidates"]["threshold 0.4"]["aer"] == pytest.approx(0.0)


def test_several_models_maps_are_joined_by_a_mean_chosen_on_the_first_pairs():
    from bench.kftt_joined import choose_and_report, links_of, means

    # Two models' maps of two pairs (2 target × 2 source words): the first model right on both pairs, the
    # second wrong on the first pair; averaged, the first model's confidence wins there.
    first = [torch.tensor([[0.9, 0.1], [0.1, 0.9]]), torch.tensor([[0.6, 0.4], [0.3, 0.7]])]
    second = [torch.tensor([[0.4, 0.6], [0.2, 0.8]]), torch.tensor([[0.8, 0.2], [0.0, 1.0]])]
    joined = means([first, second])
    assert set(joined) == {"mean ", "geometric mean "}
    torch.testing.assert_close(joined["mean "][0], torch.tensor([[0.65, 0.35], [0.15, 0.85]]))
    # a share one model gives nothing stays (nearly) nothing in the geometric mean
    torch.testing.assert_close(joined["geometric mean "][1][1], torch.tensor([0.0, 0.7 ** 0.5]), atol=1e-5,
                               rtol=0)
    assert means([first]) == {"": first}
    sure = [{(0, 0), (1, 1)}, {(0, 0), (1, 1)}]
    result = choose_and_report(joined, sure, [set(), set()], choose=1)
    assert result["chosen"] == "mean argmax" and result["aer"] == 0.0
    assert "geometric mean threshold 0.4" in result["candidates"]
    assert "geometric mean argmax_grow_diag_final_and floor 0.1" in result["candidates"]
    # Source word 1 has no token (one token spells words 0 and 1), so no column: it takes word 0's links.
    without = torch.tensor([[0.9, 0.0], [0.6, 0.0]])
    assert links_of([without], "argmax", 0.1) == [{(0, 0), (0, 1)}]
    assert links_of([without], "argmax", 0.1, [([0, 0], [0, 1])]) == [{(0, 0), (1, 0), (0, 1), (1, 1)}]


def test_a_word_is_read_through_another_only_where_no_run_gives_it_a_token():
    from types import SimpleNamespace as Side

    from bench.kftt_joined import readers_of

    # The gold pair: 3 Japanese words, 2 English. The ja→en run reads ja word 2 inside word 1's token; the
    # en→ja run (its source the gold's target) gives ja word 2 a token but reads en word 1 inside word 0's.
    ja_en = Side(source=Side(words=[0, 1, -1], readers=[0, 1, 1]), target=Side(words=[0, 1], readers=[0, 1]))
    en_ja = Side(source=Side(words=[0, 0], readers=[0, 0]), target=Side(words=[0, 1, 2], readers=[0, 1, 2]))
    assert readers_of([[ja_en]], [False]) == [([0, 1, 1], [0, 1])]
    assert readers_of([[en_ja]], [True]) == [([0, 1, 2], [0, 0])]
    assert readers_of([[ja_en], [en_ja]], [False, True]) == [([0, 1, 2], [0, 1])]


def test_the_kftt_table_shows_the_averaged_heads_after_the_symmetrised_rows():
    from bench.kftt_alignment import table

    best = {"argmax": {"layer": "layer 2", "head": 1, "precision": 0.5, "recall": 0.25, "aer": 0.6,
                       "chosen_aer": 0.55}}
    parts = {"choose": [1, 100], "report": [101, 582], "apart": True, "about": "chosen on 1–100"}
    run = {"best": {"shift_att": best}, "parts": parts,
           "diagonal": {"precision": 0.11, "recall": 0.1, "aer": 0.889}}
    averaged = {"method": "shift_att", "chosen": "argmax_grow_diag_final_and", "precision": 0.47,
                "recall": 0.42, "aer": 0.556, "chosen_aer": 0.643}
    rows = table({"ja→en": run}, {}, None, averaged)
    assert rows[5] == ("| both directions' supervised heads: shift_att | their word maps averaged, then "
                       "argmax_grow_diag_final_and | | 47.0% | 42.0% | 55.6 | 64.3 |")
    assert rows[6].startswith("| diagonal")
    assert table({"ja→en": run}, {}, None)[5].startswith("| diagonal")  # no averaged row without it


def test_a_seed_reaches_every_runs_model_and_batches_and_none_leaves_the_configs():
    from bench.kftt_alignment import RUNS, gold_files, train_command

    files = gold_files(Path("corpora"))
    seeded = train_command(files, Path("out"), RUNS[0], "00:01:30:00", 1.0, seed=2)
    assert seeded[-4:] == ["--seed_everything", "2", "--data.seed", "2"]
    plain = train_command(files, Path("out"), RUNS[0], "00:01:30:00", 1.0)
    assert "--seed_everything" not in plain and "--data.seed" not in plain
    assert seeded[:-4] == plain


def test_a_floor_drops_the_grow_diag_final_and_links_of_a_small_share_and_is_a_candidate():
    from bench.kftt_joined import choose_and_report, links_of

    # Target word 1 is unaligned in the gold; its row's arg-max (0.3 of it to source word 1) still links it.
    m = torch.tensor([[0.9, 0.1], [0.25, 0.3], [0.02, 0.08]])
    assert links_of([m], "argmax_grow_diag_final_and", 0.1) == [{(0, 0), (1, 1), (1, 2)}]
    assert links_of([m], "argmax_grow_diag_final_and", 0.1, floor=0.1) == [{(0, 0), (1, 1)}]
    assert links_of([m], "argmax_grow_diag_final_and", 0.1, floor=0.35) == [{(0, 0)}]
    signed = torch.tensor([[-0.2, -0.9], [-0.8, -0.1]])  # a gradient map: without a floor, each arg-max kept
    assert links_of([signed], "argmax", 0.1) == [{(0, 0), (1, 1)}]
    candidates = choose_and_report([m, m], [{(0, 0), (1, 1)}] * 2, [set(), set()], choose=1)["candidates"]
    assert candidates["argmax_grow_diag_final_and floor 0.1"]["aer"] == 0.0
    # the weak link's 0.08 is over a floor of 0.05: kept, as with no floor (2 + 2 right of 3 + 2)
    assert candidates["argmax_grow_diag_final_and floor 0.05"]["aer"] == pytest.approx(1 - 4 / 5)
    assert candidates["argmax_grow_diag_final_and"]["aer"] == pytest.approx(1 - 4 / 5)


# -- bench/kftt_ensemble.py: the pairs trained or reused, the set chosen where it is chosen ------------------


def test_ensemble_dry_run_trains_each_missing_pair_in_order_and_reuses_a_trained_one(tmp_path, capsys):
    from bench.kftt_alignment import RUNS, checkpoint_of
    from bench.kftt_ensemble import PAIRS, main

    for run in RUNS[0], RUNS[2]:  # the seed2 pair's two supervised runs are trained
        checkpoint_of(tmp_path / "seed2", run).parent.mkdir(parents=True)
        checkpoint_of(tmp_path / "seed2", run).touch()
    assert main(["--dry-run", "--out", str(tmp_path), "--pairs", "forward", "seed2", "causal"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"reusing the seed2 pair in {tmp_path / 'seed2'}"
    causal, forward = lines[0].split(), lines[2].split()  # PAIRS' order, whatever the order given
    assert causal[causal.index("--out") + 1] == str(tmp_path / "causal")
    assert forward[forward.index("--out") + 1] == str(tmp_path / "forward")
    for command, name in ((causal, "causal"), (forward, "forward")):
        assert command[1] == "bench/kftt_alignment.py"
        assert " ".join(PAIRS[name].options) in " ".join(command)
        assert command[command.index("--runs") + 1:command.index("--runs") + 3] == ["sup_ja_en", "sup_en_ja"]
    assert "grow-diag-final-and" in causal and "grow-diag-final-and" not in forward


def test_ensemble_trains_the_readme_rows_pairs_unless_others_are_asked_for(tmp_path, capsys):
    from bench.kftt_ensemble import README_PAIRS, main

    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    outs = [line.split()[line.split().index("--out") + 1] for line in capsys.readouterr().out.splitlines()]
    assert outs == [str(tmp_path / name) for name in README_PAIRS]
    assert main(["--dry-run", "--out", str(tmp_path), "--pairs", "stem4", "causal"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert f"--out {tmp_path / 'stem4'}" in last and "--label-stem 4 --label-iterations 4" in last
    assert main(["--dry-run", "--out", str(tmp_path), "--pairs", "layer3", "layer1", "stem4"]) == 0
    stem4, layer1, layer3 = capsys.readouterr().out.splitlines()  # in PAIRS' order
    assert "--alignment-layer" not in stem4 and f"--out {tmp_path / 'layer1'}" in layer1
    assert "--label-stem 4 --label-iterations 4 --alignment-layer 1" in layer1
    assert "--alignment-layer 3 --max-time 00:00:55:00" in layer3
    assert main(["--dry-run", "--out", str(tmp_path), "--pairs", "layer1_seed3", "layer1_seed2"]) == 0
    seed2, seed3 = capsys.readouterr().out.splitlines()
    assert "--alignment-layer 1 --seed 2 --max-time 00:01:20:00" in seed2
    assert f"--out {tmp_path / 'layer1_seed2'}" in seed2
    assert "--alignment-layer 1 --seed 3 --max-time 00:00:55:00" in seed3


DIRECTIONS = (("ja", "en"), ("en", "ja"))


def test_ensemble_copies_the_training_links_one_pair_made_to_the_next(tmp_path):
    from bench.kftt_alignment import Run, labels_file
    from bench.kftt_ensemble import share_labels

    made = [labels_file(tmp_path / "causal", Run(*sides, True)) for sides in (("ja", "en"), ("en", "ja"))]
    made[0].parent.mkdir(parents=True)
    made[0].write_text("1-1 2-2\n", encoding="utf-8"), made[1].write_text("1-1 2-2\n\n", encoding="utf-8")
    share_labels(tmp_path, "seed2")
    copied = labels_file(tmp_path / "seed2", Run("en", "ja", True))
    assert copied.read_text(encoding="utf-8") == "1-1 2-2\n\n"
    share_labels(tmp_path, "forward")  # trained on eflomal's forward links, made by the run: nothing copied
    assert not (tmp_path / "forward").exists()
    share_labels(tmp_path, "stem4")  # links made with other settings are not these: nothing copied
    assert not (tmp_path / "stem4").exists()
    stemmed = [labels_file(tmp_path / "seed3", Run(*sides, True), 4, 4) for sides in DIRECTIONS]
    stemmed[0].parent.mkdir(parents=True)
    stemmed[0].write_text("0-0\n", encoding="utf-8"), stemmed[1].write_text("0-0 1-1\n", encoding="utf-8")
    share_labels(tmp_path, "stem4")
    copied = labels_file(tmp_path / "stem4", Run("en", "ja", True), 4, 4)
    assert copied.read_text(encoding="utf-8") == "0-0 1-1\n"
    assert not labels_file(tmp_path / "stem4", Run("en", "ja", True)).exists()


def test_ensemble_picks_the_set_best_where_chosen_not_where_reported():
    from bench.kftt_ensemble import pick, table

    results = {"causal": {"chosen_aer": 0.60, "aer": 0.52},
               "causal+full_context": {"chosen_aer": 0.58, "aer": 0.51},
               "causal+full_context+null": {"chosen_aer": 0.59, "aer": 0.49},  # best reported: not picked
               "causal+full_context+null+seed2": {"chosen_aer": 0.58, "aer": 0.50}}  # a tie: the smaller set
    assert pick(results) == "causal+full_context"
    for name, r in results.items():
        r |= {"chosen": "mean argmax", "precision": 0.5, "recall": 0.45, "picked": name == pick(results)}
    rows = table(results, 100, 582)
    assert "pairs 1–100, reported on 101–582" in rows[0]
    assert rows[5] == "| **causal, full_context (4)** | mean argmax | 58.0 | 50.0% | 45.0% | **51.0** |"
    assert rows[6].startswith("| causal, full_context, null (6) |")


def test_ensemble_skips_cleanly_without_the_corpus(tmp_path, capsys):
    from bench.kftt_ensemble import main

    assert main(["--corpora", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith(f"skipped: the KFTT corpus is not in {tmp_path}")
    assert not (tmp_path / "out").exists()
