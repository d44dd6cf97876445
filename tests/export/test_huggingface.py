"""evaluate.py export-hf: a MarianMTModel folder that transformers alone loads, and that computes what this
project's model computes: logits within float tolerance, the same greedy and beam tokens, the same text."""

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from data.special import SPECIALS
from data.tokenizer import Tokenizer
from model import Transformer, TransformerConfig
from tests.conftest import run_evaluate, train_tiny

transformers = pytest.importorskip("transformers")

from export.ctranslate2 import EngineError
from export.huggingface import check_positions, export, halves_order

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id
TEXTS = ["the big dog sees a cat", "a cat runs home", "the small bird sings.", "dogs and cats play"]
GERMAN = ["der große hund sieht eine katze", "eine katze läuft nach hause", "der kleine vogel singt.",
          "hunde und katzen spielen"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(TEXTS * 3, kind="bpe", vocab_size=60)


def random_model(tokenizer: Tokenizer, target: Tokenizer | None = None, **overrides) -> Transformer:
    torch.manual_seed(0)
    settings = {"d_model": 16, "num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "d_ff": 32,
                "max_len": 64, "norm_first": False, **SPECIALS.ids}
    target_size = (target or tokenizer).vocab_size
    config = TransformerConfig(tokenizer.vocab_size, target_size, **{**settings, **overrides})
    model = Transformer(config).eval()
    with torch.no_grad():  # LayerNorms away from gain 1 and bias 0, so a wrong feature order would show
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model


def load(folder):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def source_batch(hf_tokenizer, texts):
    return hf_tokenizer(texts, return_tensors="pt", padding=True)


def allowed(vocab_size: int) -> list[int]:
    return [i for i in range(vocab_size) if i not in (PAD, BOS)]


def exported_ids(source: Tokenizer, target: Tokenizer) -> list[int]:
    """Per target id, its id in the exported vocabulary: the same with one vocabulary; after the source's
    ids, specials aside, with two."""
    if source.to_json() == target.to_json():
        return list(range(target.vocab_size))
    specials = len(SPECIALS.tokens)
    return list(range(specials)) + [source.vocab_size + i for i in range(target.vocab_size - specials)]


def hf_tokens(generated: torch.Tensor) -> list[list[int]]:
    """generate()'s rows without the start token, cut before EOS."""
    rows = []
    for row in generated[:, 1:].tolist():
        rows.append(row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD])
    return rows


@pytest.mark.parametrize("overrides", [
    {},
    {"share_embeddings": True},
    {"share_embeddings": True, "tie_output_embedding": False},
    {"activation": "gelu"},
    {"activation": "silu", "tie_output_embedding": False},
])
def test_exported_logits_equal_the_models(tmp_path, tokenizer, overrides):
    model = random_model(tokenizer, **overrides)
    marian, hf_tokenizer = load(export(model, tokenizer, tokenizer, tmp_path / "hf"))
    assert type(marian).__name__ == "MarianMTModel"
    check_positions(model, marian)
    batch = source_batch(hf_tokenizer, TEXTS[:3])
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 8], [BOS, 9, 10, PAD, PAD], [BOS, 11, 12, 13, PAD]])
    with torch.no_grad():
        ours = model(batch.input_ids, tgt_in)  # (B, T, V)
        theirs = marian(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        decoder_input_ids=tgt_in, decoder_attention_mask=tgt_in != PAD).logits
    keep = allowed(tokenizer.vocab_size)
    real = tgt_in != PAD
    torch.testing.assert_close(theirs[..., keep][real], ours[..., keep][real], atol=1e-5, rtol=1e-5)
    assert torch.isneginf(theirs[..., [PAD, BOS]]).all()  # never predicted, as in model.decoding


def test_the_tokenizer_encodes_as_collate_does_and_decodes_the_same_text(tmp_path, tokenizer):
    _, hf_tokenizer = load(export(random_model(tokenizer), tokenizer, tokenizer, tmp_path / "hf"))
    for text in TEXTS:
        assert hf_tokenizer(text).input_ids == tokenizer.encode(text) + [EOS]
        ids = tokenizer.encode(text)
        assert hf_tokenizer.decode(ids + [EOS], skip_special_tokens=True) == tokenizer.decode(ids)


def test_greedy_tokens_of_a_random_model_are_the_models(tmp_path, tokenizer):
    """A random model rarely ends its sentences: the length limit is the project's, given to generate()."""
    model = random_model(tokenizer, activation="silu")
    marian, hf_tokenizer = load(export(model, tokenizer, tokenizer, tmp_path / "hf"))
    for text in TEXTS:
        batch = source_batch(hf_tokenizer, [text])
        ours = model.generated_ids(model.generate(batch.input_ids, max_len=9))
        theirs = marian.generate(**batch, max_new_tokens=9, max_length=None)
        assert hf_tokens(theirs) == ours


@pytest.fixture(scope="module", params=["shared", "separate"])
def trained_export(request, tmp_path_factory):
    """A tiny post-LN run, with one vocabulary or one per language, exported by evaluate.py export-hf."""
    runs = tmp_path_factory.mktemp("hf_runs")
    shared = str(request.param == "shared").lower()
    run = train_tiny(runs, "--model.norm_first", "false", "--data.shared_vocab", shared,
                     "--attention.every_n_epochs", "0", "--trainer.max_epochs", "3")
    checkpoint = run / "checkpoints" / "last.ckpt"
    import evaluate

    assert evaluate.main(["export-hf", str(checkpoint), str(runs / "hf")]) == 0
    from training.checkpoints import load_run

    return load_run(checkpoint), runs / "hf", checkpoint


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_trained_models_tokens_and_text_are_the_same_through_generate(trained_export, beam_size):
    run, folder, _ = trained_export
    model, dm = run.module.model, run.datamodule
    marian, hf_tokenizer = load(folder)
    ids = exported_ids(dm.src_tokenizer, dm.tgt_tokenizer)
    sources = [p.source for p in dm.pairs("test")[:12]]
    for text in sources:
        batch = source_batch(hf_tokenizer, [text])
        ours = model.generated_ids(model.generate(batch.input_ids, beam_size=beam_size, length_penalty=0.0))
        limit = 2 * batch.input_ids.size(1) + 10  # Transformer.generate's default
        theirs = marian.generate(**batch, num_beams=beam_size, length_penalty=0.0, max_new_tokens=limit,
                                 max_length=None, early_stopping=False)
        assert hf_tokens(theirs) == [[ids[i] for i in ours[0]]], text
        text_out = hf_tokenizer.batch_decode(theirs, skip_special_tokens=True)
        assert text_out == [dm.tgt_tokenizer.decode(ours[0])]


def test_the_shipped_translation_pipeline_translates_as_the_project_does(trained_export):
    """transformers 5 removed pipeline("translation"); the folder ships one (config.json's custom_pipelines),
    which gives evaluate.py --translate's text, one entry per text as 4.x's pipeline did."""
    run, folder, _ = trained_export
    assert (folder / "translation_pipeline.py").is_file()
    with pytest.raises(ValueError, match="trust_remote_code=True"):  # never runs the folder's code unasked
        transformers.pipeline("translation", model=str(folder))
    translate = transformers.pipeline("translation", model=str(folder), trust_remote_code=True)
    sources = [p.source for p in run.datamodule.pairs("test")[:5]]
    texts = [run.datamodule.tgt_tokenizer.decode(ids) for ids in translate_ids(run, sources)]
    assert [t["translation_text"] for t in translate(sources)] == texts
    assert translate(sources[0]) == [{"translation_text": texts[0]}]


def test_the_shipped_pipeline_passes_generate_options_and_gives_a_random_models_text(tmp_path, tokenizer):
    """A random model's translations are not empty (the trained tiny run's may be): the pipeline's text is
    the project's decoding of its own greedy tokens, under generate()'s options given to the pipeline."""
    model = random_model(tokenizer, activation="silu")
    folder = export(model, tokenizer, tokenizer, tmp_path / "hf")
    translate = transformers.pipeline("translation", model=str(folder), trust_remote_code=True)
    ours = []
    for text in TEXTS:
        src = torch.tensor([[*tokenizer.encode(text), EOS]])
        ours.append(tokenizer.decode(model.generated_ids(model.generate(src, max_len=9))[0]))
    assert all(ours)
    assert [t["translation_text"] for t in translate(TEXTS, max_new_tokens=9, max_length=None)] == ours


def test_the_shipped_pipeline_takes_what_4x_took(tmp_path, tokenizer):
    """No texts, no translations; src_lang and tgt_lang are taken and ignored (one language pair);
    return_tensors gives the token ids; a text longer than the model's positions is cut to them, with a
    warning, or refused in one line with truncation=False."""
    model = random_model(tokenizer, activation="silu")
    folder = export(model, tokenizer, tokenizer, tmp_path / "hf")
    translate = transformers.pipeline("translation", model=str(folder),
                                      trust_remote_code=True)
    options = {"max_new_tokens": 9, "max_length": None}
    assert translate([]) == []
    text = translate(TEXTS[0], **options)
    assert translate(TEXTS[0], src_lang="de", tgt_lang="en", **options) == text
    (ids,) = translate(TEXTS[0], return_tensors=True, **options)
    assert list(ids) == ["translation_token_ids"]
    assert translate.tokenizer.decode(ids["translation_token_ids"], skip_special_tokens=True) == \
        text[0]["translation_text"]
    assert translate(TEXTS[0], return_tensors=True, return_text=True, **options) == text
    long = " ".join(TEXTS * 20)  # more tokens than max_len 64
    assert len(tokenizer.encode(long)) > 64
    with pytest.warns(UserWarning, match=r"a text of \d+ tokens is cut to the model's 64"):
        cut = translate(long, **options)
    first = tokenizer.decode(tokenizer.encode(long)[:63])  # 63 tokens and EOS
    assert cut == translate(first, **options)
    with pytest.raises(ValueError, match=r"^the text is \d+ tokens long; the model reads at most 64$"):
        translate(long, truncation=False)


def translate_ids(run, sources):
    from evaluation.translate import translate

    dm = run.datamodule
    return translate(run.module.model, dm.src_tokenizer, dm.tgt_tokenizer, sources)


@pytest.mark.parametrize(("overrides", "named"), [
    ({"norm_first": True}, "norm_first=True (pre-LN)"),
    ({"positional": "rope"}, "positional='rope'"),
    ({"positional": "alibi"}, "positional='alibi'"),
    ({"positional": "relative"}, "positional='relative'"),
    ({"positional": "learned"}, "positional='learned'"),
    ({"positional": "none"}, "positional='none'"),
])
def test_what_marian_cannot_express_is_refused_in_one_line(tmp_path, tokenizer, overrides, named):
    with pytest.raises(EngineError) as refused:
        export(random_model(tokenizer, **overrides), tokenizer, tokenizer, tmp_path / "hf")
    message = str(refused.value)
    assert message.startswith(named) and "\n" not in message
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("kind", ["word", "bpe", "unigram"])
def test_separate_vocabularies_are_joined_exactly(tmp_path, kind):
    """One tokenizer holds both: it encodes the source as the source tokenizer does, the target ids of the
    model's logits are the project's, and the decoded text is the target tokenizer's."""
    source = Tokenizer.train(GERMAN * 3, kind=kind, vocab_size=60)
    target = Tokenizer.train(TEXTS * 3, kind=kind, vocab_size=60)
    model = random_model(source, target, activation="silu")
    marian, hf_tokenizer = load(export(model, source, target, tmp_path / "hf"))
    target_ids = exported_ids(source, target)
    for text in [*GERMAN, "ein völlig neues wort"]:
        assert hf_tokenizer(text).input_ids == source.encode(text) + [EOS]
    for text in TEXTS:
        ids = target.encode(text)
        exported = [target_ids[i] for i in ids]
        assert hf_tokenizer.decode(exported, skip_special_tokens=True) == target.decode(ids)
    batch = source_batch(hf_tokenizer, GERMAN[:3])
    tgt_in = torch.tensor([[BOS, *target.encode(t)[:3]] for t in TEXTS[:3]])  # (B, 4) in the target's ids
    exported = torch.tensor(target_ids)[tgt_in]  # the same tokens in the joined vocabulary's ids
    with torch.no_grad():
        ours = model(batch.input_ids, tgt_in)  # (B, T, V_tgt)
        theirs = marian(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        decoder_input_ids=exported).logits  # (B, T, V)
    keep = allowed(target.vocab_size)
    at = [target_ids[i] for i in keep]
    torch.testing.assert_close(theirs[..., at], ours[..., keep], atol=1e-5, rtol=1e-5)
    assert torch.isneginf(theirs[..., [i for i in range(theirs.size(-1)) if i not in at]]).all()
    for text in GERMAN:
        src = source_batch(hf_tokenizer, [text])
        ours = model.generated_ids(model.generate(src.input_ids, max_len=9))
        theirs = marian.generate(**src, max_new_tokens=9, max_length=None)
        assert hf_tokens(theirs) == [[target_ids[i] for i in row] for row in ours]


def test_evaluate_refuses_other_modes_options_and_an_existing_folder(trained_export, capsys, tmp_path):
    _, folder, checkpoint = trained_export
    with pytest.raises(SystemExit):
        run_evaluate(capsys, "export-hf", checkpoint, tmp_path / "x", "--output", "o.jsonl")
    assert "evaluate.py export-hf: error: unrecognized arguments: --output o.jsonl" in capsys.readouterr().err
    code, _, err = run_evaluate(capsys, "export-hf", checkpoint, folder)
    assert code == 1 and f"{folder} exists" in err


def test_the_exports_generate_decodes_with_the_beam_and_limit_asked_for(trained_export, capsys, tmp_path):
    run, _, checkpoint = trained_export
    folder = tmp_path / "beam4"
    options = ("--beam-size", "4", "--max-len", "7")
    assert run_evaluate(capsys, "export-hf", checkpoint, folder, *options)[0] == 0
    marian, hf_tokenizer = load(folder)
    saved = marian.generation_config
    assert (saved.num_beams, saved.max_length, saved.length_penalty) == (4, 8, 0.0)
    model, dm = run.module.model, run.datamodule
    ids = exported_ids(dm.src_tokenizer, dm.tgt_tokenizer)
    for text in [p.source for p in dm.pairs("test")[:6]]:
        batch = source_batch(hf_tokenizer, [text])
        ours = model.generate(batch.input_ids, beam_size=4, length_penalty=0.0, max_len=7)
        ours = model.generated_ids(ours)
        assert hf_tokens(marian.generate(**batch)) == [[ids[i] for i in ours[0]]], text

    # transformers' generate() divides by length ** penalty, not GNMT's rule, and batches what it is given
    for options, message in (
        (("--length-penalty", "1.0"), "unrecognized arguments: --length-penalty 1.0"),
        (("--length-penalty", "0.6"), "unrecognized arguments: --length-penalty 0.6"),
        (("--batch-size", "8"), "unrecognized arguments: --batch-size 8"),
    ):
        with pytest.raises(SystemExit):
            run_evaluate(capsys, "export-hf", checkpoint, tmp_path / "refused", *options)
        assert message in capsys.readouterr().err
    code, _, err = run_evaluate(capsys, "export-hf", checkpoint, tmp_path / "long", "--max-len", "100000")
    assert code == 1 and "--max-len must be from 1 to the model's" in err and not (tmp_path / "long").exists()
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    saved["hyper_parameters"]["decode_max_len"] = 100000  # the run's own limit, not given: the model's then
    torch.save(saved, tmp_path / "long_decoding.ckpt")
    assert run_evaluate(capsys, "export-hf", tmp_path / "long_decoding.ckpt", tmp_path / "ok")[0] == 0
    assert load(tmp_path / "ok")[0].generation_config.max_length == model.config.max_len + 1


def test_an_export_is_not_imported_back(trained_export, capsys):
    """--hf reads Marian's own tokenizer files; an export has a tokenizer.json: the original checkpoint
    is the model to evaluate."""
    pytest.importorskip("sentencepiece")
    _, folder, _ = trained_export
    code, _, err = run_evaluate(capsys, "translate", folder, "x", "--hf")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"error: {folder}: this folder is an export of a model trained here (its tokenizer is "
        "tokenizer.json, not Marian's source.spm/target.spm); evaluate the original checkpoint")


def test_evaluate_names_what_does_not_map(tmp_path, capsys):
    run = train_tiny(tmp_path, "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0")
    code, _, err = run_evaluate(capsys, "export-hf", run / "checkpoints" / "last.ckpt", tmp_path / "hf")
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("error: norm_first=True (pre-LN) cannot be exported")


def test_overwrite_replaces_an_export_and_nothing_else(tmp_path, tokenizer):
    """--overwrite replaces a folder an export wrote, as a whole; a folder with anything else in it (a
    Marian model's source.spm, a user's notes beside a config.json) is refused, naming what is there, and
    keeps every file."""
    folder = tmp_path / "hf"
    export(random_model(tokenizer), tokenizer, tokenizer, folder)
    (folder / "special_tokens_map.json").write_text("{}", encoding="utf-8")  # as transformers 4 wrote
    export(random_model(tokenizer, d_model=8, num_heads=2), tokenizer, tokenizer, folder, overwrite=True)
    written = {p.name for p in folder.iterdir()}
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= written
    assert "special_tokens_map.json" not in written  # none of the old files stay
    assert load(folder)[0].config.d_model == 8
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging folder left beside it

    def refused(files: dict[str, str], message: str) -> None:
        other = tmp_path / "other"
        shutil.rmtree(other, ignore_errors=True)
        other.mkdir()
        for name, text in files.items():
            (other / name).write_text(text, encoding="utf-8")
        with pytest.raises(EngineError) as caught:
            export(random_model(tokenizer), tokenizer, tokenizer, other, overwrite=True)
        assert str(caught.value) == message.format(other=other)
        assert {p.name: p.read_text(encoding="utf-8") for p in other.iterdir()} == files

    besides = "--overwrite replaces only a folder written by evaluate.py export-hf, and {other} holds "
    refused({"config.json": "{}", "notes.txt": "mine"}, besides + "notes.txt besides; choose another name")
    marian = json.dumps({"model_type": "marian"})
    refused({"config.json": marian, "source.spm": "", "target.spm": "", "vocab.json": "{}"},
            besides + "source.spm, target.spm, vocab.json besides; choose another name")
    refused({"config.json": marian, "model.safetensors": ""},
            "--overwrite replaces only a folder written by evaluate.py export-hf, and {other}'s config.json "
            "is not an export's; choose another name")
    refused({f"{i}.txt": "" for i in range(7)}, besides + "0.txt, 1.txt, 2.txt, 3.txt, 4.txt and 2 more "
                                                         "besides; choose another name")


def test_evaluate_overwrites_no_folder_it_did_not_write(trained_export, capsys, tmp_path):
    _, _, checkpoint = trained_export
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "notes.txt").write_text("keep", encoding="utf-8")
    code, _, err = run_evaluate(capsys, "export-hf", checkpoint, folder, "--overwrite")
    assert code == 1
    message = (f"error: --overwrite replaces only a folder written by evaluate.py export-hf, and {folder} "
               "holds notes.txt besides; choose another name")
    assert err.strip().splitlines() == [message]
    assert (folder / "notes.txt").read_text(encoding="utf-8") == "keep"


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(args[1] if len(args) > 1 else args[0]))


SERIALIZING = "Error while serializing: I/O error: No space left on device (os error 28)"  # safetensors'
FULL_DISK = {  # what fails to write (as the library that writes it reports a full disk), and the file named
    "weights": ("transformers.modeling_utils.safe_save_file", SafetensorError(SERIALIZING),
                f"model.safetensors: {SERIALIZING}"),
    "tokenizer": ("transformers.PreTrainedTokenizerFast._save_pretrained",
                  Exception("No space left on device (os error 28)"),
                  "tokenizer.json: No space left on device (os error 28)"),
    "config": ("transformers.PretrainedConfig.to_json_file", None, "config.json: No space left on device"),
}


@pytest.mark.parametrize("fails", list(FULL_DISK))
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_folder(trained_export, capsys, tmp_path,
                                                                      monkeypatch, fails):
    _, _, checkpoint = trained_export
    target, error, message = FULL_DISK[fails]

    def full(*args, **kwargs):
        if error is None:
            no_space(*args)
        raise error

    monkeypatch.setattr(target, full)
    out = tmp_path / "exports" / "hf"
    code, _, err = run_evaluate(capsys, "export-hf", checkpoint, out)
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: cannot write {out}/{message}"
    assert "Traceback" not in err  # above it, transformers' progress bar only
    assert list((tmp_path / "exports").iterdir()) == []  # nothing half-written, no staging folder


def test_the_export_folder_is_checked_before_the_checkpoint_is_read(capsys, tmp_path, monkeypatch):
    """A file where a folder should be, or a parent one cannot write into, is said first (the checkpoint
    named does not even exist), naming the path given."""
    a_file = tmp_path / "a_file"
    a_file.write_text("", encoding="utf-8")
    code, _, err = run_evaluate(capsys, "export-hf", tmp_path / "missing.ckpt", a_file / "sub")
    assert code == 1
    assert err.strip().splitlines() == [f"error: {a_file / 'sub'}: {a_file} is a file, not a folder"]
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != read_only and access(path, mode))
    code, _, err = run_evaluate(capsys, "export-hf", tmp_path / "missing.ckpt", read_only / "sub" / "hf")
    assert code == 1
    assert err.strip().splitlines() == [f"error: {read_only / 'sub' / 'hf'}: {read_only} is not writable"]


def test_a_failed_write_names_the_folder_asked_for_not_its_staging_folder(tmp_path, tokenizer, monkeypatch):
    """What os.access cannot foresee (a read-only mount, as root): the error names the folder asked for."""
    import tempfile

    def read_only(*, dir, prefix):
        raise OSError(errno.EROFS, "Read-only file system", str(Path(dir) / f"{prefix}k2j4"))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(EngineError) as caught:
        export(random_model(tokenizer), tokenizer, tokenizer, tmp_path / "hf")
    assert str(caught.value) == f"cannot write {tmp_path / 'hf'}: Read-only file system"


def test_every_exported_file_has_the_mode_of_a_new_file(tmp_path, tokenizer):
    mask = os.umask(0o022)
    try:
        export(random_model(tokenizer), tokenizer, tokenizer, tmp_path / "hf")
    finally:
        os.umask(mask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "hf").iterdir()}
    assert modes == dict.fromkeys(modes, 0o644) and "model.safetensors" in modes
    assert stat.S_IMODE((tmp_path / "hf").stat().st_mode) == 0o755


def test_features_are_renumbered_into_halves():
    assert halves_order(6).tolist() == [0, 2, 4, 1, 3, 5]


def test_inseq_attributes_an_exported_model(trained_export):
    inseq = pytest.importorskip("inseq")
    run, folder, _ = trained_export
    text = run.datamodule.pairs("test")[0].source
    attributed = inseq.load_model(str(folder), "saliency").attribute(text, show_progress=False)
    sequence = attributed.sequence_attributions[0]
    source_tokens = [t.token for t in sequence.source]
    assert source_tokens == run.datamodule.src_tokenizer.tokens(run.datamodule.src_tokenizer.encode(text)) + [
        SPECIALS.eos]
    assert sequence.source_attributions.shape[0] == len(source_tokens)
