"""The ATTENTION tab's explanation lab: the routes ``explanation``, ``lens``, ``explanations``, ``translate``
with a method and the statistics' definitions, against the functions that compute them, over real tiny runs.
"""

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from analysis.explain.attributions import IG_STEPS_PREVIEW
from analysis.explain.registry import METHODS
from analysis.explain.scores import alignment_scores
from analysis.heads import STATISTICS
from evaluation.explanations import explain_pass, explanation_alignment, lens_of, lens_record
from evaluation.forced import sentence_pass
from evaluation.translate import translate_hypotheses
from tests.conftest import read_events, short_tsv_corpus, train_tiny
from tests.helpers.tab_client import get, rewritten, serve
from training.checkpoints import load_run
from viz.tab.events import leader

LAYERS, HEADS = 2, 2  # configs/tiny.yaml
IG_STEPS = 8  # configs/tiny.yaml's ig_steps
LAST = 12  # the step of the tiny run's last validation, whose weights last.ckpt holds


@pytest.fixture(scope="module")
def lab(tiny_run):
    """(client, run name, the run's last checkpoint loaded)."""
    logdir = tiny_run.parent.parent
    client, _ = serve(logdir)
    return client, tiny_run.relative_to(logdir).as_posix(), load_run(tiny_run / "checkpoints" / "last.ckpt")


def probe(lab, sentence: int):
    """The probe sentence's (source, target) and its ids, as /runs lists it."""
    client, _, loaded = lab
    (described,) = get(client, "/runs")["runs"]
    text = described["sentences"][sentence]
    dm = loaded.datamodule
    return text, dm.src_tokenizer.encode(text["source"]), dm.tgt_tokenizer.encode(text["target"])


def explained_sentence(model, src_ids, tgt_ids, methods=tuple(METHODS), *, finished=True, ig_steps=IG_STEPS):
    """Every method's explanation and the logit lens of one sentence, through the one teacher-forced pass."""
    seen = sentence_pass(model, src_ids, tgt_ids, finished=finished)
    return explain_pass(seen, methods, ig_steps=ig_steps), lens_of(model, seen)


def test_runs_lists_every_method_with_its_layers_the_lens_and_the_scored_steps(lab):
    client, _, loaded = lab
    (described,) = get(client, "/runs")["runs"]
    assert [m["name"] for m in described["methods"]] == list(METHODS)  # attention first, in registry order
    _, src_ids, tgt_ids = probe(lab, 0)
    explained, _ = explained_sentence(loaded.module.model, src_ids, tgt_ids)
    for entry in described["methods"]:
        e = explained[entry["name"]]
        assert entry == {"name": e.method, "label": METHODS[e.method].label,
                         "per_head": e.per_head is not None, "signed": e.signed, "layers": list(e.layers)}
    assert described["has_lens"] and described["explanation_steps"] == [6, LAST]


@pytest.mark.parametrize("method", list(METHODS))
def test_a_methods_map_equals_the_one_pass_over_the_checkpoint(lab, method):
    client, run, loaded = lab
    text, src_ids, tgt_ids = probe(lab, 1)
    answer = get(client, f"/explanation?run={run}&step={LAST}&sentence=1&method={method}")
    explained, _ = explained_sentence(loaded.module.model, src_ids, tgt_ids, [method])
    e = explained[method]
    dm = loaded.datamodule
    assert answer["rows"] == dm.tgt_tokenizer.tokens(tgt_ids) + ["</s>"]
    assert answer["cols"] == dm.src_tokenizer.tokens(src_ids) + ["</s>"]
    assert (answer["method"], answer["label"], answer["layers"]) == (method, METHODS[method].label,
                                                                     list(e.layers))
    T, S = len(answer["rows"]), len(answer["cols"])
    per_layer = torch.tensor(answer["per_layer"])
    assert per_layer.shape == (len(e.layers), T, S)
    # float16 in the event file: 3 significant digits
    torch.testing.assert_close(per_layer, e.per_layer[0], atol=1e-3, rtol=2e-3)
    if e.per_head is None:
        assert answer["per_head"] is None and answer["aer"]["per_head"] is None
    else:
        per_head = torch.tensor(answer["per_head"])
        assert per_head.shape == (LAYERS, HEADS, T, S)
        torch.testing.assert_close(per_head, e.per_head[0], atol=1e-3, rtol=2e-3)
    # The gold links and the map's AER, as analysis.explain.scores scores the full-precision map.
    pair = next(p for p in dm.pairs("val") if p.source == text["source"])
    assert {(col, row) for row, col in answer["gold"]} == set(pair.alignment)
    expected = alignment_scores(e, [set(pair.alignment)])
    assert answer["aer"]["per_layer"] == pytest.approx([row.aer for row in expected.layers], abs=1e-4)
    if e.per_head is not None:
        assert np.allclose(answer["aer"]["per_head"], expected.heads.aer, atol=1e-4)


def test_the_attention_method_is_the_logged_cross_weights_and_their_head_mean(lab):
    client, run, _ = lab
    cross = get(client, f"/attention?run={run}&step={LAST}&sentence=0&kind=cross&layer=1&head=1")
    answer = get(client, f"/explanation?run={run}&step={LAST}&sentence=0&method=attention")
    assert answer["per_head"][1][1] == cross["weights"]
    heads = torch.tensor(answer["per_head"])  # (L, H, T, S)
    torch.testing.assert_close(torch.tensor(answer["per_layer"]), heads.mean(dim=1), atol=1e-4, rtol=0)


def test_the_last_layer_of_the_lens_is_the_models_own_output(lab):
    client, run, loaded = lab
    _, src_ids, tgt_ids = probe(lab, 0)
    answer = get(client, f"/lens?run={run}&step={LAST}&sentence=0")
    model, tgt_tok = loaded.module.model, loaded.datamodule.tgt_tokenizer
    produced = tgt_ids + [model.config.eos_id]
    assert answer["rows"] == tgt_tok.tokens(produced) and answer["layers"] == ["layer 1", "layer 2"]
    src = torch.tensor([src_ids + [model.config.eos_id]])
    tgt_in = torch.tensor([[model.config.bos_id] + tgt_ids])
    with torch.no_grad():
        probs = model(src, tgt_in).float().softmax(dim=-1)[0]  # (T, V): what the model itself outputs
    T = len(produced)
    own = probs[torch.arange(T), torch.tensor(produced)]
    torch.testing.assert_close(torch.tensor(answer["produced_prob"][-1]), own, atol=1e-4, rtol=0)
    top = probs.topk(3, dim=-1)
    assert answer["top_tokens"][-1] == [tgt_tok.tokens(ids) for ids in top.indices.tolist()]
    torch.testing.assert_close(torch.tensor(answer["top_probs"][-1]), top.values, atol=1e-4, rtol=0)
    assert answer["produced_rank"][-1] == (probs > own[:, None]).sum(dim=-1).tolist()
    # Every layer as the lens function reads it.
    _, lens = explained_sentence(model, src_ids, tgt_ids, [])
    expected = lens_record(lens, tgt_tok)
    assert answer["top_tokens"] == expected["top_tokens"]
    assert answer["produced_rank"] == expected["produced_rank"]
    assert np.allclose(answer["produced_prob"], expected["produced_prob"], atol=1e-4)


def test_explanation_scores_are_the_logged_scalars_and_the_leader_has_the_lowest_best_aer(lab, tiny_run):
    client, run, loaded = lab
    answer = get(client, f"/explanations?run={run}&step={LAST}")
    events = read_events(tiny_run)

    def scalar(tag, step):
        # Lightning files a validation's scalars under the step before (11 for the tensors' 12).
        values = sorted((e.step, e.value) for e in events.Scalars(tag))
        return values[[6, LAST].index(step)][1]

    assert list(answer["methods"]) == list(METHODS)  # the tiny config scores every method
    for name, method in answer["methods"].items():
        assert method["label"] == METHODS[name].label
        for layer, aer, agreement in zip(method["layers"], method["aer"], method["agreement"], strict=True):
            key = layer.replace(" ", "_")
            assert aer == pytest.approx(scalar(f"explain/{name}/aer_{key}", LAST), abs=1e-4)
            assert agreement == pytest.approx(scalar(f"explain/{name}/agreement_{key}", LAST), abs=1e-4)
        assert method["best"]["aer"] == pytest.approx(scalar(f"explain/{name}/best_aer", LAST), abs=1e-4)
        assert method["best"]["aer"] == min(method["aer"])
        assert [s for s, _ in answer["history"][name]] == [6, LAST]
        for step, best in answer["history"][name]:
            assert best == pytest.approx(scalar(f"explain/{name}/best_aer", step), abs=1e-4)
    # Per head: a recomputation over the tiny config's 8 explanation sentences with the final weights.
    dm = loaded.datamodule
    scores = explanation_alignment(loaded.module.model, dm.src_tokenizer, dm.tgt_tokenizer,
                                   dm.pairs("val")[:8], methods=["attention", "value_norms", "grad_x_input"])
    for name in ("attention", "value_norms"):
        assert np.allclose(answer["methods"][name]["head_aer"], scores[name].heads.aer, atol=1e-4)
        assert np.allclose(answer["methods"][name]["head_agreement"], scores[name].heads.agreement, atol=1e-4)
        assert answer["methods"][name]["best"]["layer"] == scores[name].best.layer
    assert answer["methods"]["grad_x_input"]["head_aer"] is None
    winner = min(answer["methods"], key=lambda name: answer["methods"][name]["best"]["aer"])
    assert answer["leader"]["method"] == winner
    assert answer["leader"]["aer"] == answer["methods"][winner]["best"]["aer"]


def test_the_leader_is_the_lowest_best_aer_since_the_first_step_of_its_unbroken_lead():
    order = ["attention", "shift_att", "rollout"]
    history = {
        "attention": {1: 0.5, 2: 0.3, 3: 0.2, 4: 0.2, 5: 0.1},
        "shift_att": {1: 0.4, 2: 0.35, 3: 0.25, 4: 0.2, 5: 0.3},
        "rollout": {2: 0.1, 3: 0.3},  # scored at two steps only: it leads at step 2 and breaks the run
    }
    assert leader(history, order, 1) == {"method": "shift_att", "aer": 0.4, "since_step": 1}
    assert leader(history, order, 2) == {"method": "rollout", "aer": 0.1, "since_step": 2}
    assert leader(history, order, 3) == {"method": "attention", "aer": 0.2, "since_step": 3}
    # A tie goes to the first method in order: attention still leads at step 4.
    assert leader(history, order, 4) == {"method": "attention", "aer": 0.2, "since_step": 3}
    assert leader(history, order, 5) == {"method": "attention", "aer": 0.1, "since_step": 3}
    assert leader(history, order, 9) is None  # nothing logged at that step


@pytest.mark.parametrize("method, ig_steps", [("value_norms", None), ("integrated_gradients", 4)])
def test_translate_with_a_method_explains_the_models_own_translation(lab, method, ig_steps):
    client, run, loaded = lab
    model, dm = loaded.module.model, loaded.datamodule
    text = next(p.source for p in dm.pairs("test") if len(p.source.split()) >= 4)
    steps = "" if ig_steps is None else f"&ig_steps={ig_steps}"
    steps_asked = IG_STEPS_PREVIEW if ig_steps is None else ig_steps  # the route's default
    answer = get(client, f"/translate?run={run}&text={text.replace(' ', '%20')}&method={method}{steps}")
    ((ids, finished),) = translate_hypotheses(model, dm.src_tokenizer, dm.tgt_tokenizer, [text])
    assert answer["translation"] == dm.tgt_tokenizer.decode(ids)
    src_ids = dm.src_tokenizer.encode(text)
    explained, lens = explained_sentence(model, src_ids, ids, [method], finished=finished,
                                         ig_steps=steps_asked)
    e, shown = explained[method], answer["explanation"]
    cross = answer["kinds"]["cross"]
    assert (shown["rows"], shown["cols"]) == (cross["rows"], cross["cols"])
    assert (shown["method"], shown["layers"], shown["signed"]) == (method, list(e.layers), e.signed)
    assert "gold" not in shown and "aer" not in shown
    torch.testing.assert_close(torch.tensor(shown["per_layer"]), e.per_layer[0], atol=1e-4, rtol=0)
    if e.per_head is not None:
        torch.testing.assert_close(torch.tensor(shown["per_head"]), e.per_head[0], atol=1e-4, rtol=0)
    assert answer["lens"] == {"rows": shown["rows"]} | lens_record(lens, dm.tgt_tokenizer)


def test_integrated_gradients_steps_change_the_typed_sentences_map(lab):
    client, run, _ = lab
    path = f"/translate?run={run}&text=the%20dog%20saw%20a%20cat&method=integrated_gradients"
    few, many = get(client, path + "&ig_steps=1"), get(client, path + "&ig_steps=32")
    assert few["explanation"]["per_layer"] != many["explanation"]["per_layer"]


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/explanation?run={run}&step=12&sentence=0&method=saliency", 400,
         ("unknown method 'saliency'; expected one of attention, shift_att, value_norms, rollout, "
          "grad_x_input, integrated_gradients")),
        ("/explanation?run={run}&step=12&sentence=0", 400, "missing query parameter 'method'"),
        ("/explanation?run={run}&step=7&sentence=0&method=rollout", 404,
         "no rollout maps of sentence 0 at step 7 (logged steps: 6, 12)"),
        ("/explanation?run={run}&step=12&sentence=5&method=rollout", 404, "no probe sentence 5"),
        ("/lens?run={run}&step=7&sentence=0", 404, "no logit lens of sentence 0 at step 7"),
        ("/explanations?run={run}&step=7", 404, "no explanation scores at step 7 (logged steps: 6, 12)"),
        ("/translate?run={run}&text=a%20dog&method=saliency", 400, "unknown method 'saliency'"),
        ("/translate?run={run}&text=a%20dog&method=integrated_gradients&ig_steps=33", 400,
         "ig_steps must be between 1 and 32, got 33"),
        ("/translate?run={run}&text=a%20dog&method=integrated_gradients&ig_steps=0", 400,
         "ig_steps must be between 1 and 32, got 0"),
        ("/translate?run={run}&text=a%20dog&method=rollout&ig_steps=many", 400,
         "'ig_steps' must be an integer"),
    ],
)
def test_bad_explanation_requests_get_a_4xx_with_a_clear_message(lab, path, status, message):
    client, run, _ = lab
    assert message in get(client, path.format(run=run), status=status)["error"]


def test_statistics_serve_their_definitions_in_reading_order(lab):
    client, run, _ = lab
    answer = get(client, f"/statistics?run={run}&step={LAST}")
    assert answer["definitions"] == [dataclasses.asdict(s) for s in STATISTICS]
    names = [d["name"] for d in answer["definitions"]]
    assert names == ["entropy", "distance", "diagonal", "previous", "next", "agreement", "aer"]
    served = {name for named in answer["kinds"].values() for name in named}
    assert served <= set(names)


def _without(run_dir, copy, dropped: str):
    """A copy of a run's event files without the summaries whose tag contains ``dropped``."""
    return rewritten(run_dir, copy, lambda value: dropped not in value.tag)


def test_a_method_the_run_did_not_log_is_a_404_and_not_listed(tiny_run, tmp_path):
    _without(tiny_run, tmp_path / "logs" / "copy", "explain/rollout")
    client, _ = serve(tmp_path / "logs")
    (described,) = get(client, "/runs")["runs"]
    assert [m["name"] for m in described["methods"]] == [m for m in METHODS if m != "rollout"]
    error = get(client, "/explanation?run=copy&step=12&sentence=0&method=rollout", status=404)["error"]
    assert error == ("run 'copy' logged no rollout maps of sentence 0 (its probes have maps of attention, "
                     "shift_att, value_norms, grad_x_input, integrated_gradients)")
    get(client, "/explanation?run=copy&step=12&sentence=0&method=shift_att")
    assert "rollout" not in get(client, "/explanations?run=copy&step=12")["methods"]


@pytest.fixture(scope="module")
def no_gold_run(tmp_path_factory):
    """A one-epoch tiny run on a tsv corpus: no gold alignment."""
    folder = tmp_path_factory.mktemp("tsv")
    corpus = short_tsv_corpus(folder / "corpus")
    return train_tiny(folder / "runs", "--data.dataset", "tsv", "--data.path", str(corpus),
                      "--trainer.max_epochs", "1", "--data.tokenizer", "word")


def test_without_gold_links_every_method_is_served_without_aer(no_gold_run):
    logdir = no_gold_run.parent.parent
    client, _ = serve(logdir)
    run = no_gold_run.relative_to(logdir).as_posix()
    (described,) = get(client, "/runs")["runs"]
    assert not described["has_gold"] and described["explanation_steps"] == []
    assert [m["name"] for m in described["methods"]] == list(METHODS) and described["has_lens"]
    step = described["steps"][-1]
    for method in METHODS:
        answer = get(client, f"/explanation?run={run}&step={step}&sentence=0&method={method}")
        assert answer["gold"] is None and answer["aer"] is None
        assert np.isfinite(answer["per_layer"]).all()
    get(client, f"/lens?run={run}&step={step}&sentence=0")
    error = get(client, f"/explanations?run={run}&step={step}", status=404)["error"]
    assert "no gold alignment" in error


def test_a_copied_run_without_checkpoint_still_serves_the_logged_explanations(tiny_run, tmp_path):
    copy = tmp_path / "logs" / "copy"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    client, _ = serve(tmp_path / "logs")
    assert get(client, "/explanation?run=copy&step=12&sentence=0&method=value_norms")["aer"] is not None
    assert get(client, "/explanations?run=copy&step=12")["leader"] is not None


@pytest.mark.parametrize(
    "dropped, reason",
    [
        ("explain/", "it was trained with --attention.explanation_sentences 0"),
        ("attention/explain/", "they did not fit in --attention.max_bytes (the explain/* scalars have them)"),
    ],
)
def test_no_explanation_scores_on_data_with_gold_links_names_the_real_reason(tiny_run, tmp_path, dropped,
                                                                             reason):
    _without(tiny_run, tmp_path / "logs" / "copy", dropped)
    client, _ = serve(tmp_path / "logs")
    assert get(client, "/runs")["runs"][0]["has_gold"]
    error = get(client, "/explanations?run=copy&step=12", status=404)["error"]
    assert error == f"run 'copy' logged no explanation scores although its data has gold alignments: {reason}"
