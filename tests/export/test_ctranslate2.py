"""The CTranslate2 export decodes exactly like the PyTorch model, refuses what it cannot map, and
evaluate.py's export-ctranslate2 and score-ctranslate2 behave. CTranslate2 is optional: its tests skip
without it."""

import dataclasses
import sys

import pytest
import torch
import torch.nn.functional as F

from data.batching import collate
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from data.toy import make_toy_splits
from evaluation.translate import translate
from export.ctranslate2 import INSTALL_HINT, CTranslate2Translator, EngineError, export, vocabulary
from model import Transformer, TransformerConfig
from tests.conftest import PAD, last_json, run_evaluate

needs_ct2 = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ctranslate2") is None,
    reason="ctranslate2 is not installed (optional dependency: pip install ctranslate2)",
)

MAX_LEN = 20  # tokens generated per sentence, EOS included, on both engines


@pytest.fixture(scope="module")
def toy():
    """Toy pairs and word tokenizers: 300 training pairs, 80 test sentences."""
    splits = make_toy_splits(train_size=300, val_size=8, test_size=80, seed=7)
    src = Tokenizer.train([p.source for p in splits["train"]])
    tgt = Tokenizer.train([p.target for p in splits["train"]])
    return splits, src, tgt


def train_model(toy, *, steps: int = 80, **overrides) -> Transformer:
    """A small Transformer trained for a few steps: its outputs vary in length and content, not all EOS."""
    splits, src, tgt = toy
    torch.manual_seed(0)
    settings = {"d_model": 32, "num_heads": 2, "num_encoder_layers": 2, "num_decoder_layers": 2, "d_ff": 64,
                "dropout": 0.0, "max_len": 64}
    settings.update(overrides)
    model = Transformer(TransformerConfig(src.vocab_size, tgt.vocab_size, **SPECIALS.ids, **settings))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    pairs = splits["train"]
    for step in range(steps):
        start = (step * 32) % (len(pairs) - 32)
        batch = collate(
            [(i, src.encode(p.source), tgt.encode(p.target)) for i, p in enumerate(pairs[start : start + 32])]
        )
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", params=[True, False], ids=["pre-LN", "post-LN"])
def exported(request, toy, tmp_path_factory):
    """(model, translator, sources) for a trained pre-LN or post-LN model and its fp32 export."""
    ct2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    del ct2
    splits, src, tgt = toy
    model = train_model(toy, norm_first=request.param)
    folder = export(model, src, tgt, tmp_path_factory.mktemp("ct2") / "model")
    translator = CTranslate2Translator(folder, src, tgt, model_max_len=model.config.max_len, threads=1)
    return model, translator, [p.source for p in splits["test"]]


def sequence_log_prob(model: Transformer, src_ids: list[int], out_ids: list[int], ended: bool) -> float:
    """Sum of the model's log-probabilities of ``out_ids`` (+ EOS if ``ended``), pad and BOS ruled out."""
    c = model.config
    target = out_ids + ([c.eos_id] if ended else [])
    src = torch.tensor([[*src_ids, c.eos_id]])  # (1, S)
    tgt_in = torch.tensor([[c.bos_id, *target[:-1]]])  # (1, T)
    with torch.no_grad():
        logits = model(src, tgt_in)[0].float()  # (T, V)
    logits[:, [c.pad_id, c.bos_id]] = float("-inf")
    log_probs = logits.log_softmax(dim=-1)
    return float(log_probs[torch.arange(len(target)), torch.tensor(target)].sum())


@needs_ct2
def test_greedy_equals_pytorch_token_for_token(exported, toy):
    model, translator, sources = exported
    _, src, tgt = toy
    assert len(sources) >= 64
    ours = translate(model, src, tgt, sources, beam_size=1, max_len=MAX_LEN, batch_size=len(sources))
    # CTranslate2 on token strings, one translate_batch call for the whole batch.
    theirs, _ = translator.translate_tokens(
        [src.tokens(src.encode(s)) for s in sources], max_decoding_length=MAX_LEN
    )
    assert [tgt.tokens(ids) for ids in ours] == theirs
    # Not a trivial model: outputs differ, some end early with EOS, some reach the limit.
    lengths = {len(ids) for ids in ours}
    assert len({tuple(ids) for ids in ours}) > len(sources) // 2
    assert min(lengths) < MAX_LEN - 1 and max(lengths) == MAX_LEN


@needs_ct2
def test_default_per_sentence_limits_equal_pytorch(exported, toy):
    """Without --max-len each sentence gets 2 * (source length + 1) + 10 tokens, on both engines."""
    model, translator, sources = exported
    _, src, tgt = toy
    ours = translate(model, src, tgt, sources, batch_size=16)
    assert translator.translate(sources, batch_size=16) == ours


@needs_ct2
def test_beam_4_equals_pytorch_with_scores(exported, toy):
    """Beam 4 at length penalty 0, where CTranslate2's length ** alpha and GNMT's penalty agree (both 1)."""
    model, translator, sources = exported
    _, src, tgt = toy
    ours = translate(model, src, tgt, sources, beam_size=4, length_penalty=0.0, max_len=MAX_LEN)
    tokens, scores = translator.translate_tokens(
        [src.tokens(src.encode(s)) for s in sources],
        max_decoding_length=MAX_LEN,
        beam_size=4,
        length_penalty=0.0,
    )
    assert [tgt.tokens(ids) for ids in ours] == tokens
    for source, ids, score in zip(sources, ours, scores):
        ended = len(ids) < MAX_LEN  # cut at the limit: no EOS, and no EOS probability in the score
        expected = sequence_log_prob(model, src.encode(source), ids, ended)
        assert score == pytest.approx(expected, abs=1e-3)
    greedy = translate(model, src, tgt, sources, max_len=MAX_LEN)
    assert ours != greedy  # the beam search did search


@needs_ct2
def test_an_empty_source_is_the_one_known_difference(exported, toy):
    """CTranslate2 skips the model for a source without content and returns an empty translation (its
    design); PyTorch decodes from EOS alone. Every other sentence of the same batch is unaffected."""
    model, translator, sources = exported
    _, src, tgt = toy
    batch = ["", *sources[:8]]
    ours = translate(model, src, tgt, batch, max_len=MAX_LEN)
    theirs = translator.translate(batch, max_len=MAX_LEN)
    assert theirs[0] == [] and ours[0] != []
    assert theirs[1:] == ours[1:]


@needs_ct2
@pytest.mark.parametrize(
    "overrides",
    [{"activation": "gelu", "tie_output_embedding": False, "steps": 15},
     # Subwords make longer sentences; untrained, as a few steps leave this model repeating one subword.
     {"share_embeddings": True, "norm_first": False, "max_len": 160, "steps": 0}],
)
def test_gelu_untied_and_shared_bpe_embeddings_equal_pytorch(overrides, tmp_path):
    """Shared embeddings with one joint BPE vocabulary (subword strings with "▁"), as the Multi30k recipe."""
    splits = make_toy_splits(train_size=200, val_size=4, test_size=64, seed=3)
    if overrides.get("share_embeddings"):
        texts = [p.source for p in splits["train"]] + [p.target for p in splits["train"]]
        src = tgt = Tokenizer.train(texts, kind="bpe", vocab_size=300)
    else:
        src, tgt = (
            Tokenizer.train([getattr(p, side) for p in splits["train"]]) for side in ("source", "target")
        )
    model = train_model((splits, src, tgt), **overrides)
    translator = CTranslate2Translator(export(model, src, tgt, tmp_path / "m"), src, tgt,
                                       model_max_len=model.config.max_len, threads=1)
    sources = [p.source for p in splits["test"]]
    ours = translate(model, src, tgt, sources, max_len=MAX_LEN)
    assert translator.translate(sources, max_len=MAX_LEN) == ours
    assert len({tuple(ids) for ids in ours}) > 1


@needs_ct2
@pytest.mark.parametrize("positional", ["learned", "none"])
def test_position_tables_other_than_the_sinusoid_equal_pytorch(positional, tmp_path):
    """A learned table per side, or none at all, goes over as the position encodings of each stack."""
    splits = make_toy_splits(train_size=100, val_size=4, test_size=64, seed=5)
    src, tgt = (Tokenizer.train([getattr(p, side) for p in splits["train"]]) for side in ("source", "target"))
    try:
        model = train_model((splits, src, tgt), steps=10, positional=positional)
    except TypeError:
        pytest.skip("this version of TransformerConfig has no positional field")
    translator = CTranslate2Translator(export(model, src, tgt, tmp_path / "m"), src, tgt,
                                       model_max_len=64, threads=1)
    sources = [p.source for p in splits["test"]]
    ours = translate(model, src, tgt, sources, max_len=MAX_LEN)
    assert translator.translate(sources, max_len=MAX_LEN) == ours


@needs_ct2
def test_export_refuses_what_it_cannot_map(toy, tmp_path):
    _, src, tgt = toy
    model = Transformer(TransformerConfig(
        src.vocab_size, tgt.vocab_size, **SPECIALS.ids, d_model=16, num_heads=2, d_ff=32
    ))
    object.__setattr__(model.config, "positional", "rope")  # a positional option another version may add
    with pytest.raises(EngineError, match=r"positional='rope' cannot be exported to CTranslate2"):
        export(model, src, tgt, tmp_path / "rope")
    assert not (tmp_path / "rope").exists()

    object.__setattr__(model.config, "positional", "sinusoidal")
    object.__setattr__(model.config, "activation", "swish")
    with pytest.raises(EngineError, match=r"activation='swish'"):
        export(model, src, tgt, tmp_path / "swish")

    moved = dataclasses.replace(model.config, activation="relu", bos_id=4)  # "<s>" is not at id 4
    with pytest.raises(
        EngineError, match=r"source vocabulary has '.+' at id 4, where CTranslate2 needs '<s>'"
    ):
        vocabulary(src, "source", moved)


def test_missing_ctranslate2_is_one_clear_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails as if not installed
    checkpoint = tmp_path / "any.ckpt"
    for command in (["score-ctranslate2", checkpoint], ["export-ctranslate2", checkpoint, tmp_path / "m"]):
        code, out, err = run_evaluate(capsys, *command)
        assert code == 1 and out == ""
        assert err.strip() == f"error: {INSTALL_HINT}"


@needs_ct2
def test_export_cli_refuses_an_existing_folder_and_leaves_it_untouched(tiny_run, capsys, tmp_path):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    folder = tmp_path / "ct2"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"not a model")
    (folder / "notes.txt").write_text("mine")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}

    code, out, err = run_evaluate(capsys, "export-ctranslate2", checkpoint, folder)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [f"error: {folder} exists; choose another name or pass --overwrite"]
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before

    code, _, err = run_evaluate(capsys, "export-ctranslate2", checkpoint, folder, "--overwrite")
    assert code == 0, err
    assert (folder / "notes.txt").read_text() == "mine"  # only CTranslate2's own files are replaced
    assert (folder / "model.bin").read_bytes() != b"not a model"
    assert {"config.json"} <= {p.name for p in folder.iterdir()}


@needs_ct2
def test_engine_ctranslate2_scores_like_pytorch(tiny_run, capsys, tmp_path):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    code, out, err = run_evaluate(capsys, checkpoint, "--quiet")
    assert code == 0, err
    pytorch = last_json(out)
    code, out, err = run_evaluate(capsys, "score-ctranslate2", checkpoint, "--quiet")
    assert code == 0, err
    engine = last_json(out)
    assert pytorch["engine"] == "pytorch" and engine["engine"] == "ctranslate2"
    # Same tokens, so the same scores on the same sentences.
    for key in ("bleu", "chrf", "exact_match", "num_sentences", "signature"):
        assert engine[key] == pytorch[key], key
    assert engine["sentences_per_second"] > 0

    # Beam search from a reused export, written with --output.
    folder = tmp_path / "ct2"
    assert run_evaluate(capsys, "export-ctranslate2", checkpoint, folder)[0] == 0
    args = ("--quiet", "--beam-size", "3", "--length-penalty", "0")
    code, out, err = run_evaluate(capsys, "score-ctranslate2", checkpoint, *args, "--engine-model", folder,
                                  "--output", tmp_path / "ct2.jsonl")
    assert code == 0, err
    code, out_pt, err = run_evaluate(capsys, checkpoint, *args, "--output", tmp_path / "pt.jsonl")
    assert code == 0, err
    assert last_json(out)["bleu"] == last_json(out_pt)["bleu"]
    assert (tmp_path / "ct2.jsonl").read_text() == (tmp_path / "pt.jsonl").read_text()


@needs_ct2
def test_engine_model_of_another_vocabulary_is_refused(tiny_run, capsys, tmp_path, toy):
    _, src, tgt = toy
    other = Transformer(TransformerConfig(
        src.vocab_size, tgt.vocab_size, **SPECIALS.ids, d_model=16, num_heads=2, d_ff=32
    ))
    folder = export(other, src, tgt, tmp_path / "other")
    code, _, err = run_evaluate(capsys, "score-ctranslate2", tiny_run / "checkpoints" / "last.ckpt",
                                "--engine-model", folder)
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: {folder}: its source vocabulary is not the checkpoint's; export it again"
    ]


@pytest.mark.parametrize(
    "options, unknown",
    [
        (["score-ctranslate2", "any.ckpt", "--head-importance"], "--head-importance"),
        (["score-ctranslate2", "any.ckpt", "--attention-out", "maps"], "--attention-out maps"),
        (["x.ckpt", "--engine-model", "dir"], None),  # a moved option: the line names the subcommand
        (["export-ctranslate2", "any.ckpt", "dir", "--alignment"], "--alignment"),
    ],
)
def test_engine_refuses_options_that_need_attention(options, unknown, capsys):
    """CTranslate2 returns no per-head attention: its subcommands have no option that reads it."""
    with pytest.raises(SystemExit) as stop:
        run_evaluate(capsys, *options)
    assert stop.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    if unknown is None:
        assert line.endswith("--engine-model is now an option of score-ctranslate2: python evaluate.py "
                             "score-ctranslate2 CKPT --engine-model DIR")
    else:
        assert line.endswith(f"error: unrecognized arguments: {unknown}")


@needs_ct2
@pytest.mark.slow
def test_greedy_equals_pytorch_at_the_multi30k_config_size(toy, tmp_path):
    """The shape of configs/multi30k.yaml (d_model 256, 4 heads, 3 + 3 layers, d_ff 512), 64 sentences."""
    splits, src, tgt = toy
    model = train_model(toy, steps=60, d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3,
                        d_ff=512)
    folder = export(model, src, tgt, tmp_path / "model")
    translator = CTranslate2Translator(folder, src, tgt, model_max_len=model.config.max_len, threads=1)
    sources = [p.source for p in splits["test"]][:64]
    ours = translate(model, src, tgt, sources, beam_size=1, max_len=MAX_LEN, batch_size=len(sources))
    theirs, _ = translator.translate_tokens(
        [src.tokens(src.encode(s)) for s in sources], max_decoding_length=MAX_LEN
    )
    assert [tgt.tokens(ids) for ids in ours] == theirs
    assert len({tuple(ids) for ids in ours}) > len(sources) // 4  # outputs that vary, not one for all


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "none"])
def test_the_position_table_of_each_side_is_the_one_the_model_holds(positional):
    """What the export writes as each stack's position encodings (no CTranslate2 needed to check it)."""
    from export.ctranslate2 import position_table

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(13, 11, **SPECIALS.ids, d_model=16, num_heads=2, d_ff=32,
                                          max_len=24, positional=positional))
    positions = model.positions
    for side in ("encoder", "decoder"):
        if positional == "sinusoidal":
            expected = positions.sinusoid.pe
        elif positional == "learned":
            expected = positions.learned[side].table.weight
        else:
            expected = torch.zeros(24, 16)
        torch.testing.assert_close(position_table(model, side), expected, rtol=0, atol=0)
    if positional == "learned":  # a table per side, not one read twice
        assert not torch.equal(position_table(model, "encoder"), position_table(model, "decoder"))
