"""evaluate.py explain CKPT --gold-alignments LINKS --gold-sentences SENTENCES: every explanation method
scored on a handmade gold set's words, with a model whose BPE tokenizer splits them into pieces."""

import json
import logging

import pytest

from analysis.aer import score_links
from data.gold import parse_links, read_gold, read_gold_for
from tests.conftest import GOLD, last_json, run_evaluate, train_chinese
from training.checkpoints import load_run
from viz.run_writer import write_run

# English to Chinese, segmented into words; links 1-based: the third pair has one past its end.


def reversed_line(line: str) -> str:
    source, target = line.split(" ||| ")
    return f"{target} ||| {source}"


def reversed_links(line: str) -> str:
    return " ".join(link[::-1] if "-" in link else "p".join(link.split("p")[::-1]) for link in line.split())


@pytest.fixture(scope="module")
def gold_run(tmp_path_factory):
    """A one-epoch English → Chinese run (BPE, 120 pieces) and its gold set, named both ways round."""
    folder = tmp_path_factory.mktemp("gold")
    run = train_chinese(folder)
    files = {}
    for name, sentences, links in (("en-zh", GOLD["sentences"], GOLD["links"]),
                                   ("zh-en", map(reversed_line, GOLD["sentences"]),
                                    map(reversed_links, GOLD["links"]))):
        files[name] = (folder / f"{name}.src-tgt", folder / f"{name}.gold")
        files[name][0].write_text("\n".join(sentences) + "\n", encoding="utf-8")
        files[name][1].write_text("\n".join(links) + "\n", encoding="utf-8")
    return run / "checkpoints" / "last.ckpt", files


def test_every_method_is_scored_on_the_gold_words_and_drawn(gold_run, tmp_path, capsys):
    checkpoint, files = gold_run
    sentences, links = files["en-zh"]
    out = tmp_path / "analysis"
    code, stdout, err = run_evaluate(capsys, "explain", checkpoint, "--gold-alignments", links,
                                     "--gold-sentences", sentences, "--ig-steps", "4", "--analysis-out", out)
    assert code == 0, err
    assert ("gold alignments: 3 sentence pairs, 15 sure and 1 possible links; dropped 1 past the end of "
            "their sentence (lines 3); direction forward: en-zh.gold is en-zh") in err
    result = last_json(stdout)
    assert result["sentences"] == 3 and result["dropped_links"] == 1 and result["sure_links"] == 15
    assert set(result["best"]) == {"attention", "shift_att", "value_norms", "rollout", "grad_x_input",
                                   "integrated_gradients"}
    for method in result["best"].values():
        assert len(method) == 7  # every extraction
        for best in method.values():
            assert 0.0 <= best["aer"] <= 1.0 and best["layer"] in ("layer 1", "layer 2", "embeddings")
    assert "maps chosen and reported on the same gold pairs 1–3 (3): no pairs held out" in stdout
    assert "AER by extraction, each its own chosen map" in stdout
    stored = json.loads((out / "gold_en-zh.json").read_text(encoding="utf-8"))
    attention = stored["scores"]["attention"]
    assert len(attention["per_layer"]["argmax"]["aer"]) == 2
    assert [len(row) for row in attention["per_head"]["threshold_both"]["recall"]] == [2, 2]
    names = {p.name for p in out.iterdir()}
    for suffix in (".json", "_aer.png", "_agreement.png", "_extractions.png", "_heads_attention.png",
                   "_sentence1.png", "_sentence1_lens.png", "_sentence1_lens.json", "_sentence3.png"):
        assert f"gold_en-zh{suffix}" in names

    # The same gold written the other way round, for a model that translates the other way: swapped back.
    sentences, links = files["zh-en"]
    code, stdout, err = run_evaluate(capsys, "explain", checkpoint, "--gold-alignments", links,
                                     "--gold-sentences", sentences, "--methods", "attention",
                                     "--analysis-out", out)
    assert code == 0, err
    assert "direction reversed: zh-en.gold is zh-en and the model translates en to zh" in err
    assert last_json(stdout)["best"]["attention"] == result["best"]["attention"]


@pytest.mark.parametrize("name", ["en-zh", "zh-en"])
def test_maps_chosen_on_the_first_pairs_are_reported_on_the_others_and_their_links_score_alike(
    gold_run, tmp_path, capsys, name
):
    """--gold-choose 1: each method's map (layer, head, extraction) is the lowest AER on pair 1, and its
    figures are those of pairs 2-3. --links-out writes each chosen map's links and the diagonal's, 1-based
    and in the gold file's direction (zh-en: swapped back from the model's en-zh); read back as any scorer
    would and scored by analysis.aer, they give the printed figures."""
    checkpoint, files = gold_run
    sentences, links = files[name]
    out = tmp_path / "links"
    code, stdout, err = run_evaluate(capsys, "explain", checkpoint, "--gold-alignments", links,
                                     "--gold-sentences", sentences, "--methods", "attention", "value_norms",
                                     "--gold-choose", "1", "--links-out", out,
                                     "--analysis-out", tmp_path / "a")
    assert code == 0, err
    result = last_json(stdout)
    about = "chosen on gold pairs 1–1, reported on pairs 2–3 (2)"
    assert result["parts"] == {"choose": [1, 1], "report": [2, 3], "apart": True, "about": about}
    assert f"maps {about}" in stdout and "diagonal (baseline)" in stdout
    stored = json.loads((tmp_path / "a" / f"gold_{name}.json").read_text(encoding="utf-8"))
    for method in ("attention", "value_norms"):
        chosen, choosing = result["chosen"][method], stored["choosing_scores"][method]
        candidates = [aer for extraction in choosing["per_layer"]
                      for aer in [*choosing["per_layer"][extraction]["aer"],
                                  *(a for row in choosing["per_head"][extraction]["aer"] for a in row)]]
        assert chosen["chosen_aer"] == min(candidates)
        assert result["best"][method][chosen["extraction"]] == chosen
    gold = read_gold(sentences, links, one_based=True)
    for method in ("attention", "value_norms", "diagonal"):
        lines = (out / f"{method}.links").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 3
        found = [parse_links(line, one_based=True)[0] for line in lines]
        score = score_links(found[1:], gold.sure()[1:], gold.possible()[1:])
        expected = result["diagonal"] if method == "diagonal" else result["chosen"][method]
        assert (score.precision, score.recall, score.aer) == pytest.approx(
            (expected["precision"], expected["recall"], expected["aer"]))
    for method in ("attention", "value_norms"):  # the map chosen under the forward arg-max, for symmetrising
        lines = (out / f"{method}.argmax.links").read_text(encoding="utf-8").splitlines()
        found = [parse_links(line, one_based=True)[0] for line in lines]
        score = score_links(found[1:], gold.sure()[1:], gold.possible()[1:])
        expected = result["best"][method]["argmax"]
        assert (score.precision, score.recall, score.aer) == pytest.approx(
            (expected["precision"], expected["recall"], expected["aer"]))


def test_two_sentence_files_zero_based_links_and_the_first_pairs(gold_run, tmp_path, capsys):
    checkpoint, _ = gold_run
    source, target, links = tmp_path / "en.txt", tmp_path / "zh.txt", tmp_path / "links.txt"
    source.write_text("He sees a big dog .\nI like teapots .\n", encoding="utf-8")
    target.write_text("他 看见 一只 大 狗 。\n我 喜欢 茶壶 。\n", encoding="utf-8")
    links.write_text("0-0 1-1 2-2\n0-0 1-1\n", encoding="utf-8")
    code, stdout, err = run_evaluate(
        capsys, "explain", checkpoint, "--gold-alignments", links, "--gold-sentences", source, target,
        "--gold-zero-based", "--alignment-sentences", "1", "--methods", "attention",
        "--gold-direction", "forward", "--alignment-threshold", "0.3", "--analysis-out", tmp_path / "a",
    )
    assert code == 0, err
    result = last_json(stdout)
    assert result["sentences"] == 1 and result["sure_links"] == 3 and result["options"]["threshold"] == 0.3
    assert "direction forward, as asked" in err


def test_a_run_made_from_a_gold_set_says_nothing_more_of_its_direction(gold_run, tmp_path, caplog):
    """evaluate.py make-run reads the gold set and says in which direction it is read; the run it writes
    reads the set again, already in the model's direction, and must not add a line of its own ("forward, as
    asked", though nothing was asked)."""
    checkpoint, files = gold_run
    sentences, links = files["zh-en"]
    gold, why = read_gold_for(sentences, links, "en", "zh", one_based=True)
    assert why.startswith("reversed: zh-en.gold is zh-en")
    with caplog.at_level(logging.INFO):
        write_run(load_run(checkpoint), gold.pairs, tmp_path / "made", gold=gold, quiet=True)
    assert [r.getMessage() for r in caplog.records if "direction" in r.getMessage()] == []


@pytest.mark.parametrize(
    "lines, error",
    [
        ("1-1\n2x2\n1-1\n", "{links}:2: link '2x2' is not i-j (sure), ipj or i?j (possible)"),
        # Every link past its sentence's end: nothing to score against (training refuses it alike,
        # test_gold_logging).
        ("9-9\n9-9 8p8\n9-9\n", "{links}: the 3 pairs scored have no sure gold link to score against"),
    ],
)
def test_bad_links_are_one_line_naming_the_file(gold_run, tmp_path, capsys, lines, error):
    checkpoint, files = gold_run
    links = tmp_path / "en-zh.gold"
    links.write_text(lines, encoding="utf-8")
    code, _, err = run_evaluate(capsys, "explain", checkpoint, "--gold-alignments", links,
                                "--gold-sentences", files["en-zh"][0], "--analysis-out", tmp_path / "a")
    assert code == 1
    assert err.strip().splitlines()[-1] == "error: " + error.format(links=links)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--gold-alignments", "g.gold"], "--gold-alignments needs --gold-sentences FILE"),
        (["--gold-alignments", "g", "--gold-sentences", "a", "b", "c"], "--gold-alignments needs"),
        (["--gold-sentences", "s.txt"], "--gold-sentences needs --gold-alignments"),
        (["--gold-zero-based"], "--gold-zero-based needs --gold-alignments"),
        (["--split", "val", "--gold-choose", "0"], "--gold-choose needs --gold-alignments"),
        (["--links-out", "l"], "--links-out needs --gold-alignments"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--output", "o.jsonl"],
         "unrecognized arguments: --output o.jsonl"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--tsv", "t.tsv"],
         "argument --tsv: not allowed with argument --gold-alignments"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--test-split", "t"],
         "argument --test-split: not allowed with argument --gold-alignments"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--alignment-threshold", "1.5"],
         "argument --alignment-threshold: must be in (0, 1], got 1.5"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--gold-direction", "up"],
         "argument --gold-direction: invalid choice: 'up'"),
        # explain reads the reference translations teacher-forced: it decodes nothing
        (["--gold-alignments", "g", "--gold-sentences", "s", "--beam-size", "4"],
         "unrecognized arguments: --beam-size 4"),
        (["--gold-alignments", "g", "--gold-sentences", "s", "--max-len", "20"],
         "unrecognized arguments: --max-len 20"),
        (["--length-penalty", "1.0"], "unrecognized arguments: --length-penalty 1.0"),
    ],
)
def test_gold_option_errors(tmp_path, capsys, options, message):
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, "explain", tmp_path / "any.ckpt", *options)
    assert stopped.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]
