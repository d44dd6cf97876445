"""evaluate.py MODEL --hf: a Marian model saved by transformers, imported into this project's Transformer
with its SentencePiece tokenizer, computes transformers' own logits, tokens and attention weights, and
evaluate.py scores, translates and analyses it unchanged. Everything is built here
(tests/helpers/marian_model.py): a tiny SentencePiece model trained on a few sentences and a small random
MarianMTModel, saved with save_pretrained (no network)."""

import json
import shutil
import sys
from contextlib import contextmanager

import pytest
import torch

from tests.conftest import last_json, run_evaluate

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from data.special import SPECIALS
from data.tokenizer import tokenizer_from_json
from data.words import NO_WORD, encode_words
from export.ctranslate2 import EngineError
from export.marian import NEW, load_marian
from tests.helpers.marian_model import ENGLISH, GERMAN, save_marian

VARIANTS = {
    "shared": {},
    "separate vocabularies": {"separate": True},
    "untied relu": {"tie_word_embeddings": False, "activation_function": "relu"},
    "gelu unscaled": {"activation_function": "gelu", "scale_embedding": False},
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def saved(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian") / request.param.replace(" ", "_")
    marian, tokenizer = save_marian(folder, **VARIANTS[request.param])
    return folder, marian, tokenizer, load_marian(str(folder))


def ours_of(imported, hf_ids: list[int], side: str) -> list[int]:
    to_hf = imported.src_to_hf if side == "source" else imported.to_hf
    from_hf = {hf_id: i for i, hf_id in enumerate(to_hf) if hf_id != NEW}
    return [from_hf[i] for i in hf_ids]


def test_the_ids_keep_this_projects_specials_and_a_new_padding(saved):
    imported = saved[3]
    assert imported.to_hf[:4] == [NEW, 2, 0, 1]  # pad (new), BOS = Marian's pad, EOS, unk
    assert sorted(imported.to_hf[1:]) == list(range(len(imported.to_hf) - 1))
    assert imported.tgt_tokenizer.tokens([1, 2, 3]) == ["<pad>", "</s>", "<unk>"]


def test_the_tokenizer_encodes_and_decodes_as_marians(saved):
    _, _, tokenizer, imported = saved
    for german, english in zip(GERMAN, ENGLISH):
        source = tokenizer(german, add_special_tokens=False).input_ids
        assert imported.src_tokenizer.encode(german) == ours_of(imported, source, "source")
        target = tokenizer(text_target=english, add_special_tokens=False).input_ids
        ids = imported.tgt_tokenizer.encode(english)
        assert ids == ours_of(imported, target, "target")
        assert imported.tgt_tokenizer.decode([SPECIALS.bos_id, *ids, SPECIALS.eos_id]) == tokenizer.decode(
            target, skip_special_tokens=True)
        assert imported.tgt_tokenizer.tokens(ids) == tokenizer.convert_ids_to_tokens(target)
    assert "<unk>" in imported.tgt_tokenizer.decode([SPECIALS.unk_id])  # never silently dropped


def test_the_tokenizer_is_restored_from_its_json_as_a_checkpoint_holds_it(saved):
    imported = saved[3]
    for tokenizer, text in ((imported.src_tokenizer, GERMAN[1]), (imported.tgt_tokenizer, ENGLISH[1])):
        restored = tokenizer_from_json(tokenizer.to_json())
        ids = tokenizer.encode(text)
        assert restored.encode(text) == ids and restored.decode(ids) == tokenizer.decode(ids) == text
        assert restored.tokens(range(restored.vocab_size)) == tokenizer.tokens(range(tokenizer.vocab_size))
    for damaged in ('{"sentencepiece_model": "not base64!", "tokens": []}',
                    '{"sentencepiece_model": "YWJj", "tokens": ["<pad>", "<s>", "</s>", "<unk>", "a"]}'):
        with pytest.raises(ValueError, match="^not a SentencePiece tokenizer JSON"):
            tokenizer_from_json(damaged)


def test_each_piece_belongs_to_the_word_it_spells_also_after_normalisation(saved):
    """SentencePiece's offsets count the text as given: a full-width letter that NFKC makes ASCII is still
    its word's, a lone ▁ is no word's, and each word's pieces spell it."""
    tokenizer = saved[3].src_tokenizer
    words = GERMAN[0].split()  # der große hund sieht eine katze
    read = encode_words(tokenizer, words)
    pieces = tokenizer.tokens(read.ids)
    spelled = ["" for _ in words]
    for piece, word in zip(pieces, read.words):
        if word == NO_WORD:
            assert piece == "▁"
        else:
            spelled[word] += piece.lstrip("▁")
    assert spelled == words
    wide = encode_words(tokenizer, ["ｄer", *words[1:]])  # NFKC reads ｄ as d
    assert wide.ids == read.ids and wide.words == read.words


def batch(tokenizer, imported):
    """Two source sentences, the second padded: Marian's ids and mask, and ours."""
    hf = tokenizer(GERMAN[:2], return_tensors="pt", padding=True)
    rows = [[*imported.src_tokenizer.encode(s), SPECIALS.eos_id] for s in GERMAN[:2]]
    width = hf.input_ids.size(1)
    return hf, torch.tensor([row + [SPECIALS.pad_id] * (width - len(row)) for row in rows])


def test_logits_and_attention_weights_are_transformers_own(saved):
    _, marian, tokenizer, imported = saved
    model = imported.model()
    hf, src = batch(tokenizer, imported)
    targets = [tokenizer(text_target=t, add_special_tokens=False).input_ids for t in ENGLISH[:2]]
    length = max(map(len, targets)) + 1
    hf_tgt = torch.tensor([[2, *t] + [2] * (length - 1 - len(t)) for t in targets])  # start, target, padding
    tgt = torch.tensor([[1, *ours_of(imported, t, "target")] + [0] * (length - 1 - len(t)) for t in targets])
    real_tgt = tgt != SPECIALS.pad_id
    marian.config._attn_implementation = "eager"  # attention weights returned
    with torch.no_grad():
        theirs = marian(input_ids=hf.input_ids, attention_mask=hf.attention_mask, decoder_input_ids=hf_tgt,
                        decoder_attention_mask=real_tgt.long(), output_attentions=True)
        logits, maps = model(src, tgt, return_attention=True)
    expected = theirs.logits[..., imported.to_hf[1:]]
    torch.testing.assert_close(logits[..., 1:][real_tgt], expected[real_tgt], atol=1e-5, rtol=1e-5)
    assert torch.isneginf(logits[..., 0]).all()  # the new padding is never predicted
    real_src = hf.attention_mask.bool()
    for ours, hf_maps, rows in ((maps.encoder, theirs.encoder_attentions, real_src),
                                (maps.decoder, theirs.decoder_attentions, real_tgt),
                                (maps.cross, theirs.cross_attentions, real_tgt)):
        assert len(ours) == len(hf_maps) == 2
        for layer, hf_layer in zip(ours, hf_maps):  # (B, H, Tq, Tk) both
            torch.testing.assert_close(layer.transpose(1, 2)[rows], hf_layer.transpose(1, 2)[rows],
                                       atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_greedy_and_beam_tokens_are_generates(saved, beam_size):
    _, marian, tokenizer, imported = saved
    model = imported.model()
    ended = 0
    for german in GERMAN:
        src = torch.tensor([[*imported.src_tokenizer.encode(german), SPECIALS.eos_id]])
        limit = 2 * src.size(1) + 10  # Transformer.generate's default
        ours = model.generated_ids(model.generate(src, beam_size=beam_size, length_penalty=0.0))[0]
        hf = tokenizer(german, return_tensors="pt")
        theirs = marian.generate(**hf, num_beams=beam_size, length_penalty=0.0, max_new_tokens=limit,
                                 max_length=None, forced_eos_token_id=None, early_stopping=False,
                                 bad_words_ids=[[2]], do_sample=False)[0, 1:].tolist()
        ended += 0 in theirs
        theirs = theirs[: theirs.index(0)] if 0 in theirs else theirs
        assert [imported.to_hf[i] for i in ours] == theirs, german
        assert imported.tgt_tokenizer.decode(ours) == tokenizer.decode(theirs, skip_special_tokens=True)
    assert ended  # some sentences end with EOS rather than at the limit


def test_what_does_not_map_is_refused_in_one_line(tmp_path):
    save_marian(tmp_path / "heads", decoder_attention_heads=2)
    with pytest.raises(EngineError, match=r"^\S+: encoder_attention_heads=4 and "
                                          r"decoder_attention_heads=2 differ"):
        load_marian(str(tmp_path / "heads"))
    save_marian(tmp_path / "tanh", activation_function="tanh")
    with pytest.raises(EngineError, match=r"^\S+: activation_function='tanh' cannot be imported"):
        load_marian(str(tmp_path / "tanh"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineError, match=r"^\S+: no config.json in the folder"):
        load_marian(str(tmp_path / "empty"))


def test_an_imported_model_is_not_exported_again(saved, tmp_path):
    """Its logits bias and new padding have no CTranslate2 counterpart, and export --hf would rebuild a Marian
    model from a Marian model: both refuse it and name why."""
    from export.ctranslate2 import check_exportable
    from export.huggingface import export

    imported = saved[3]
    with pytest.raises(EngineError, match="^this model was imported from a Marian model .*: CTranslate2 "):
        check_exportable(imported.model())
    with pytest.raises(EngineError, match="imported from a Marian model"):
        export(imported.model(), imported.src_tokenizer, imported.tgt_tokenizer, tmp_path / "again")


# -- evaluate.py on an imported model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian_cli") / "opus-mt-de-en"
    marian, tokenizer = save_marian(folder)
    tsv = folder.parent / "de_en.tsv"
    tsv.write_text("".join(f"{g}\t{e}\n" for g, e in zip(GERMAN, ENGLISH)), encoding="utf-8")
    return folder, marian, tokenizer, tsv


def test_evaluate_translates_an_imported_model_as_generate_does(shared_model, capsys, tmp_path):
    folder, marian, tokenizer, _ = shared_model
    code, out, err = run_evaluate(capsys, "translate", folder, GERMAN[0], "--hf",
                                  "--attention-out", tmp_path / "maps")
    assert code == 0, err
    hf = tokenizer(GERMAN[0], return_tensors="pt")
    theirs = marian.generate(**hf, num_beams=1, max_new_tokens=2 * hf.input_ids.size(1) + 10, max_length=None,
                             forced_eos_token_id=None, bad_words_ids=[[2]])
    assert out.strip() == tokenizer.decode(theirs[0], skip_special_tokens=True)
    written = {p.name for p in (tmp_path / "maps" / "sentence_1").iterdir()}
    assert any(name.endswith(".png") for name in written) and any(name.endswith(".html") for name in written)


def test_evaluate_scores_and_ranks_the_heads_of_an_imported_model(shared_model, capsys, tmp_path):
    folder, _, _, tsv = shared_model
    code, out, err = run_evaluate(capsys, folder, "--hf", "--tsv", tsv, "--head-importance",
                                  "--importance-sentences", "2", "--prune-heads", "2",
                                  "--analysis-out", tmp_path / "analysis", "--quiet")
    assert code == 0, err
    result = last_json(out)
    assert result["hf_model"] == str(folder) and result["checkpoint"] is None
    assert {"bleu", "chrf", "head_importance", "pruned_heads"} <= set(result)
    assert len(result["pruned_heads"]) == 2


def test_analyses_of_an_imported_model_go_into_its_folder_not_where_evaluate_runs(shared_model, capsys,
                                                                                   tmp_path, monkeypatch):
    """Without --analysis-out, a model folder's analyses go into <folder>/analysis (as a run's go into
    <run>/analysis), never into a relative analysis/ folder: run from the project, its source package."""
    folder = tmp_path / "opus-mt-de-en"
    shutil.copytree(shared_model[0], folder)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    code, _, err = run_evaluate(capsys, folder, "--hf", "--tsv", shared_model[3], "--head-importance",
                                "--importance-sentences", "2", "--quiet")
    assert code == 0, err
    assert list((tmp_path / "cwd").iterdir()) == []
    assert any(p.suffix == ".json" for p in (folder / "analysis").iterdir())
    code, _, err = run_evaluate(capsys, "Helsinki-NLP/opus-mt-de-en", "--hf", "--tsv", shared_model[3],
                                "--head-importance")
    assert code == 1
    assert err.strip().splitlines() == [("error: Helsinki-NLP/opus-mt-de-en is no folder here, so its "
                                         "analyses have no folder to go into: give --analysis-out DIR")]
    assert list((tmp_path / "cwd").iterdir()) == []


def test_explanation_methods_on_pairs_without_gold_point_to_a_gold_set(shared_model, capsys):
    folder, _, _, tsv = shared_model
    code, _, err = run_evaluate(capsys, "explain", folder, "--hf", "--tsv", tsv, "--methods", "attention")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "error: explain needs data with gold word alignments (toy, copy, reverse); for other pairs, give a "
        "gold set: --gold-alignments LINKS --gold-sentences FILE")


@pytest.mark.parametrize(("args", "message"), [
    (["some/model", "--hf"], "--hf: a transformers model has no data of its own: give --tsv FILE"),
    (["some/model", "--hf", "--test-split", "t"], "--hf: a transformers model has no data of its own"),
    (["some/model", "--hf", "--tsv", "x.tsv", "--average-last", "2"],
     "argument --average-last: not allowed with argument --hf"),
    (["score-ctranslate2", "some/model", "--hf", "--tsv", "x.tsv"], "unrecognized arguments: --hf"),
    (["export-hf", "some/model", "out", "--hf"], "unrecognized arguments: --hf"),
])
def test_evaluate_refuses_what_an_imported_model_has_not(capsys, args, message):
    with pytest.raises(SystemExit):
        run_evaluate(capsys, *args)
    assert message in capsys.readouterr().err


def test_evaluate_needs_a_model(capsys):
    with pytest.raises(SystemExit):
        run_evaluate(capsys, "translate", "--hf")
    assert "the following arguments are required: MODEL, TEXT" in capsys.readouterr().err


def unlink(name):
    return lambda folder: (folder / name).unlink()


def without_unk(folder):
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    del vocab["<unk>"]
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")


def with_config(**changes):
    """Damage to config.json: ``changes`` written over its settings, the weights left as they are."""
    def damage(folder):
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")

    return damage


def truncated(folder):  # as `head -c 3000` leaves it
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:3000])


BROKEN = {  # what is done to a Marian folder, and the message that names it
    "no source.spm": (unlink("source.spm"),
                      "no source.spm (Marian's source SentencePiece model) in the folder"),
    "no vocab.json": (unlink("vocab.json"), "no vocab.json (Marian's vocabulary) in the folder"),
    "garbage source.spm": (lambda folder: (folder / "source.spm").write_bytes(b"not a model"),
                           "source.spm is not a SentencePiece model"),
    "no <unk>": (without_unk, "vocab.json has no <unk> entry, which Marian's tokenizer needs"),
    "config not the weights'": (
        with_config(vocab_size=99, decoder_vocab_size=99),
        ("its weights do not have the sizes its config.json gives: vocab_size=99, but model.shared.weight in "
         "model.safetensors has 40 rows"),
    ),
    "no weights": (unlink("model.safetensors"),
                   "cannot read its weights (Error no file named model.safetensors"),
    "truncated weights": (
        truncated,
        "cannot read its weights: model.safetensors is not a whole safetensors file (Error while",
    ),
    "no config.json": (unlink("config.json"),
                       "no config.json in the folder (the model's settings, which save_pretrained writes)"),
    "config.json without a type": (lambda folder: (folder / "config.json").write_text("{}", encoding="utf-8"),
                                   "config.json names no model_type"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_broken_marian_folder_is_refused_in_one_line_naming_the_option(shared_model, capsys, tmp_path,
                                                                          broken):
    folder = tmp_path / "opus-mt-de-en"
    shutil.copytree(shared_model[0], folder)
    damage, message = BROKEN[broken]
    damage(folder)
    code, _, err = run_evaluate(capsys, folder, "--hf", "--tsv", shared_model[3], "--quiet")
    assert code == 1
    assert err.strip().splitlines()[-1].startswith(f"error: {folder}: {message}")


@contextmanager
def no_more_memory_than(extra: int):
    """Allocations past this process's address space now plus ``extra`` bytes fail (a MemoryError, or torch's
    RuntimeError) instead of exhausting the machine (Linux)."""
    resource = pytest.importorskip("resource")
    with open("/proc/self/statm") as statm:
        now = int(statm.read().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (now + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


HUGE = {  # config.json's damage, the weights unchanged; the line that refuses it
    "vocabulary": (
        {"vocab_size": 10**9},
        ("its weights do not have the sizes its config.json gives: vocab_size=1000000000, but "
         "model.shared.weight in model.safetensors has 40 rows"),
    ),
    "layers": ({"encoder_layers": -1, "max_position_embeddings": 10**12},
               "config.json: encoder_layers=-1 is not a whole number from 1"),
    "more layers": (
        {"decoder_layers": 3},
        ("its weights do not have the sizes its config.json gives: decoder_layers=3, but model.safetensors "
         "holds 2 decoder layers"),
    ),
    "positions": (
        {"max_position_embeddings": 10**12},
        ("config.json: max_position_embeddings=1000000000000 would make position tables of 174.6 TiB (3 of "
         "max_position_embeddings × d_model float32 numbers), more than this machine's "),
    ),
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the address space is limited on Linux")
@pytest.mark.parametrize("damage", list(HUGE))
def test_a_config_json_that_does_not_fit_its_weights_is_refused_before_it_is_allocated(shared_model, capsys,
                                                                                         tmp_path, damage):
    """Sizes are compared with the weights' shapes (read from the safetensors header) before anything is
    sized from config.json: within 1 GiB more memory, where vocab_size 10**9 would take tens of GiB."""
    folder = tmp_path / "opus-mt-de-en"
    shutil.copytree(shared_model[0], folder)
    changes, message = HUGE[damage]
    with_config(**changes)(folder)
    with no_more_memory_than(2**30):
        code, _, err = run_evaluate(capsys, "translate", folder, GERMAN[0], "--hf")
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"error: {folder}: {message}"), lines[-1]


def test_weights_saved_by_torch_are_compared_with_config_json_too(shared_model, tmp_path):
    """Older Hub models hold pytorch_model.bin: its shapes are read memory-mapped; a damaged one is named."""
    from safetensors.torch import load_file

    folder = tmp_path / "opus-mt-de-en"
    shutil.copytree(shared_model[0], folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    assert load_marian(str(folder)).config.src_vocab_size == 41  # and a new padding
    with_config(vocab_size=10**9)(folder)
    with pytest.raises(EngineError, match=r": vocab_size=1000000000, but model.shared.weight in "
                                          r"pytorch_model.bin has 40 rows$"):
        load_marian(str(folder))
    weights = folder / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[:3000])
    with pytest.raises(EngineError, match=r": cannot read its weights: pytorch_model.bin is not a whole "):
        load_marian(str(folder))


def tiny_t5(folder):
    from transformers import T5Config, T5ForConditionalGeneration

    T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=16, num_layers=1,
                                        num_heads=2)).save_pretrained(folder)


def tiny_bart_with_marians_tokenizer(folder):
    """A BART model beside a Marian tokenizer's files: the model type decides, not the files."""
    from transformers import BartConfig, BartForConditionalGeneration

    BartForConditionalGeneration(BartConfig(
        vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32,
    )).save_pretrained(folder)
    save_marian(folder.parent / "marian")
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        (folder / name).write_bytes((folder.parent / "marian" / name).read_bytes())


@pytest.mark.parametrize(("save", "model_type"),
                         [(tiny_t5, "t5"), (tiny_bart_with_marians_tokenizer, "bart")])
def test_a_model_that_is_not_marian_is_refused_by_its_type(tmp_path, capsys, save, model_type):
    save(tmp_path / "model")
    code, _, err = run_evaluate(capsys, "translate", tmp_path / "model", "x", "--hf")
    assert code == 1
    assert err.strip().splitlines()[-1] == (f"error: {tmp_path / 'model'}: model type "
                                            f"{model_type!r} is not Marian: only Marian models are imported")


@pytest.mark.parametrize("path", ["/no/such/model", "./no-such-model", "../no/such", "runs/no/such/model"])
def test_a_path_that_names_no_folder_is_not_looked_up_on_the_hub(capsys, path):
    code, _, err = run_evaluate(capsys, "translate", path, "x", "--hf")
    assert code == 1 and err.strip().splitlines()[-1] == f"error: {path}: no such folder"


def test_a_folder_under_home_is_read_with_its_tilde(shared_model, capsys, tmp_path, monkeypatch):
    shutil.copytree(shared_model[0], tmp_path / "opus-mt-de-en")
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_evaluate(capsys, "translate", "~/opus-mt-de-en", GERMAN[0], "--hf")
    assert code == 0, err


def test_a_file_is_not_a_model_folder(shared_model, capsys):
    tsv = shared_model[3]
    code, _, err = run_evaluate(capsys, "translate", tsv, "x", "--hf")
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: {tsv}: is a file, not a model folder"
