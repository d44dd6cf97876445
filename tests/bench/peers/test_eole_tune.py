"""bench/peers/eole_tune.py, checked without eole: each variant's options and the changes its run records,
the tuning table and its pick, and which finished runs may join the table."""

import json

import pytest


def eole_result(variant: str, val_bleu: float, *, minutes: float = 60.0, changes: list[str] | None = None):
    from bench.peers.eole_tune import variant_changes

    tuned = variant_changes(variant) if changes is None else changes
    return {"recipe_changes": ["model: 3+3 layers", *tuned], "updates": 6400,
            "target_tokens_per_second": 1566, "learning_rates": [[300, 1e-3], [6400, 6.1e-8]],
            "val_bleu": val_bleu, "val_chrf": 50.0 + val_bleu, "test_split": "test2016", "chrf": 56.4,
            "bleu": val_bleu + 0.5, "budget_minutes": minutes, "train_minutes": 60.0}  # fmt: skip


def test_every_variant_is_a_run_of_the_baseline_that_records_its_changes(tmp_path):
    from bench.peers.eole_baseline import parse_args as baseline_args
    from bench.peers.eole_tune import VARIANTS, parse_args, variant_changes, variant_command

    assert variant_changes("base") == []
    assert variant_changes("biases") == ["tuned: biases True (first hour: False)"]
    assert variant_changes("beta0.98") == ["tuned: adam beta2 0.98 (first hour: 0.998)"]
    assert variant_changes("biases+beta0.98") == variant_changes("beta0.98") + variant_changes("biases")
    args = parse_args(["tune", "--out", str(tmp_path), "--corpora", str(tmp_path), "--minutes", "5"])
    for name in VARIANTS:
        command = variant_command(args, name)
        assert command[1].endswith("bench/peers/eole_baseline.py")
        run = baseline_args(command[2:])  # every variant's command is one the baseline accepts
        assert (run.minutes, run.threads, run.out, run.data) == (5, 1, tmp_path / "tune" / name,
                                                                  tmp_path / "multi30k")  # fmt: skip
    assert baseline_args(variant_command(args, "lr2e-3")[2:]).lr == 2e-3
    assert baseline_args(variant_command(args, "dropout0.1")[2:]).dropout == 0.1


def test_tuning_table_ranks_on_val_and_gives_only_the_picks_test_score():
    from bench.peers.eole_tune import tuning_rows, tuning_table

    rows = tuning_rows({"biases": eole_result("biases", 38.0), "beta0.98": eole_result("beta0.98", 38.4),
                        "base": eole_result("base", 37.2)})  # fmt: skip
    assert [r["variant"] for r in rows] == ["beta0.98", "biases", "base"]
    lines = tuning_table(rows)
    assert lines[2] == ("| **beta0.98** (pick) | adam beta2 0.98 (first hour: 0.998) | 6400 | 1,566 | "
                        "6.1e-08 | 38.4 | 88.4 |")
    assert lines[3].startswith("| biases | biases True (first hour: False) |")
    assert lines[4].startswith("| base | nothing | 6400 |")
    assert lines[-1] == "the pick, beta0.98, on test2016 (beam 5, the same weights): BLEU 38.9, chrF 56.4"
    assert sum("38.5" in line for line in lines) == 0  # the biases run's test2016 is not shown
    with pytest.raises(ValueError, match="no tuning results"):
        tuning_table([])


def test_table_takes_only_runs_of_the_budget_whose_changes_are_their_variants(tmp_path, capsys):
    from bench.peers.eole_tune import main

    def put(name, result):
        (tmp_path / "tune" / name).mkdir(parents=True)
        (tmp_path / "tune" / name / "result.json").write_text(json.dumps(result))

    with pytest.raises(SystemExit, match="no finished 60-minute run in .*tune: run the tune step first"):
        main(["table", "--out", str(tmp_path)])
    put("biases", eole_result("biases", 38.0))
    put("base", eole_result("base", 39.0, minutes=3.0))  # a smoke run
    put("lr2e-3", eole_result("lr2e-3", 40.0, changes=["tuned: dropout 0.1 (first hour: 0.15)"]))  # renamed
    put("dropout0.1", eole_result("dropout0.1", 37.0))
    main(["table", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"left out {tmp_path / 'tune' / 'base' / 'result.json'}: a budget of 3.0 min, not 60" in out
    assert "tune/lr2e-3/result.json: its recorded changes are not those of the variant lr2e-3" in out
    rows = json.loads((tmp_path / "tuning.json").read_text())
    assert [r["variant"] for r in rows] == ["biases", "dropout0.1"]
    assert (tmp_path / "tuning.md").read_text().splitlines()[2].startswith("| **biases** (pick) |")


def test_tune_skips_without_the_corpus_and_checks_its_budget(tmp_path, capsys):
    from bench.peers.eole_tune import main, parse_args

    main(["tune", "--corpora", str(tmp_path), "--out", str(tmp_path / "out")])
    assert capsys.readouterr().out == f"skipped: no Multi30k in {tmp_path / 'multi30k'} (pass --corpora)\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        parse_args(["tune", "--minutes", "0"])
    assert "--minutes must be a whole number of minutes from 1 to 1439, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["tune", "--variants", "b1024"])
