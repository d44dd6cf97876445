"""Training with a gold alignment set named in the data: every explanation method scored on its words at each
validation (viz.logger), and the ATTENTION tab's summary, badges and gold cells on them (viz.tab)."""

import json

import numpy as np
import pytest
from tensorboard.util import tensor_util

from analysis.explain.registry import METHODS
from data.gold import GoldSet
from evaluation.gold_alignment import gold_alignment, gold_items
from tests.conftest import GOLD, read_events, train_chinese
from tests.helpers.tab_client import get, serve
from training.checkpoints import load_run


@pytest.fixture(scope="module")
def gold_logged_run(tmp_path_factory):
    """A one-epoch English → Chinese run (BPE) whose data names a three-pair gold set."""
    folder = tmp_path_factory.mktemp("gold_logging")
    sentences, links = folder / "en-zh.src-tgt", folder / "en-zh.gold"
    sentences.write_text("\n".join(GOLD["sentences"]) + "\n", encoding="utf-8")
    links.write_text("\n".join(GOLD["links"]) + "\n", encoding="utf-8")
    return train_chinese(
        folder, "--data.gold.sentences", str(sentences), "--data.gold.alignments", str(links),
        "--attention.every_n_epochs", "1", "--attention.explanation_sentences", "3",
        "--attention.max_tokens", "64",
    )


def tensor(events, tag):
    return tensor_util.make_ndarray(events.Tensors(tag)[-1].tensor_proto)


def test_scores_on_the_gold_words_are_logged_as_evaluate_computes_them(gold_logged_run):
    events = read_events(gold_logged_run)
    scalars = set(events.Tags()["scalars"])
    for name in METHODS:
        layers = ("embeddings",) if METHODS[name].gradients else ("layer_1", "layer_2")
        assert {f"explain/{name}/aer_{layer}" for layer in layers} <= scalars
        assert f"explain/{name}/best_aer" in scalars
    run = load_run(gold_logged_run / "checkpoints" / "last.ckpt")
    dm, model = run.datamodule, run.module.model
    gold = dm.gold_set()
    assert len(gold.pairs) == 3 and gold.dropped == 1
    items = gold_items(GoldSet(gold.pairs), dm.src_tokenizer, dm.tgt_tokenizer, model.config.max_len, "gold")
    scores = gold_alignment(model, items, methods=["attention", "value_norms"], extractions=["argmax"])
    for name, method in scores.items():
        logged = tensor(events, f"attention/explain/{name}/aer")
        np.testing.assert_allclose(logged, method.per_layer["argmax"].aer, atol=1e-6)
        np.testing.assert_allclose(tensor(events, f"attention/explain/{name}/head_aer"),
                                   method.per_head["argmax"].aer, atol=1e-6)
        last = events.Scalars(f"explain/{name}/aer_layer_2")[-1].value
        assert last == pytest.approx(method.per_layer["argmax"].aer[1], abs=1e-6)

    # The probes are gold pairs: their gold links drawn on their tokens' cells, their words beside them.
    text = json.loads(tensor(events, "attention/sentence_0/text").item())
    assert text["source"] == GOLD["sentences"][0].split(" ||| ")[0]
    words = text["gold_words"]
    assert len(words["source_words"]) == len(text["source_tokens"])
    assert len(words["target_words"]) == len(text["target_out"])
    assert words["sure"] == [[i, i] for i in range(6)] and words["possible"] == []
    # every word has a token of its own here: each is read as itself
    assert words["source_readers"] == list(range(words["source_count"]))
    assert words["target_readers"] == list(range(words["target_count"]))
    cells = {tuple(cell) for cell in text["gold"]}
    expected = {(row, col) for row, t in enumerate(words["target_words"])
                for col, s in enumerate(words["source_words"]) if t >= 0 and [t, s] in words["sure"]}
    assert cells == expected and len(cells) >= 6  # a word of several tokens owns several cells


def test_the_tab_summarises_and_badges_the_gold_scores(gold_logged_run):
    logdir = gold_logged_run.parent.parent
    client, _ = serve(logdir)
    run = gold_logged_run.relative_to(logdir).as_posix()
    (described,) = get(client, "/runs")["runs"]
    assert described["has_gold"] and described["explanation_steps"]
    step = described["explanation_steps"][-1]
    summary = get(client, f"/explanations?run={run}&step={step}")
    assert summary["leader"]["method"] in METHODS and set(summary["methods"]) == set(METHODS)
    for method in METHODS:
        answer = get(client, f"/explanation?run={run}&step={step}&sentence=0&method={method}")
        layers = 1 if METHODS[method].gradients else 2
        assert answer["gold"] and len(answer["aer"]["per_layer"]) == layers
        assert all(0.0 <= aer <= 1.0 for aer in answer["aer"]["per_layer"])
        if not METHODS[method].gradients:
            assert np.array(answer["aer"]["per_head"]).shape == (2, 2)


def test_malformed_gold_words_make_the_run_malformed():
    from viz.tab.events import MalformedRun, sentence_text

    text = {"source": "a b", "target": "x", "source_tokens": ["▁a", "b", "</s>"], "target_in": ["<s>", "▁x"],
            "target_out": ["▁x", "</s>"], "gold": [[0, 0], [0, 1]],
            "gold_words": {"source_words": [0, 0, -1], "target_words": [0, -1], "source_count": 1,
                           "target_count": 1, "sure": [[0, 0]], "possible": []}}

    def read(record):
        return sentence_text("r", 0, {1: np.array(json.dumps(record), dtype=object)})

    assert read(text)["gold_words"]["sure"] == [[0, 0]]
    assert read({**text, "gold_words": {**text["gold_words"], "source_readers": [0]}})  # optional, when right
    for field, bad in (("source_words", [0, 1, -1]), ("target_words", [0]), ("sure", [[1, 0]]),
                       ("source_count", True), ("source_readers", [1]), ("target_readers", [0, 0])):
        with pytest.raises(MalformedRun, match="malformed 'gold_words'"):
            read({**text, "gold_words": {**text["gold_words"], field: bad}})


def test_a_gold_set_without_a_sure_link_stops_training_before_its_first_step(tmp_path):
    """Every link past its sentence's end: no sure link is left to score against, so every method's AER
    would be 1.0 whatever the model does. Training refuses the set in one line before it trains, by the
    rule evaluate.py --gold-alignments refuses it with (test_evaluate_gold)."""
    sentences, links = tmp_path / "en-zh.src-tgt", tmp_path / "en-zh.gold"
    sentences.write_text("\n".join(GOLD["sentences"]) + "\n", encoding="utf-8")
    links.write_text("9-9\n9-9 8p8\n9-9\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        train_chinese(tmp_path, "--data.gold.sentences", str(sentences), "--data.gold.alignments", str(links),
                      "--attention.every_n_epochs", "1", "--attention.explanation_sentences", "3")
    assert stopped.value.code == f"error: {links}: the 3 pairs scored have no sure gold link to score against"
    assert not list((tmp_path / "runs").rglob("*.ckpt"))  # refused before the first step
