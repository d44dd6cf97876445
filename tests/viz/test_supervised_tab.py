"""A run whose training supervises one cross-attention head (guided alignment) on a gold set larger than the
pairs scored at each validation: its run summary names the head, and each method's map, chosen on the scored
pairs, is reported on the others as evaluate.py explain --gold-choose reports it (viz.logger, viz.tab)."""

import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from tensorboard.util import tensor_util

from tests.conftest import CHINESE_PAIRS, GOLD, last_json, read_events, run_evaluate, train_chinese
from tests.helpers.tab_client import get, serve
from viz.logger import Reporting
from viz.tab.events import MalformedRun, reported_map, supervised_head

REPORTED = ("attention", "value_norms", "grad_x_input")


@pytest.fixture(scope="module")
def supervised_run(tmp_path_factory):
    """A one-epoch English → Chinese run (BPE) whose layer 2 head 1 follows a links file, with a three-pair
    gold set of which the first is scored at each validation: (run dir, gold sentences, gold links)."""
    folder = tmp_path_factory.mktemp("supervised")
    sentences, links, labels = folder / "en-zh.src-tgt", folder / "en-zh.gold", folder / "train.align"
    sentences.write_text("\n".join(GOLD["sentences"]) + "\n", encoding="utf-8")
    links.write_text("\n".join(GOLD["links"]) + "\n", encoding="utf-8")
    # Each training pair's last English word to its Chinese sentence, one word unsegmented.
    labels.write_text("".join(f"{len(en.split()) - 1}-0\n" for en, _ in CHINESE_PAIRS * 4), encoding="utf-8")
    run = train_chinese(
        folder, "--data.gold.sentences", str(sentences), "--data.gold.alignments", str(links),
        "--attention.every_n_epochs", "1", "--attention.explanation_sentences", "1",
        "--attention.explanation_methods", json.dumps(list(REPORTED)), "--attention.max_tokens", "64",
        "--model.alignment_layer", "2", "--model.alignment_head", "1", "--data.alignment_labels", str(labels),
    )
    return run, sentences, links


def test_the_run_summary_and_runs_name_the_supervised_head(supervised_run):
    run_dir, _, _ = supervised_run
    events = read_events(run_dir)
    logged = json.loads(tensor_util.make_ndarray(events.Tensors("attention/run")[0].tensor_proto).item())
    head = {"layer": 2, "head": 1, "labels": "train.align", "weight": 0.05, "shifted": False,
            "full_context": False, "null": False}
    assert logged == {"every_n_epochs": 1, "supervised": head}
    logdir = run_dir.parent.parent
    client, _ = serve(logdir)
    (described,) = get(client, "/runs")["runs"]
    assert described["supervised"] == head


def test_the_reported_aer_is_evaluate_pys_on_the_same_parts(supervised_run, tmp_path, capsys):
    """Chosen on gold pair 1 and reported on pairs 2-3 at the last validation: the figure evaluate.py
    --gold-choose 1 prints for the forward arg-max of the same checkpoint."""
    run_dir, sentences, links = supervised_run
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    code, stdout, err = run_evaluate(capsys, "explain", checkpoint, "--gold-alignments", links,
                                     "--gold-sentences", sentences, "--methods", *REPORTED,
                                     "--gold-choose", "1", "--analysis-out", tmp_path)
    assert code == 0, err
    result = last_json(stdout)
    assert result["parts"]["report"] == [2, 3]
    events = read_events(run_dir)
    assert "explain/reported_seconds" in events.Tags()["scalars"]
    for method in REPORTED:
        expected = result["best"][method]["argmax"]
        assert events.Scalars(f"explain/{method}/reported_aer")[-1].value == pytest.approx(expected["aer"])
        record = json.loads(tensor_util.make_ndarray(
            events.Tensors(f"attention/explain/{method}/reported")[-1].tensor_proto).item())
        assert (record["layer"], record["head"]) == (expected["layer"], expected["head"])
        assert record["chosen_aer"] == pytest.approx(expected["chosen_aer"])
        assert (record["choose"], record["report"]) == ([1, 1], [2, 3])


def test_the_explanations_route_gives_each_methods_chosen_map_and_its_reported_aer(supervised_run):
    run_dir, _, _ = supervised_run
    logdir = run_dir.parent.parent
    client, _ = serve(logdir)
    run = run_dir.relative_to(logdir).as_posix()
    (described,) = get(client, "/runs")["runs"]
    step = described["explanation_steps"][-1]
    answer = get(client, f"/explanations?run={run}&step={step}")
    events = read_events(run_dir)
    for method in REPORTED:
        reported = answer["methods"][method]["reported"]
        assert reported["aer"] == pytest.approx(events.Scalars(f"explain/{method}/reported_aer")[-1].value,
                                                abs=1e-4)
        assert (reported["choose"], reported["report"]) == ([1, 1], [2, 3])
        heads = answer["methods"][method]["head_aer"]
        if reported["head"] is not None:  # a head chosen: its AER on pair 1 is the lowest there
            assert reported["chosen_aer"] == pytest.approx(np.nanmin(heads), abs=1e-4)


def test_only_a_gold_set_with_pairs_past_the_scored_ones_reports():
    items = [SimpleNamespace(sure={(0, 0)}), SimpleNamespace(sure=set()), SimpleNamespace(sure={(1, 1)})]
    assert all(Reporting.of(items, scored) is None for scored in (3, 5, 0))  # no pair past the scored ones
    reporting = Reporting.of(items, 1)
    assert reporting.items == items[1:] and reporting.parts.as_dict()["report"] == [2, 3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Reporting.of(items[:2], 1) is None
    assert "gold pairs 2–2 have no sure link" in str(caught[0].message)


def logged(record: dict) -> dict[int, np.ndarray]:
    return {7: np.array(json.dumps(record), dtype=object)}


def test_a_malformed_supervised_head_or_reported_map_makes_the_run_malformed():
    assert supervised_head("r", logged({"every_n_epochs": 1})) is None
    head = {"layer": 1, "head": 2, "labels": "eflomal", "weight": 0.05}
    read = supervised_head("r", logged({"every_n_epochs": 1, "supervised": head}))
    assert read == {**head, "shifted": False, "full_context": False, "null": False}  # logged before them
    shifted = {**head, "shifted": True, "full_context": True, "null": True}
    assert supervised_head("r", logged({"every_n_epochs": 1, "supervised": shifted})) == shifted
    for bad in ({**head, "layer": 0}, {**head, "head": True}, {**head, "labels": 3}, {**head, "shifted": 1},
                {**head, "full_context": "yes"}, {**head, "null": 0}, [1, 2]):
        with pytest.raises(MalformedRun, match="malformed 'supervised'"):
            supervised_head("r", logged({"every_n_epochs": 1, "supervised": bad}))
    row = {"layer": "layer 2", "head": None, "aer": 0.41234, "chosen_aer": 0.3, "choose": [1, 100],
           "report": [101, 582], "apart": True}
    assert reported_map("r", "rollout", logged(row), 7) == {
        "layer": "layer 2", "head": None, "aer": 0.4123, "chosen_aer": 0.3, "choose": [1, 100],
        "report": [101, 582]}
    assert reported_map("r", "rollout", logged(row), 8) is None  # nothing reported at that step
    with pytest.raises(MalformedRun, match="attention/explain/rollout/reported is malformed"):
        reported_map("r", "rollout", logged({**row, "report": [101]}), 7)
