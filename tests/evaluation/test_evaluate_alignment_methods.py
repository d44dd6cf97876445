"""evaluate.py explain on a checkpoint trained inside the tests: the table, its agreement with the per-head
alignment analysis, the files, and option errors."""

import pytest
import torch

from evaluation.alignment import cross_attention_alignment
from tests.conftest import last_json, run_evaluate
from training.checkpoints import load_run


def test_alignment_methods_table_files_and_agreement_with_the_head_analysis(tiny_run, tmp_path, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    out_dir = tmp_path / "analysis"
    code, out, err = run_evaluate(
        capsys, "explain", checkpoint, "--split", "val", "--methods", "attention", "shift_att",
        "grad_x_input", "--alignment-sentences", "6", "--analysis-out", out_dir,
    )
    assert code == 0, err
    result = last_json(out)
    assert result["sentences"] == 6
    rows = {(row["method"], row["layer"]): row for row in result["table"]}
    assert set(rows) == {("attention", "layer 1"), ("attention", "layer 2"), ("shift_att", "layer 1"),
                         ("shift_att", "layer 2"), ("grad_x_input", "embeddings")}
    for row in rows.values():
        assert 0.0 <= row["aer"] <= 1.0 and 0.0 <= row["agreement"] <= 1.0
    assert "method" in out and "AER" in out  # the human-readable table before the JSON

    # Raw attention per head is what the head analysis (evaluation.alignment) measures, by another path.
    run = load_run(checkpoint)
    pairs = run.datamodule.pairs("val")[:6]
    heads = cross_attention_alignment(run.module.model, run.datamodule.src_tokenizer,
                                      run.datamodule.tgt_tokenizer, pairs)
    assert torch.allclose(torch.tensor(result["heads"]["attention"]["aer"]), heads.aer, atol=1e-6)
    assert "grad_x_input" not in result["heads"]  # no heads: no per-head scores

    names = {p.name for p in out_dir.iterdir()}
    for expected in ("alignment_methods_val.json", "alignment_methods_val_aer.png",
                     "alignment_methods_val_heads_attention.png", "alignment_methods_val_sentence1.png",
                     "alignment_methods_val_sentence1_lens.png", "alignment_methods_val_sentence1_lens.json"):
        assert expected in names
    assert f"wrote {out_dir / 'alignment_methods_val.json'} and {len(names) - 1} other files" in err
    # Written once; a second run without --overwrite refuses to replace it.
    code, _, err = run_evaluate(capsys, "explain", checkpoint, "--split", "val", "--methods", "attention",
                                "--alignment-sentences", "2", "--analysis-out", out_dir)
    assert code == 1 and "exists" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--methods", "saliency"], "argument --methods: invalid choice: 'saliency'"),
        (["--ig-steps", "0"], "argument --ig-steps: must be at least 1, got 0"),
        # Captum's Gauss-Legendre table grows as steps squared: 100000 steps asked numpy for 74.5 GiB.
        (["--ig-steps", "100000"], "argument --ig-steps: must be at most 32, got 100000"),
        (["--alignment-sentences", "0"], "argument --alignment-sentences: must be at least 1"),
        # The options of other subcommands are not explain's.
        (["--translate", "a cat"], "error: unrecognized arguments: --translate a cat"),
        (["--alignment"], "error: unrecognized arguments: --alignment"),
    ],
)
def test_alignment_method_option_errors(tiny_run, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        run_evaluate(capsys, "explain", tiny_run / "checkpoints" / "last.ckpt", *extra)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_data_without_gold_alignments_is_a_one_line_error(tiny_run, tmp_path, capsys):
    tsv = tmp_path / "plain.tsv"
    tsv.write_text("the cat saw a dog\tlo kato vida un hundo\n", encoding="utf-8")
    code, _, err = run_evaluate(capsys, "explain", tiny_run / "checkpoints" / "last.ckpt", "--tsv", tsv,
                                "--analysis-out", tmp_path / "a")
    assert code == 1
    expected = ("error: explain needs data with gold word alignments (toy, copy, reverse); for other pairs, "
                "give a gold set: --gold-alignments LINKS --gold-sentences FILE")
    assert err.strip() == expected


def test_one_token_per_word_is_checked_on_the_words_a_pair_lists():
    # The Han-script toy writes its target without spaces: its words are the pair's target_words, and a
    # word of two characters is two tokens, which the message counts as such (not as one spaceless "word").
    from data.tokenizer import Tokenizer
    from data.toy import make_toy_splits
    from evaluation.ablation import AnalysisError
    from evaluation.alignment import check_alignable

    pairs = make_toy_splits(train_size=50, val_size=0, test_size=0, script="han")["train"]
    src = Tokenizer.train([p.source for p in pairs])
    tgt = Tokenizer.train([p.target for p in pairs], kind="bpe", pre_tokenize="cjk", normalization="nfc")
    first = pairs[0]
    assert len(first.target) > len(first.target_words)
    words, tokens = len(first.target_words), len(tgt.encode(first.target))
    with pytest.raises(AnalysisError, match=f"target sentence 1 has {words} words and {tokens} tokens"):
        check_alignable(pairs, src, tgt)


@pytest.fixture(scope="module")
def han_run(tmp_path_factory):
    """A tiny run on the Han-script toy: its target words are one or two characters, a piece each."""
    from tests.conftest import train_tiny

    return train_tiny(tmp_path_factory.mktemp("han"), "--data.toy.script", "han", "--data.tokenizer", "bpe",
                      "--data.vocab_size", "300")


def test_the_han_script_toy_is_scored_on_its_words_in_training_and_by_evaluate(han_run, tmp_path, capsys):
    from tests.conftest import read_events

    tags = read_events(han_run).Tags()["scalars"]
    logged = {tag for tag in tags if tag.startswith("explain/") and tag.endswith("/best_aer")}
    assert {"explain/attention/best_aer", "explain/grad_x_input/best_aer"} <= logged
    code, out, err = run_evaluate(
        capsys, "explain", han_run / "checkpoints" / "last.ckpt", "--split", "val", "--methods", "attention",
        "value_norms", "--alignment-sentences", "12", "--analysis-out", tmp_path,
    )
    assert code == 0, err
    result = last_json(out)
    assert result["direction"] == "the data's own" and result["sentences"] == 12
    run = load_run(han_run / "checkpoints" / "last.ckpt")
    pairs = run.datamodule.pairs("val")[:12]
    assert result["sure_links"] == sum(len(p.alignment) for p in pairs)  # word links, not token cells
    for method in ("attention", "value_norms"):
        best = result["best"][method]["argmax"]
        assert 0.0 <= best["aer"] <= 1.0 and best["layer"].startswith("layer ")
    assert (tmp_path / "alignment_methods_val.json").is_file()  # as the Latin toy's are named
    assert not list(tmp_path.glob("gold_*"))
