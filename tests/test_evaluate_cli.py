"""evaluate.py's command line: one subcommand per mode, each with only the options it uses (commands/),
scoring the default; an option of another subcommand is argparse's "unrecognized arguments", and the
spellings from before subcommands are refused in one line that names the new one."""

import pytest

import evaluate
from commands import explain, export, make_run, score, translate
from tests.conftest import last_json, run_evaluate


def refusal(capsys, *argv) -> str:
    """The last line evaluate.py prints when argparse refuses ``argv`` (exit status 2)."""
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, *argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv, runner",
    [
        (["x.ckpt"], score.run_score),  # the default
        (["x.ckpt", "--head-importance", "--prune-heads", "4", "--alignment", "--output", "o.jsonl",
          "--analysis-out", "a", "--test-split", "test2017", "--beam-size", "4", "--device", "cpu"],
         score.run_score),
        (["score", "x.ckpt", "--tsv", "t.tsv", "--quiet"], score.run_score),
        (["Helsinki-NLP/opus-mt-de-en", "--hf", "--tsv", "t.tsv"], score.run_score),
        (["score-ctranslate2", "x.ckpt", "--engine-model", "m", "--compute-type", "int8", "--tsv", "t.tsv",
          "--output", "o.jsonl", "--beam-size", "5", "--average-last", "2"], score.run_engine),
        (["translate", "x.ckpt", "a cat", "--attention-out", "maps", "--beam-size", "4", "--overwrite"],
         translate.run),
        (["translate", "opus-mt-de-en", "-", "--hf", "--device", "cpu"], translate.run),
        (["explain", "x.ckpt", "--split", "val", "--methods", "attention", "rollout", "--ig-steps", "8",
          "--alignment-sentences", "20", "--analysis-out", "a"], explain.run),
        (["explain", "x.ckpt", "--gold-alignments", "g", "--gold-sentences", "s", "t", "--gold-choose", "0",
          "--links-out", "l", "--gold-direction", "reversed", "--alignment-threshold", "0.3"], explain.run),
        (["export-ctranslate2", "x.ckpt", "dir", "--compute-type", "int8", "--average-last", "3"],
         export.run_ctranslate2),
        (["export-hf", "x.ckpt", "dir", "--beam-size", "4", "--max-len", "50", "--overwrite"], export.run_hf),
        (["make-run", "opus-mt-de-en", "dir", "--tsv", "t.tsv", "--quiet"], make_run.run),
        (["make-run", "opus-mt-de-en", "dir", "--gold-alignments", "g", "--gold-sentences", "s",
          "--alignment-sentences", "10"], make_run.run),
    ],
)
def test_each_subcommand_parses_its_documented_options(argv, runner):
    assert evaluate.parse_args(argv).run is runner


def test_the_default_spelling_scores_as_the_score_subcommand(tiny_run, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    code, plain, _ = run_evaluate(capsys, checkpoint, "--quiet")
    assert code == 0
    code, spelt, _ = run_evaluate(capsys, "score", checkpoint, "--quiet")
    assert code == 0
    keys = ("bleu", "chrf", "exact_match", "num_sentences", "data", "checkpoint", "engine")
    assert {k: last_json(plain)[k] for k in keys} == {k: last_json(spelt)[k] for k in keys}
    assert last_json(plain)["num_sentences"] == 40 and last_json(plain)["data"] == "test"


@pytest.mark.parametrize(
    "argv, unknown",
    [
        (["x.ckpt", "--ig-steps", "4"], "--ig-steps 4"),
        (["x.ckpt", "--compute-type", "int8"], "--compute-type int8"),
        (["x.ckpt", "--attention-out", "maps"], "--attention-out maps"),
        (["translate", "x.ckpt", "a cat", "--output", "o.jsonl"], "--output o.jsonl"),
        (["translate", "x.ckpt", "a cat", "--tsv", "t.tsv"], "--tsv t.tsv"),
        (["translate", "x.ckpt", "a cat", "--quiet"], "--quiet"),
        (["explain", "x.ckpt", "--output", "o.jsonl"], "--output o.jsonl"),
        (["explain", "x.ckpt", "--alignment"], "--alignment"),
        # explain reads the references teacher-forced: it decodes nothing
        (["explain", "x.ckpt", "--beam-size", "4"], "--beam-size 4"),
        (["explain", "x.ckpt", "--length-penalty", "1.0"], "--length-penalty 1.0"),
        # CTranslate2 returns no per-head attention, and runs on the CPU
        (["score-ctranslate2", "x.ckpt", "--head-importance"], "--head-importance"),
        (["score-ctranslate2", "x.ckpt", "--device", "cuda"], "--device cuda"),
        (["score-ctranslate2", "x.ckpt", "--hf"], "--hf"),
        (["score-ctranslate2", "x.ckpt", "--engine", "m"], "--engine m"),  # not short for --engine-model
        (["export-ctranslate2", "x.ckpt", "dir", "--alignment"], "--alignment"),
        # generate() batches what it is given, and divides by length ** penalty, not GNMT's rule
        (["export-hf", "x.ckpt", "dir", "--batch-size", "8"], "--batch-size 8"),
        (["export-hf", "x.ckpt", "dir", "--length-penalty", "1.0"], "--length-penalty 1.0"),
        (["export-hf", "x.ckpt", "dir", "--output", "o.jsonl"], "--output o.jsonl"),
        (["make-run", "m", "dir", "--tsv", "t.tsv", "--beam-size", "4"], "--beam-size 4"),
    ],
)
def test_an_option_of_another_subcommand_is_refused_by_argparse(capsys, argv, unknown):
    command = argv[0] if argv[0] != "x.ckpt" else "score"
    assert refusal(capsys, *argv) == f"evaluate.py {command}: error: unrecognized arguments: {unknown}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["x.ckpt", "--split", "val", "--test-split", "t"],
         "argument --test-split: not allowed with argument --split"),
        (["m", "--hf", "--average-last", "2", "--tsv", "t.tsv"],
         "argument --average-last: not allowed with argument --hf"),
        (["translate", "m", "x", "--hf", "--data-path", "d"],
         "argument --data-path: not allowed with argument --hf"),
        (["explain", "x.ckpt", "--gold-alignments", "g", "--gold-sentences", "s", "--tsv", "t.tsv"],
         "argument --tsv: not allowed with argument --gold-alignments"),
        (["make-run", "m", "dir"], "one of the arguments --tsv --gold-alignments is required"),
    ],
)
def test_options_that_exclude_each_other_are_one_of_a_group(capsys, argv, message):
    assert refusal(capsys, *argv).endswith(f"error: {message}")


@pytest.mark.parametrize(
    "argv, now",
    [
        (["x.ckpt", "--translate", "a cat"], "a subcommand: python evaluate.py translate MODEL TEXT"),
        (["x.ckpt", "--split", "val", "--alignment-methods"],
         "a subcommand: python evaluate.py explain MODEL [--methods METHOD ...]"),
        (["x.ckpt", "--gold-alignments", "g", "--gold-sentences", "s"],
         ("an option of explain: python evaluate.py explain MODEL --gold-alignments LINKS "
          "--gold-sentences FILE")),
        (["x.ckpt", "--engine", "ctranslate2"], "a subcommand: python evaluate.py score-ctranslate2 CKPT"),
        (["x.ckpt", "--export-ctranslate2", "dir"],
         "a subcommand: python evaluate.py export-ctranslate2 CKPT DIR"),
        (["x.ckpt", "--export-hf", "dir"], "a subcommand: python evaluate.py export-hf CKPT DIR"),
        (["--hf-model", "m", "--tsv", "t.tsv", "--make-run", "dir"],  # the first one named is refused
         "MODEL --hf: python evaluate.py NAME --hf --tsv FILE (translate NAME TEXT --hf, ...)"),
        (["--tsv", "t.tsv", "--make-run", "dir"],
         "a subcommand: python evaluate.py make-run MODEL DIR --tsv FILE"),
    ],
)
def test_a_spelling_from_before_subcommands_is_refused_naming_the_new_one(capsys, argv, now):
    old = next(word for word in argv if word in evaluate.MOVED)
    assert refusal(capsys, *argv) == f"evaluate.py score: error: {old} is now {now}"


def test_the_old_spellings_are_not_in_the_help(capsys):
    with pytest.raises(SystemExit):
        evaluate.parse_args(["score", "--help"])
    help_text = capsys.readouterr().out
    assert "--head-importance" in help_text
    assert not any(option in help_text for option in evaluate.MOVED)


def test_without_arguments_it_names_the_subcommands(capsys):
    line = refusal(capsys)
    assert line.startswith("evaluate.py: error: give a checkpoint to score, or one of the subcommands: ")
    names = "score, score-ctranslate2, translate, explain, export-ctranslate2, export-hf, make-run"
    assert line.endswith(names)
