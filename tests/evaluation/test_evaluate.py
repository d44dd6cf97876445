"""evaluate.py on checkpoints trained inside the tests: scores, decoding, averaging, attention export,
errors."""

import json
import os
from pathlib import Path

import pytest
import torch

from analysis.axes import attention_axes
from data.batching import collate
from data.tokenizer import Tokenizer
from evaluation.loading import average_state_dicts, last_checkpoints
from evaluation.translate import translate
from model import Transformer
from model.decoding import beam_search
from tests.conftest import (
    BOS,
    EOS,
    larger_tokenizer,
    last_json,
    run_evaluate,
    short_tsv_corpus,
    tiny_config,
    train_tiny,
)
from tests.helpers.head_view import HeadViewParser
from training.checkpoints import CheckpointError, load_run
from viz import export as attention_export
from viz.export import export_attention

JSON_KEYS = {"bleu": float, "chrf": float, "exact_match": float, "num_sentences": int, "beam_size": int,
             "signature": str, "sentences_per_second": float}


@pytest.fixture(scope="session")
def overfit_run(tmp_path_factory):
    """A tiny model trained until it has memorised its 24 training pairs (about half a minute on a CPU)."""
    return train_tiny(
        tmp_path_factory.mktemp("overfit"),
        "--data.toy.train_size", "24", "--trainer.max_epochs", "200",
        "--trainer.check_val_every_n_epoch", "200",
        "--model.d_model", "64", "--model.d_ff", "128", "--model.dropout", "0.0",
        "--model.label_smoothing", "0.0",
        "--model.lr", "0.003", "--model.warmup_steps", "20", "--attention.every_n_epochs", "0",
        "--trainer.log_every_n_steps", "50", "--recent.save_top_k", "1",
    )


def test_json_summary_keys_and_types(tiny_run, capsys):
    code, out, _ = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--quiet")
    assert code == 0
    result = last_json(out)
    for key, kind in JSON_KEYS.items():
        assert isinstance(result[key], kind), key
    assert result["num_sentences"] == 40  # the tiny config's test split
    assert result["signature"].startswith("nrefs:1|")
    assert "BLEU" in out and "chrF" in out


def test_split_and_output_file(tiny_run, tmp_path, capsys):
    output = tmp_path / "val.jsonl"
    code, out, _ = run_evaluate(
        capsys, tiny_run / "checkpoints" / "last.ckpt", "--split", "val", "--output", output, "--quiet"
    )
    assert code == 0
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == last_json(out)["num_sentences"] == 40
    assert set(lines[0]) == {"source", "reference", "hypothesis", "chrf"}


@pytest.mark.slow
def test_overfitted_model_scores_perfectly_on_its_training_pairs(overfit_run, tmp_path, capsys):
    checkpoint = overfit_run / "checkpoints" / "last.ckpt"
    pairs = load_run(checkpoint).datamodule.pairs("train")
    tsv = tmp_path / "train.tsv"
    tsv.write_text("".join(f"{p.source}\t{p.target}\n" for p in pairs), encoding="utf-8")
    for beam in (1, 3):
        code, out, _ = run_evaluate(capsys, checkpoint, "--tsv", tsv, "--beam-size", beam, "--quiet")
        assert code == 0
        result = last_json(out)
        assert result["exact_match"] == 1.0 and result["bleu"] == pytest.approx(100.0)
        assert result["num_sentences"] == 24 and result["beam_size"] == beam


def test_beam_of_one_is_greedy(tiny_run, tmp_path, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    output = tmp_path / "greedy.jsonl"
    assert run_evaluate(capsys, checkpoint, "--beam-size", "1", "--output", output, "--quiet")[0] == 0
    hypotheses = [json.loads(line)["hypothesis"] for line in output.read_text().splitlines()]

    loaded = load_run(checkpoint)
    dm, model = loaded.datamodule, loaded.module.model
    sources = [p.source for p in dm.pairs("test")]
    expected = []
    for source in sources:  # the beam-search code path with one beam, sentence by sentence
        src = torch.tensor([dm.src_tokenizer.encode(source) + [dm.eos_id]])
        tokens = beam_search(model, src, 2 * src.size(1) + 10, beam_size=1, length_penalty=0.0)[0].tolist()
        expected.append(dm.tgt_tokenizer.decode(tokens))
    assert hypotheses == expected


def test_average_last_equals_the_manual_average(tiny_run, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    paths = last_checkpoints(checkpoint, 2)
    states = [torch.load(p, map_location="cpu", weights_only=True) for p in paths]
    assert states[0]["global_step"] > states[1]["global_step"]
    averaged = average_state_dicts(paths)
    for name, value in states[0]["state_dict"].items():
        torch.testing.assert_close(averaged[name], (value + states[1]["state_dict"][name]) / 2)
    model = load_run(checkpoint, state_dict=averaged).module
    torch.testing.assert_close(
        model.state_dict()["model.src_embed.weight"], averaged["model.src_embed.weight"]
    )
    code, out, err = run_evaluate(capsys, checkpoint, "--average-last", "2", "--quiet")
    assert code == 0 and last_json(out)["averaged_checkpoints"] == 2
    assert "averaging 2 checkpoints" in err


def fake_checkpoint(path, step, weight):
    """A file with just the keys ``read_checkpoint`` requires, holding one weight matrix."""
    torch.save(
        {"state_dict": {"w": weight}, "hyper_parameters": {}, "datamodule_hyper_parameters": {},
         "TranslationDataModule": {}, "global_step": step},
        path,
    )
    return path


def test_average_of_k_checkpoints_is_their_elementwise_mean(tmp_path):
    paths = [fake_checkpoint(tmp_path / f"{v}.ckpt", v, torch.tensor([[v, -2 * v]])) for v in (1.0, 2.0, 6.0)]
    averaged = average_state_dicts(paths)
    assert averaged["w"].tolist() == [[3.0, -6.0]] and averaged["w"].dtype == torch.float32


def test_last_checkpoints_are_the_k_highest_distinct_steps_and_never_fewer(tmp_path):
    fake_checkpoint(tmp_path / "epoch0-step10.ckpt", 10, torch.zeros(1))
    fake_checkpoint(tmp_path / "epoch1-step20.ckpt", 20, torch.ones(1))
    last = fake_checkpoint(tmp_path / "last.ckpt", 20, torch.ones(1))  # the same step as epoch 1
    assert last_checkpoints(last, 2) == [tmp_path / "epoch1-step20.ckpt", tmp_path / "epoch0-step10.ckpt"]
    with pytest.raises(CheckpointError, match="--average-last 3: .* only 2 different steps"):
        last_checkpoints(last, 3)


def test_translate_writes_attention_pngs_and_a_head_view(tiny_run, tmp_path, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    out_dir = tmp_path / "maps"
    sentence = load_run(checkpoint).datamodule.pairs("test")[0].source
    code, out, _ = run_evaluate(capsys, "translate", checkpoint, sentence, "--attention-out", out_dir)
    assert code == 0 and out.count("\n") == 1  # one translation, possibly empty for this barely trained model
    folder = out_dir / "sentence_1"
    pngs = sorted(folder.glob("*.png"))
    assert len(pngs) == 2 * 2 * 3  # layers x heads x (encoder, decoder, cross)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    html = (folder / "head_view.html").read_text(encoding="utf-8")
    parser = HeadViewParser()
    parser.feed(html)
    assert "html" in parser.tags and parser.scripts
    data = json.loads(parser.scripts[0])
    assert all(word in json.dumps(data) for word in sentence.split())
    # Refuses to overwrite what it wrote, unless asked.
    code, _, err = run_evaluate(capsys, "translate", checkpoint, sentence, "--attention-out", out_dir)
    assert code == 1 and "exists" in err
    assert run_evaluate(
        capsys, "translate", checkpoint, sentence, "--attention-out", out_dir, "--overwrite"
    )[0] == 0


def test_translate_from_stdin(tiny_run, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("the dog saw a cat\nevery queen walked\n"))
    code, out, _ = run_evaluate(capsys, "translate", tiny_run / "checkpoints" / "last.ckpt", "-")
    assert code == 0 and out.count("\n") == 2  # one line per input line


def test_ctrl_c_while_reading_stdin_ends_in_one_line_and_status_130(tiny_run, capsys, monkeypatch):
    """It ended in a KeyboardInterrupt traceback."""
    import io

    class Waiting(io.RawIOBase):  # a terminal nobody has typed into: Ctrl-C arrives while it is read
        def readable(self):
            return True

        def readinto(self, buffer):
            raise KeyboardInterrupt

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(Waiting())))
    code, out, err = run_evaluate(capsys, "translate", tiny_run / "checkpoints" / "last.ckpt", "-")
    assert (code, out, err) == (130, "", "Interrupted.\n")


@pytest.mark.parametrize(
    "text, stdin, message",
    [
        ("", None, "translate: the sentence is empty"),
        ("  \t ", None, "translate: the sentence is empty"),
        ("-", "the dog saw a cat\n\nevery queen walked\n", "translate -: stdin line 2 is empty"),
        ("-", "the dog saw a cat\n   \n", "translate -: stdin line 2 is empty"),
        ("-", "", "translate -: stdin holds no sentence"),
    ],
)
def test_translate_refuses_an_empty_sentence(tiny_run, capsys, monkeypatch, text, stdin, message):
    import io

    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code, out, err = run_evaluate(capsys, "translate", tiny_run / "checkpoints" / "last.ckpt", text)
    assert code != 0
    assert out == ""  # nothing translated, not even the other lines
    (line,) = err.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"error: {message}")


def test_translate_matches_generate(tiny_run):
    loaded = load_run(tiny_run / "checkpoints" / "last.ckpt")
    dm, model = loaded.datamodule, loaded.module.model
    sources = [p.source for p in dm.pairs("test")[:5]]
    batched = translate(model, dm.src_tokenizer, dm.tgt_tokenizer, sources, batch_size=2)
    for source, ids in zip(sources, batched):
        src = torch.tensor([dm.src_tokenizer.encode(source) + [dm.eos_id]])
        alone = [t for t in model.generate(src)[0].tolist() if t not in (dm.pad_id, dm.eos_id)]
        assert ids == alone


def test_bad_inputs_give_one_line_errors(tiny_run, tmp_path, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(checkpoint.read_bytes()[:5000])
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("a b\tc d\nno tab here\n", encoding="utf-8")
    existing = tmp_path / "exists.jsonl"
    existing.write_text("keep me\n")
    cases = [
        ([tmp_path / "missing.ckpt"], "missing.ckpt: no such checkpoint file"),
        ([garbage], "garbage.ckpt: not a checkpoint"),
        ([truncated], "truncated.ckpt: not a checkpoint"),
        ([foreign], "foreign.ckpt: not a checkpoint of train.py"),
        ([checkpoint, "--tsv", bad_tsv], "bad.tsv:2"),
        ([checkpoint, "--tsv", tmp_path / "nope.tsv"], "nope.tsv"),
        ([checkpoint, "--output", existing], "exists.jsonl exists"),
    ]
    for args, message in cases:
        code, _, err = run_evaluate(capsys, *args, "--quiet")
        assert code == 1, args
        assert message in err, (message, err)
        assert len(err.strip().splitlines()) == 1, err
    assert existing.read_text() == "keep me\n"


@pytest.fixture
def drawn(monkeypatch):
    """Title -> (weights, row tokens, column tokens) of every heatmap the attention export draws."""
    drawn = {}
    draw = attention_export.attention_heatmap

    def recording(weights, rows, cols, title):
        drawn[title] = (weights, rows, cols)
        return draw(weights, rows, cols, title)

    monkeypatch.setattr(attention_export, "attention_heatmap", recording)
    return drawn


def test_exported_attention_is_teacher_forced_on_the_hypothesis(tmp_path, drawn):
    src_tok, tgt_tok = Tokenizer.train(["a b c"]), Tokenizer.train(["x y z"])
    torch.manual_seed(0)
    model = Transformer(tiny_config(
        src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size, num_heads=2,
        num_encoder_layers=1, num_decoder_layers=1,
    )).eval()
    hypothesis = tgt_tok.encode("z x")
    written = export_attention(model, src_tok, tgt_tok, "b a", hypothesis, tmp_path)
    assert len(written) == 3 * 2 + 1

    batch = collate([(0, src_tok.encode("b a"), hypothesis)])
    with torch.no_grad():
        _, maps = model(batch.src, batch.tgt_in, return_attention=True)
    source, target_in, target_out = ["b", "a", "</s>"], ["<s>", "z", "x"], ["z", "x", "</s>"]
    axes = attention_axes(source, target_in, target_out)
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        for head in (1, 2):
            weights, rows, cols = drawn[f"{kind} layer 1 head {head}"]
            assert (rows, cols) == axes[kind]
            torch.testing.assert_close(weights, layers[0][0, head - 1])
    parser = HeadViewParser()
    parser.feed((tmp_path / "head_view.html").read_text(encoding="utf-8"))
    data = json.loads(parser.scripts[0])
    assert (data["source"], data["target"]) == (source, target_out)  # the generated tokens
    for kind in ("encoder", "decoder", "cross"):  # labelled as the PNGs are
        assert (data["kinds"][kind]["queries"], data["kinds"][kind]["keys"]) == axes[kind]
    decoder = torch.tensor(data["kinds"]["decoder"]["layers"][0])  # (H, T, T) of layer 1
    torch.testing.assert_close(decoder, maps.decoder[0][0], atol=5e-5, rtol=0)


def test_a_position_variant_trains_logs_attention_evaluates_and_old_checkpoints_load_as_sinusoidal(
    tmp_path, capsys
):
    """``--model.positional alibi`` end to end: the checkpoint records it, validation logs per-head maps and
    head statistics through the weight-returning path, evaluate.py scores and exports attention; a checkpoint
    saved before the option existed (no ``positional`` hyperparameter) loads as sinusoidal."""
    from tests.conftest import read_events

    run = train_tiny(tmp_path / "runs", "--model.positional", "alibi", "--trainer.max_epochs", "1")
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["positional"] == "alibi"
    loaded = load_run(checkpoint)
    assert loaded.module.model.config.positional == "alibi"

    tags = read_events(run).Tags()["images"]
    for kind in ("encoder", "decoder", "cross"):
        assert f"attention_overview/{kind}/sentence_1" in tags
    assert {"heads/cross_agreement", "heads/decoder_previous", "heads/encoder_distance"} <= set(tags)

    code, out, _ = run_evaluate(capsys, checkpoint, "--quiet")
    assert code == 0 and last_json(out)["num_sentences"] == 40
    sentence = loaded.datamodule.pairs("test")[0].source
    code, _, _ = run_evaluate(
        capsys, "translate", checkpoint, sentence, "--attention-out", tmp_path / "maps"
    )
    assert code == 0 and len(list((tmp_path / "maps" / "sentence_1").glob("*.png"))) == 2 * 2 * 3

    del saved["hyper_parameters"]["positional"]
    old = tmp_path / "old.ckpt"
    torch.save(saved, old)
    module = load_run(old).module
    assert module.model.config.positional == "sinusoidal" and module.hparams.positional == "sinusoidal"


def test_a_negative_length_penalty_is_an_option_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, tmp_path / "any.ckpt", "--beam-size", "4", "--length-penalty", "-0.5")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "argument --length-penalty: must be at least 0, got -0.5" in err and "Traceback" not in err


@pytest.mark.parametrize("alpha", ["inf", "-inf", "nan", "1e999"])
def test_a_length_penalty_that_is_not_finite_is_an_option_error(tmp_path, capsys, alpha):
    """inf was taken, and printed as Infinity in the last line, which JSON readers refuse."""
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, tmp_path / "any.ckpt", "--beam-size", "4", f"--length-penalty={alpha}")
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.splitlines()[-1].endswith(f"error: argument --length-penalty: not a finite number: {alpha!r}")


# --- sentences longer than the model's max_len (256 in the tiny run) ----------------------------------------

LONG = " ".join(["the dog saw a cat"] * 60)  # 300 words, 300 tokens of the toy vocabulary


def test_sentences_longer_than_max_len_are_one_line_errors(tiny_run, tmp_path, capsys, monkeypatch):
    import io

    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    long_source = tmp_path / "long.tsv"
    long_source.write_text(f"the dog saw a cat\tli hundo vidan\n{LONG}\tli hundo\n", encoding="utf-8")
    long_reference = tmp_path / "reference.tsv"
    long_reference.write_text(f"the dog saw a cat\t{LONG}\n", encoding="utf-8")
    too_long = "300 tokens, 301 with {}, longer than the model's max_len 256"
    cases = [
        ([checkpoint, "--tsv", long_source, "--quiet"],
         f"{long_source}:2: source has {too_long.format('EOS')}"),
        # The head analyses read the reference teacher-forced, so it must fit too.
        ([checkpoint, "--tsv", long_reference, "--head-importance", "--analysis-out", tmp_path / "analysis"],
         f"{long_reference}:1: target has {too_long.format('BOS')}"),
        (["translate", checkpoint, LONG, "--attention-out", tmp_path / "maps"],
         f"translate: source has {too_long.format('EOS')}"),
    ]
    for args, message in cases:
        code, _, err = run_evaluate(capsys, *args)
        assert (code, err) == (1, f"error: {message}\n"), args
    monkeypatch.setattr("sys.stdin", io.StringIO(f"the dog saw a cat\n{LONG}\n"))
    code, out, err = run_evaluate(capsys, "translate", checkpoint, "-")
    assert (code, out, err) == (1, "", f"error: stdin, sentence 2: source has {too_long.format('EOS')}\n")
    assert not (tmp_path / "maps").exists() and not (tmp_path / "analysis").exists()
    # Scoring compares a reference as text: a long one is no obstacle.
    code, out, _ = run_evaluate(capsys, checkpoint, "--tsv", long_reference, "--quiet")
    assert code == 0 and last_json(out)["num_sentences"] == 1


def test_a_test_set_with_a_sentence_longer_than_max_len_names_its_file_and_line(tmp_path, capsys):
    data = short_tsv_corpus(tmp_path / "data")
    run = train_tiny(
        tmp_path / "runs", "--data.dataset", "tsv", "--data.path", str(data), "--data.tokenizer", "word",
        "--model.max_len", "8", "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0",
    )
    short_tsv_corpus(data, other=["w1 w2\tv1", "w1 w2 w3 w4 w5 w6 w7 w8 w9\tv1"])
    code, _, err = run_evaluate(capsys, run / "checkpoints" / "last.ckpt", "--test-split", "other", "--quiet")
    message = "source has 9 tokens, 10 with EOS, longer than the model's max_len 8"
    assert (code, err) == (1, f"error: {data / 'other.tsv'}:2: {message}\n")
    # A test split the corpus does not hold is refused, naming the file it would be.
    code, out, err = run_evaluate(
        capsys, run / "checkpoints" / "last.ckpt", "--test-split", "bogus", "--quiet"
    )
    assert (code, out) == (1, "")
    assert err.startswith(f"error: --test-split bogus: {data / 'bogus.tsv'}: no such file")


def export_model(max_len):
    src_tok, tgt_tok = Tokenizer.train(["a b c"]), Tokenizer.train(["x y z"])
    torch.manual_seed(0)
    model = Transformer(tiny_config(
        src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size, num_heads=2,
        num_encoder_layers=1, num_decoder_layers=1, max_len=max_len,
    )).eval()
    return model, src_tok, tgt_tok


def test_a_hypothesis_that_ran_into_max_len_exports_the_maps_it_was_generated_with(tmp_path, drawn):
    """Generation stops at max_len tokens without EOS; the decoder read BOS and all of them but the last."""
    model, src_tok, tgt_tok = export_model(max_len=4)
    hypothesis = tgt_tok.encode("z x y z")  # max_len tokens
    export_attention(model, src_tok, tgt_tok, "b a", hypothesis, tmp_path)
    with torch.no_grad():
        src, tgt_in = torch.tensor([src_tok.encode("b a") + [EOS]]), torch.tensor([[BOS, *hypothesis[:-1]]])
        _, maps = model(src, tgt_in, return_attention=True)
    weights, rows, cols = drawn["decoder layer 1 head 1"]
    assert (rows, cols) == (["z", "x", "y", "z"], ["<s>", "z", "x", "y"])
    torch.testing.assert_close(weights, maps.decoder[0][0, 0])
    assert drawn["cross layer 1 head 2"][1:] == (["z", "x", "y", "z"], ["b", "a", "</s>"])


def test_exporting_a_source_longer_than_max_len_is_a_one_line_error(tmp_path):
    from data.corpora import CorpusError

    model, src_tok, tgt_tok = export_model(max_len=4)
    message = "attention export: source has 4 tokens, 5 with EOS, longer than the model's max_len 4"
    with pytest.raises(CorpusError, match=f"^{message}$"):
        export_attention(model, src_tok, tgt_tok, "a b c a", tgt_tok.encode("x"), tmp_path / "maps")
    assert not (tmp_path / "maps").exists()


def test_exporting_the_attention_of_overflowing_weights_is_a_one_line_error(tmp_path):
    from training.checkpoints import CheckpointError

    model, src_tok, tgt_tok = export_model(max_len=8)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1e30)  # finite, as a diverged run's can be, but the attention overflows
    message = "attention export: the model's attention for 'b a' is not finite"
    with pytest.raises(CheckpointError, match=f"^{message}"):
        export_attention(model, src_tok, tgt_tok, "b a", tgt_tok.encode("x"), tmp_path / "maps")
    assert not (tmp_path / "maps").exists()


# --- outputs checked before the work, options bounded, input that is not text ------------------------------

@pytest.fixture
def decodings(monkeypatch):
    """How many times evaluate.py decoded (a list that grows by one per call)."""
    from commands import translate
    from evaluation import scoring

    calls = []
    for module, name in ((scoring, "translate"), (translate, "translate_hypotheses")):
        function = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=function, **k: calls.append(1) or _f(*a, **k))
    return calls


def test_output_into_a_missing_folder_is_written_there(tiny_run, tmp_path, capsys):
    output = tmp_path / "new" / "folder" / "test.jsonl"
    code, _, _ = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--output", output, "--quiet")
    assert code == 0 and len(output.read_text(encoding="utf-8").splitlines()) == 40


def test_bad_output_paths_are_refused_before_any_decoding(tiny_run, tmp_path, capsys, decodings):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me\n")
    (tmp_path / "maps" / "sentence_1").mkdir(parents=True)
    cases = [
        ([checkpoint, "--output", tmp_path, "--overwrite", "--quiet"],
         f"--output {tmp_path} is a folder; give a file name"),
        ([checkpoint, "--output", a_file / "out.jsonl", "--quiet"],
         f"--output {a_file / 'out.jsonl'}: {a_file} is a file, not a folder"),
        (["translate", checkpoint, "the dog", "--attention-out", a_file],
         f"--attention-out {a_file}: {a_file} is a file"),
        (["translate", checkpoint, "the dog", "--attention-out", tmp_path / "maps"],
         f"{tmp_path / 'maps' / 'sentence_1'} exists; choose another name or pass --overwrite"),
        ([checkpoint, "--head-importance", "--analysis-out", a_file / "x", "--quiet"],
         f"--analysis-out {a_file / 'x'}: {a_file} is a file, not a folder"),
    ]
    for args, message in cases:
        code, out, err = run_evaluate(capsys, *args)
        assert (code, out) == (1, ""), args
        assert err.startswith(f"error: {message}") and len(err.splitlines()) == 1, err
    assert decodings == [] and a_file.read_text() == "keep me\n"


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--max-len", "0", "argument --max-len: must be at least 1, got 0"),
        ("--max-len", "-5", "argument --max-len: must be at least 1, got -5"),
        ("--beam-size", "99999999999", "argument --beam-size: must be at most 256, got 99999999999"),
        ("--average-last", "0", "argument --average-last: must be at least 1, got 0"),
    ],
)
def test_absurd_counts_are_option_errors(tmp_path, capsys, option, value, message):
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, tmp_path / "any.ckpt", option, value)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.strip().splitlines()[-1].endswith(f"error: {message}")


def other_vocabulary(checkpoint: dict) -> dict:
    """The checkpoint as if trained with one target word more."""
    changed = {**checkpoint, "hyper_parameters": dict(checkpoint["hyper_parameters"])}
    size = changed["hyper_parameters"]["tgt_vocab_size"]
    changed["hyper_parameters"]["tgt_vocab_size"] = size + 1
    changed["state_dict"] = {
        name: torch.cat([value, value[:1]]) if value.shape[:1] == (size,) else value
        for name, value in checkpoint["state_dict"].items()
    }
    return changed


def test_averaging_checkpoints_of_other_vocabularies_names_both_and_what_differs(tiny_run, tmp_path, capsys):
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    size = checkpoint["hyper_parameters"]["tgt_vocab_size"]
    older, newer = tmp_path / "epoch0-step12.ckpt", tmp_path / "epoch1-step30.ckpt"
    torch.save(checkpoint, older)
    torch.save({**other_vocabulary(checkpoint), "global_step": 30}, newer)
    code, out, err = run_evaluate(capsys, newer, "--average-last", "2", "--quiet")
    assert (code, out) == (1, "")
    assert err == f"error: cannot average {newer} and {older}: tgt_vocab_size {size + 1} vs {size}\n"
    # Same sizes, other words: averaging them would mix unrelated embeddings.
    tokenizers = dict(checkpoint["TranslationDataModule"])
    vocabulary = json.loads(tokenizers["tgt_tokenizer"])
    word = next(w for w in vocabulary["model"]["vocab"] if not w.startswith("<"))
    vocabulary["model"]["vocab"]["another" + word] = vocabulary["model"]["vocab"].pop(word)
    tokenizers["tgt_tokenizer"] = json.dumps(vocabulary)
    torch.save({**checkpoint, "TranslationDataModule": tokenizers, "global_step": 30}, newer)
    code, _, err = run_evaluate(capsys, newer, "--average-last", "2", "--quiet")
    message = f"cannot average {newer} and {older}: their target vocabularies differ"
    assert (code, err) == (1, f"error: {message}\n")


def test_translate_refuses_bytes_that_are_not_utf8(tiny_run, capsys, monkeypatch):
    import io
    import os

    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    # Linux hands a program its argument bytes as lone surrogates where they are not UTF-8 (PEP 383).
    code, out, err = run_evaluate(capsys, "translate", checkpoint, os.fsdecode(b"the caf\xe9 dog"))
    assert (code, out) == (1, "")
    assert err == "error: translate: the sentence is not UTF-8 text (byte 0xe9 at character 8)\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"the dog saw a cat\n\xff\xfe cat\n")))
    code, out, err = run_evaluate(capsys, "translate", checkpoint, "-")
    message = "translate -: stdin line 2 is not UTF-8 text (byte 0xff at byte 1)"
    assert (code, out, err) == (1, "", f"error: {message}\n")


def test_a_byte_order_mark_on_stdin_is_dropped(tiny_run, capsys, monkeypatch):
    import io

    from evaluation.inputs import read_sentences

    bom = io.TextIOWrapper(io.BytesIO("\ufeffthe dog saw a cat\nevery queen walked\n".encode()))
    assert read_sentences("-", bom) == ["the dog saw a cat", "every queen walked"]
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    translations = []
    for text in ("\ufeffthe dog saw a cat\n", "the dog saw a cat\n"):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        code, out, _ = run_evaluate(capsys, "translate", checkpoint, "-")
        translations.append((code, out))
    assert translations[0] == translations[1] and translations[0][0] == 0


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["hyper_parameters"].update(num_heads=3),
         "invalid model settings (d_model (32) must be divisible by num_heads (3))"),
        (lambda c: c["hyper_parameters"].update(num_heads=[2, 2]),
         """malformed model settings: Parser key "num_heads": Expected a <class 'int'>. Got value: [2, 2]"""),
        (lambda c: c["hyper_parameters"].update(positional="sinusoid"),
         """malformed model settings: Parser key "positional": Expected a typing.Literal['sinusoidal', """),
        (lambda c: c.update(hyper_parameters=[1, 2]),
         "malformed checkpoint (hyper_parameters is a list, not a mapping)"),
        (lambda c: c["datamodule_hyper_parameters"]["toy"].update(train_size="many"),
         """malformed data settings: Parser key "toy.train_size": Expected a <class 'int'>. Got value: m"""),
        (lambda c: c["datamodule_hyper_parameters"].update(gold="gold.txt"),  # never read as a config file
         "malformed data settings: gold is 'gold.txt', expected a mapping"),
        (lambda c: c["datamodule_hyper_parameters"].update(toy=5),
         "malformed data settings: toy is 5, expected a mapping"),
        (lambda c: c["hyper_parameters"].update(d_ff=128),
         ("weights do not fit the saved model settings (size mismatch for model.encoder_layers.0.feed_"
          "forward.up.weight: copying a param with shape torch.Size([64, 32]) from checkpoint, the shape in "
          "current model is torch.Size([128, 32])")),
        (lambda c: c["hyper_parameters"].update(d_ff=10**9),
         ("invalid model settings (d_ff must be at most 262144, got 1000000000: one d_model × d_ff weight "
          "matrix alone would take 119.2 GiB)")),
    ],
)
def test_a_checkpoint_with_malformed_settings_is_one_line_error(tiny_run, tmp_path, capsys, change, message):
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    change(checkpoint)
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    code, out, err = run_evaluate(capsys, bad, "--quiet")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {bad}: {message}") and len(err.splitlines()) == 1, err


def test_the_model_is_built_from_the_settings_as_they_were_checked(tiny_run, tmp_path):
    """A setting saved as a string is read as its type says, once: the model loaded is the one checked."""
    from training.checkpoints import load_run

    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"]["scale_embedding"] = "false"
    edited = tmp_path / "edited.ckpt"
    torch.save(checkpoint, edited)
    assert load_run(edited).module.config.scale_embedding is False


def test_settings_the_code_does_not_know_are_named_in_a_warning(tiny_run, tmp_path, capsys):
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"]["num_experts"] = 4  # a setting renamed or removed since
    renamed = tmp_path / "renamed.ckpt"
    torch.save(checkpoint, renamed)
    code, _, err = run_evaluate(capsys, renamed, "--quiet")
    assert code == 0
    assert err.splitlines() == [
        (f"warning: {renamed}: ignoring model settings this version does not know (renamed or removed?): "
         "num_experts=4")
    ]


def test_a_checkpoint_of_the_flat_toy_and_gold_options_still_evaluates(tiny_run, tmp_path, capsys):
    """Earlier versions saved the data's ``toy_*`` and ``gold_*`` options flat, and took gold_direction and
    gold_zero_based without gold_alignments (ignoring them)."""
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    saved = checkpoint["datamodule_hyper_parameters"]
    toy, _ = saved.pop("toy"), saved.pop("gold")
    saved |= {f"toy_{name}": value for name, value in toy.items()} | {
        "gold_sentences": None, "gold_alignments": None, "gold_direction": "forward", "gold_zero_based": True}
    older = tmp_path / "older.ckpt"
    torch.save(checkpoint, older)
    code, out, err = run_evaluate(capsys, older, "--quiet")
    assert (code, err) == (0, "")
    now = last_json(run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--quiet")[1])
    assert {k: last_json(out)[k] for k in ("bleu", "chrf", "exact_match")} == {
        k: now[k] for k in ("bleu", "chrf", "exact_match")
    }


def test_a_run_folder_evaluates_its_newest_weights(tiny_run, capsys):
    code, out, err = run_evaluate(capsys, tiny_run, "--quiet")
    assert code == 0 and last_json(out)["checkpoint"] == str(tiny_run / "checkpoints" / "last.ckpt")
    assert f"using {tiny_run / 'checkpoints' / 'last.ckpt'}" in err


def test_a_hypothesis_cut_by_its_length_limit_is_drawn_without_an_eos_row(tmp_path, capsys):
    """Generation stopped after --max-len 2 tokens, before EOS: the maps have a row per generated token. A
    tiny run's weights with EOS suppressed (``suppress_eos``) make every hypothesis one that is cut."""
    from evaluation.translate import translate_hypotheses
    from tests.helpers.weight_surgery import suppress_eos

    run = train_tiny(tmp_path / "runs", "--model.tie_output_embedding", "false", "--trainer.max_epochs", "1",
                     "--attention.every_n_epochs", "0")
    loaded = load_run(run / "checkpoints" / "last.ckpt")
    dm, model = loaded.datamodule, loaded.module.model
    suppress_eos(model)
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = loaded.module.state_dict()
    never_ends = tmp_path / "never_ends.ckpt"
    torch.save(checkpoint, never_ends)
    source = dm.pairs("test")[0].source
    ((ids, finished),) = translate_hypotheses(model, dm.src_tokenizer, dm.tgt_tokenizer, [source], max_len=2)
    assert (len(ids), finished) == (2, False)
    code, out, _ = run_evaluate(
        capsys, "translate", never_ends, source, "--max-len", "2", "--attention-out", tmp_path / "maps",
    )
    assert code == 0 and out.splitlines()[-1] == dm.tgt_tokenizer.decode(ids)
    parser = HeadViewParser()
    parser.feed((tmp_path / "maps" / "sentence_1" / "head_view.html").read_text(encoding="utf-8"))
    data = json.loads(parser.scripts[0])
    tokens = dm.tgt_tokenizer.tokens(ids)
    assert data["target"] == tokens and "</s>" not in tokens  # no </s> row it never generated
    assert data["kinds"]["decoder"]["keys"] == ["<s>", tokens[0]]


def test_the_default_analysis_folder_is_checked_before_any_work(tiny_run, tmp_path, capsys, monkeypatch):
    """Without --analysis-out files go to <run>/analysis/<checkpoint>: a file in the way stops it first."""
    import shutil

    from commands import explain, score

    monkeypatch.setattr(score, "measure_head_importance", lambda *a, **k: pytest.fail("measured heads"))
    monkeypatch.setattr(explain, "explain_pairs", lambda *a, **k: pytest.fail("scored methods"))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = shutil.copy(tiny_run / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt")
    (run / "analysis").write_text("keep me\n")
    default, in_the_way = run / "analysis" / "last", run / "analysis"
    message = f"error: --analysis-out {default} (the default): {in_the_way} is a file, not a folder\n"
    for command in ([checkpoint, "--head-importance"], ["explain", checkpoint, "--methods", "attention"]):
        code, out, err = run_evaluate(capsys, *command, "--quiet")
        assert (code, out, err) == (1, "", message), command
    assert (run / "analysis").read_text() == "keep me\n"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--split", "val"], "argument --split: not allowed with argument --test-split"),
        (["--tsv", "pairs.tsv"], "argument --tsv: not allowed with argument --test-split"),
    ],
)
def test_a_test_split_that_would_be_ignored_is_an_option_error(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(capsys, tmp_path / "any.ckpt", "--test-split", "test2017", *extra)
    assert stopped.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


def test_a_test_split_of_data_that_has_one_is_refused(tiny_run, capsys, decodings):
    code, out, err = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--test-split", "bogus")
    message = ("--test-split bogus: the run's toy data has a single test set; --test-split is for multi30k, "
               "parallel and tsv corpora")
    assert (code, out, err) == (1, "", f"error: {message}\n") and decodings == []


def test_a_diverged_checkpoint_is_one_line_error_before_translating(tiny_run, tmp_path, capsys):
    """NaN weights made NaN attention, and the head view a traceback after the PNGs were written."""
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    weights = checkpoint["state_dict"]
    first = next(name for name, value in weights.items() if value.is_floating_point())
    for name, value in weights.items():
        if value.is_floating_point():
            weights[name] = torch.full_like(value, float("nan"))
    diverged = tmp_path / "diverged.ckpt"
    torch.save(checkpoint, diverged)
    maps = tmp_path / "maps"
    code, out, err = run_evaluate(capsys, "translate", diverged, "the dog", "--attention-out", maps)
    message = (f"{diverged}: {first} holds NaN or infinite weights (the run diverged?); use an earlier "
               "checkpoint")
    assert (code, out, err) == (1, "", f"error: {message}\n")
    assert not maps.exists()


def test_a_full_disk_keeps_the_scores_and_the_old_output_file(tiny_run, tmp_path, capsys, monkeypatch):
    """The scores are printed before --output is written; the file is replaced whole or not at all."""
    import builtins
    import errno

    output = tmp_path / "out" / "test.jsonl"
    output.parent.mkdir()
    output.write_text("old\n", encoding="utf-8")
    real_open = builtins.open

    class FullDisk:
        """A file in the output folder whose second write finds the disk full."""

        def __init__(self, file):
            self.file, self.writes = file, 0

        def write(self, text):
            self.writes += 1
            if self.writes > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.file.write(text)

        def writelines(self, lines):
            for line in lines:
                self.write(line)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def __getattr__(self, name):
            return getattr(self.file, name)

    def full_disk_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        writing = isinstance(file, (str, bytes, os.PathLike)) and "r" not in mode
        return FullDisk(opened) if writing and Path(file).parent == output.parent else opened

    monkeypatch.setattr(builtins, "open", full_disk_open)
    code, out, err = run_evaluate(
        capsys, tiny_run / "checkpoints" / "last.ckpt", "--output", output, "--overwrite", "--quiet"
    )
    assert code == 1 and last_json(out)["num_sentences"] == 40
    assert err == f"error: --output {output}: No space left on device; it was not written\n"
    assert output.read_text(encoding="utf-8") == "old\n" and list(output.parent.iterdir()) == [output]


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("task", [["CKPT", "--quiet"], ["translate", "CKPT", "the dog"]])
def test_a_reader_that_stops_early_ends_evaluate_quietly(tiny_run, task):
    """`evaluate.py CKPT | head -1`: stdout's reader is gone; exit with the status a shell reports for a Unix
    tool killed by SIGPIPE (128 + 13), without a traceback or an error message."""
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader has left before anything is printed
    try:
        done = subprocess.run(
            [sys.executable, "evaluate.py",
             *(str(tiny_run / "checkpoints" / "last.ckpt") if word == "CKPT" else word for word in task)],
            stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize("side, name", [("src_tokenizer", "source"), ("tgt_tokenizer", "target")])
def test_a_tokenizer_larger_than_the_embedding_is_a_one_line_error(tiny_run, tmp_path, capsys, side, name):
    """It was an IndexError from deep inside the embedding."""
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["TranslationDataModule"][side] = larger_tokenizer(checkpoint["TranslationDataModule"][side])
    size = Tokenizer.from_json(checkpoint["TranslationDataModule"][side]).vocab_size
    setting = side.replace("tokenizer", "vocab_size")
    embedding = checkpoint["hyper_parameters"][setting]
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    code, out, err = run_evaluate(capsys, bad, "--quiet")
    assert (code, out) == (1, "")
    assert err == (f"error: {bad}: tokenizers do not fit the model: the {name} tokenizer has {size} ids, "
                   f"the model's embedding {embedding} ({setting})\n")


def test_special_ids_other_than_the_tokenizers_are_a_one_line_error(tiny_run, tmp_path, capsys):
    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"]["pad_id"] = 3
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    code, out, err = run_evaluate(capsys, bad, "--quiet")
    assert (code, out) == (1, "")
    assert err == f"error: {bad}: tokenizers do not fit the model: its pad_id is 3, the tokenizers' 0\n"
