"""evaluate.py make-run MODEL DIR --tsv FILE: a run folder made from an imported Marian model, which the
ATTENTION tab opens as it opens a training run: its logged maps are transformers' own attention weights, a
typed sentence translates to generate()'s tokens, and every head and explanation method answers. The tiny
model is tests/helpers/marian_model.py's (no network); the tab is driven as tests/viz/test_plugin.py drives
it."""

import urllib.parse

import pytest
import torch

from tests.conftest import run_evaluate

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from analysis.explain.registry import METHODS
from data.sentencepiece_tokenizer import SentencePieceTokenizer
from tests.helpers.marian_model import ENGLISH, GERMAN, save_marian
from tests.helpers.tab_client import get, serve
from training.checkpoints import load_run

LAYERS, HEADS = 2, 4  # save_marian's


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(logdir, run name, MarianMTModel, MarianTokenizer), the run written by evaluate.py make-run."""
    folder = tmp_path_factory.mktemp("marian_run")
    marian, tokenizer = save_marian(folder / "opus-mt-de-en", seed=1)  # seed 0's translations are all empty
    tsv = folder / "de_en.tsv"
    tsv.write_text("".join(f"{g}\t{e}\n" for g, e in zip(GERMAN, ENGLISH)), encoding="utf-8")
    import evaluate  # in this process, as run_evaluate, which needs a test's capsys

    code = evaluate.main(["make-run", str(folder / "opus-mt-de-en"), str(folder / "logs" / "opus-mt-de-en"),
                          "--tsv", str(tsv), "--quiet"])
    assert code == 0
    marian.config._attn_implementation = "eager"  # attention weights returned
    return folder / "logs", "opus-mt-de-en", marian, tokenizer


def generate(marian, tokenizer, text: str) -> list[int]:
    """transformers' greedy tokens of ``text`` under evaluate.py's length limit, without start and EOS."""
    hf = tokenizer(text, return_tensors="pt")
    ids = marian.generate(**hf, num_beams=1, max_new_tokens=2 * hf.input_ids.size(1) + 10, max_length=None,
                          forced_eos_token_id=None, bad_words_ids=[[2]])[0, 1:].tolist()
    return ids[: ids.index(0)] if 0 in ids else ids


def test_the_run_loads_with_its_sentencepiece_tokenizers_and_the_imported_weights(made):
    logdir, name, marian, tokenizer = made
    loaded = load_run(logdir / name / "checkpoints" / "last.ckpt")
    src, tgt = loaded.datamodule.src_tokenizer, loaded.datamodule.tgt_tokenizer
    assert isinstance(src, SentencePieceTokenizer) and isinstance(tgt, SentencePieceTokenizer)
    assert loaded.datamodule.pairs("val")[0].source == GERMAN[0]
    hf = tokenizer(GERMAN[1], return_tensors="pt")
    target = tokenizer(text_target=ENGLISH[1], add_special_tokens=False).input_ids
    src_ids = torch.tensor([[*src.encode(GERMAN[1]), 2]])  # + EOS
    tgt_ids = torch.tensor([[1, *tgt.encode(ENGLISH[1])]])  # BOS +
    assert tokenizer.convert_ids_to_tokens(hf.input_ids[0]) == src.tokens(src_ids[0].tolist())
    assert tokenizer.convert_ids_to_tokens(target) == tgt.tokens(tgt_ids[0, 1:].tolist())
    with torch.no_grad():
        theirs = marian(**hf, decoder_input_ids=torch.tensor([[2, *target]])).logits
        ours = loaded.module.model(src_ids, tgt_ids)
    columns = tokenizer.convert_tokens_to_ids(tgt.tokens(range(4, tgt.vocab_size)))  # Marian's id of ours
    torch.testing.assert_close(ours[..., 4:], theirs[..., columns], atol=1e-5, rtol=1e-5)


def test_the_tab_lists_the_run_with_every_layer_and_head_of_transformers_own_maps(made):
    logdir, name, marian, tokenizer = made
    client, _ = serve(logdir)
    (described,) = get(client, "/runs")["runs"]
    assert described["run"] == name and described["can_translate"] and described["steps"] == [0]
    assert described["num_layers"] == {"encoder": LAYERS, "decoder": LAYERS, "cross": LAYERS}
    assert described["num_heads"] == HEADS
    assert [m["name"] for m in described["methods"]] == list(METHODS) and described["has_lens"]
    assert [(s["source"], s["target"]) for s in described["sentences"]] == list(zip(GERMAN, ENGLISH))[:4]
    answer = get(client, f"/attention?run={name}&step=0&sentence=1")
    hf = tokenizer(GERMAN[1], return_tensors="pt")
    target = tokenizer(text_target=ENGLISH[1], add_special_tokens=False).input_ids
    with torch.no_grad():
        theirs = marian(**hf, decoder_input_ids=torch.tensor([[2, *target]]), output_attentions=True)
    assert answer["kinds"]["cross"]["cols"] == tokenizer.convert_ids_to_tokens(hf.input_ids[0])
    for kind, maps in (("encoder", theirs.encoder_attentions), ("decoder", theirs.decoder_attentions),
                       ("cross", theirs.cross_attentions)):
        logged = torch.tensor(answer["kinds"][kind]["weights"])  # (L, H, Tq, Tk), float16 in the event file
        torch.testing.assert_close(logged, torch.stack([layer[0] for layer in maps]), atol=1e-3, rtol=0)
    for method in described["methods"]:  # every explanation method's logged map, of every layer it has
        explained = get(client, f"/explanation?run={name}&step=0&sentence=1&method={method['name']}")
        assert explained["layers"] == method["layers"]
        assert torch.tensor(explained["per_layer"]).shape == (len(method["layers"]), *logged.shape[2:])
    lens = get(client, f"/lens?run={name}&step=0&sentence=1")
    assert lens


def test_your_own_sentence_translates_to_generates_tokens_with_every_head(made):
    logdir, name, marian, tokenizer = made
    client, _ = serve(logdir)
    said = 0
    for text in GERMAN:
        quoted = urllib.parse.quote(text)
        answer = get(client, f"/translate?run={name}&text={quoted}&beam=1&method=grad_x_input&ig_steps=4")
        theirs = generate(marian, tokenizer, text)
        assert answer["translation"] == tokenizer.decode(theirs, skip_special_tokens=True)
        rows = answer["kinds"]["cross"]["rows"]  # the translation's tokens, and </s> where it ended
        assert rows[: len(theirs)] == tokenizer.convert_ids_to_tokens(theirs) and len(rows) - len(theirs) <= 1
        for kind in ("encoder", "decoder", "cross"):
            weights = torch.tensor(answer["kinds"][kind]["weights"])
            assert weights.shape[:2] == (LAYERS, HEADS)
        said += bool(theirs)
    assert said  # some translations are not empty


@pytest.mark.parametrize(("args", "message"), [
    (["--tsv", "x.tsv", "--average-last", "2"], "unrecognized arguments: --average-last 2"),
    ([], "one of the arguments --tsv --gold-alignments is required"),
])
def test_make_run_needs_an_imported_model_and_its_sentences(capsys, args, message):
    """A checkpoint of this project's is in its run already: make-run has none of a run's options."""
    with pytest.raises(SystemExit):
        run_evaluate(capsys, "make-run", "some/model", "out", *args)
    assert message in capsys.readouterr().err


def test_make_run_never_writes_into_a_folder_that_holds_files(made, capsys):
    logdir, name, _, _ = made
    code, _, err = run_evaluate(capsys, "make-run", "some/model", logdir / name, "--tsv", "x.tsv")
    assert code == 1 and f"error: {logdir / name} is not empty" in err


def test_an_interrupted_make_run_leaves_nothing_and_a_second_try_succeeds(made, capsys, tmp_path,
                                                                         monkeypatch):
    """Ctrl-C while the run is written (here: as its checkpoint is saved) leaves no half-made folder at DIR
    to block the next try, nor a staging folder beside it; the files the run names are at DIR."""
    from lightning.pytorch import Trainer

    logdir = made[0]
    model, tsv = logdir.parent / "opus-mt-de-en", logdir.parent / "de_en.tsv"
    out = tmp_path / "logs" / "again"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "save_checkpoint", interrupted)
        code, _, err = run_evaluate(capsys, "make-run", model, out, "--tsv", tsv, "--quiet")
    assert (code, err.strip().splitlines()[-1]) == (130, "Interrupted.")  # as train.py ends: 128 + SIGINT
    assert list(out.parent.iterdir()) == []
    code, _, err = run_evaluate(capsys, "make-run", model, out, "--tsv", tsv, "--quiet")
    assert code == 0, err
    assert [p.name for p in out.parent.iterdir()] == ["again"]
    loaded = load_run(out / "checkpoints" / "last.ckpt")
    assert loaded.datamodule.hparams["path"] == str((out / "data").resolve())
    assert str(out.resolve()) in (out / "hparams.yaml").read_text(encoding="utf-8")
    assert ".again." not in (out / "hparams.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("args", [["export-ctranslate2", "RUN", "ct2"], ["score-ctranslate2", "RUN"]])
def test_ctranslate2_refuses_a_run_made_from_an_imported_model_and_says_why(made, capsys, tmp_path, args):
    pytest.importorskip("ctranslate2")
    logdir, name, _, _ = made
    args = [{"ct2": tmp_path / "ct2", "RUN": logdir / name}.get(a, a) for a in args]
    code, _, err = run_evaluate(capsys, *args)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith(
        "error: this model was imported from a Marian model (logits_bias or scale_embedding false): "
        "CTranslate2 (export-ctranslate2, score-ctranslate2) is not supported for it")
    assert not (tmp_path / "ct2").exists()


def test_a_moved_run_and_a_missing_test_set_name_evaluate_pys_own_options(made, capsys, tmp_path):
    """A made run records its data folder: moved, its data is found again with --data-path, which the
    refusal names; a --test-split that is not in the data folder is named as evaluate.py's option, not as
    train.py's --data.test_split."""
    logdir = made[0]
    model, tsv = logdir.parent / "opus-mt-de-en", logdir.parent / "de_en.tsv"
    code, _, err = run_evaluate(capsys, "make-run", model, tmp_path / "made", "--tsv", tsv, "--quiet")
    assert code == 0, err
    code, _, err = run_evaluate(capsys, logdir / made[1], "--test-split", "nosuch", "--quiet")
    assert code == 1
    data = logdir / made[1] / "data"
    assert err.strip().splitlines()[-1] == (
        f"error: --test-split nosuch: {data.resolve() / 'nosuch.tsv'}: no such file in the run's data folder "
        "(leave --test-split out for the run's own test set)")
    moved = (tmp_path / "made").rename(tmp_path / "moved")
    code, _, err = run_evaluate(capsys, moved, "--quiet")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"error: {(tmp_path / 'made' / 'data' / 'train.tsv').resolve()}: no such file; if the run's data "
        "moved, give its folder with --data-path FOLDER")
    code, _, err = run_evaluate(capsys, moved, "--data-path", moved / "data", "--quiet")
    assert code == 0, err
