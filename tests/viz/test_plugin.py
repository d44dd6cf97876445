"""The ATTENTION tab's backend: its HTTP routes over the events of a real tiny training run.

The plugin runs inside TensorBoard's own WSGI application and data provider, driven by werkzeug's test client,
so the routes, the reading of the logged summaries and the error handling are those a browser gets.
"""

import ast
import dataclasses
import importlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import entry_points

import numpy as np
import pytest
import tomllib
import torch
from tensorboard.data import provider

from analysis.axes import ATTENTION_KINDS, KIND_LABELS, KINDS
from analysis.explain.attributions import IG_STEPS_PREVIEW, MAX_IG_STEPS
from analysis.explain.registry import METHODS
from analysis.heads import STATISTICS, summarize
from data.batching import collate
from data.tokenizer import Tokenizer
from evaluation.forced import sentence_pass
from evaluation.translate import translate
from tests.conftest import REPO, larger_tokenizer, tiny_config
from tests.helpers.tab_client import ROUTE, get, rewritten, serve
from training.checkpoints import load_run
from viz.fonts import UPRIGHT_TOKEN
from viz.tab.live import MAX_BEAM
from viz.tab.metadata import PLUGIN_NAME
from viz.tab.plugin import AttentionPlugin
from viz.tab.summary import json_summary

LAYERS, HEADS = 2, 2  # configs/tiny.yaml


@pytest.fixture(scope="module")
def board(tiny_run):
    """(client, plugin, run name, the run's last checkpoint loaded)."""
    logdir = tiny_run.parent.parent
    client, plugin = serve(logdir)
    return (
        client,
        plugin,
        tiny_run.relative_to(logdir).as_posix(),
        load_run(tiny_run / "checkpoints" / "last.ckpt"),
    )


def describe(board):
    client, _, run, _ = board
    (described,) = get(client, "/runs")["runs"]
    assert described["run"] == run
    return described


def test_runs_lists_steps_probe_sentences_and_shapes(board):
    _, _, _, loaded = board
    described = describe(board)
    assert described["steps"] == described["statistics_steps"] == [6, 12]  # one validation per epoch
    val = loaded.datamodule.pairs("val")
    assert [s["id"] for s in described["sentences"]] == [0, 1]
    # The probes are the first validation sentences short enough for the tiny config's max_tokens (12).
    probes = [p for p in val if max(len(p.source.split()), len(p.target.split())) + 1 <= 12][:2]
    assert [(s["source"], s["target"]) for s in described["sentences"]] == [
        (p.source, p.target) for p in probes
    ]
    assert described["num_layers"] == {"encoder": LAYERS, "decoder": LAYERS, "cross": LAYERS}
    assert described["num_heads"] == HEADS
    assert described["has_gold"] and described["can_translate"] and described["translate_note"] is None


def test_a_map_equals_the_models_return_attention_for_that_sentence(board):
    client, _, run, loaded = board
    sentence = describe(board)["sentences"][1]
    # The last validation (step 12) ran the weights that last.ckpt holds.
    answer = get(client, f"/attention?run={run}&step=12&sentence=1")
    assert (answer["source"], answer["target"]) == (sentence["source"], sentence["target"])
    src_tok, tgt_tok = loaded.datamodule.src_tokenizer, loaded.datamodule.tgt_tokenizer
    batch = collate([(0, src_tok.encode(sentence["source"]), tgt_tok.encode(sentence["target"]))])
    with torch.no_grad():
        _, maps = loaded.module.model(batch.src, batch.tgt_in, return_attention=True)
    source = src_tok.tokens(batch.src[0].tolist())
    target_in, target_out = (
        tgt_tok.tokens(batch.tgt_in[0].tolist()), tgt_tok.tokens(batch.tgt_out[0].tolist())
    )
    axes = {"encoder": (source, source), "decoder": (target_out, target_in), "cross": (target_out, source)}
    for kind, layers in zip(("encoder", "decoder", "cross"), maps):
        entry = answer["kinds"][kind]
        assert (entry["rows"], entry["cols"]) == axes[kind]
        logged = torch.tensor(entry["weights"])  # (L, H, Tq, Tk)
        assert logged.shape == (LAYERS, HEADS, len(axes[kind][0]), len(axes[kind][1]))
        torch.testing.assert_close(logged, torch.stack([w[0] for w in layers]), atol=1e-3, rtol=0)  # float16
    one = get(client, f"/attention?run={run}&step=12&sentence=1&kind=cross&layer=1&head=0")
    assert (one["rows"], one["cols"]) == axes["cross"]
    torch.testing.assert_close(torch.tensor(one["weights"]), maps.cross[1][0, 0], atol=1e-3, rtol=0)
    # Gold links as [row, column] cells of the cross map: target word t is generated at row t.
    words = {(s, t) for s, t in next(p.alignment for p in loaded.datamodule.pairs("val")
                                      if p.source == sentence["source"])}
    assert {(col, row) for row, col in answer["gold"]} == words
    assert one["gold"] == answer["gold"]


def test_each_step_serves_the_maps_of_the_weights_at_that_step(board, tiny_run):
    """Step 6 (the first validation) serves the maps of the first epoch's checkpoint, step 12 those of the
    last, and the two differ: the model learned between them."""
    client, _, run, last = board
    first = load_run(tiny_run / "checkpoints" / "epoch0-step6.ckpt")
    sentence = describe(board)["sentences"][0]
    served = {}
    for step, loaded in ((6, first), (12, last)):
        src_tok, tgt_tok = loaded.datamodule.src_tokenizer, loaded.datamodule.tgt_tokenizer
        batch = collate([(0, src_tok.encode(sentence["source"]), tgt_tok.encode(sentence["target"]))])
        with torch.no_grad():
            _, maps = loaded.module.model(batch.src, batch.tgt_in, return_attention=True)
        answer = get(client, f"/attention?run={run}&step={step}&sentence=0&kind=cross&layer=1&head=1")
        served[step] = torch.tensor(answer["weights"])  # (T, S)
        torch.testing.assert_close(served[step], maps.cross[1][0, 1], atol=1e-3, rtol=0)  # float16
    assert (served[6] - served[12]).abs().max() > 1e-2


def test_statistics_equal_the_head_statistics_of_the_checkpoint(board):
    client, _, run, loaded = board
    answer = get(client, f"/statistics?run={run}&step=12")
    datamodule = loaded.datamodule
    pairs = datamodule.pairs("val")[:20]  # the tiny config's stats_sentences
    items = [(i, datamodule.src_tokenizer.encode(p.source), datamodule.tgt_tokenizer.encode(p.target))
             for i, p in enumerate(pairs)]
    batch = collate(items)
    with torch.no_grad():
        _, maps = loaded.module.model(batch.src, batch.tgt_in, return_attention=True)
    expected = summarize(
        dict(zip(("encoder", "decoder", "cross"), maps)), src_valid=batch.src != 0,
        tgt_valid=batch.tgt_out != 0, gold=[set(p.alignment) for p in pairs],
    )
    assert list(answer["kinds"]) == ["encoder", "decoder", "cross"]
    for kind, named in expected.items():
        assert set(answer["kinds"][kind]) == set(named)
        for name, values in named.items():
            torch.testing.assert_close(torch.tensor(answer["kinds"][kind][name]), values, atol=2e-4, rtol=0)
    assert {"agreement", "aer", "entropy"} <= set(answer["descriptions"])


def test_translate_your_sentence_gives_the_translation_and_every_head(board):
    client, _, run, loaded = board
    model, datamodule = loaded.module.model, loaded.datamodule
    text = datamodule.pairs("test")[0].source
    for beam in (1, 3):
        answer = get(client, f"/translate?run={run}&text={text.replace(' ', '%20')}&beam={beam}")
        ids = translate(model, datamodule.src_tokenizer, datamodule.tgt_tokenizer, [text], beam_size=beam)[0]
        assert answer["translation"] == datamodule.tgt_tokenizer.decode(ids)
        assert (answer["checkpoint"], answer["step"], answer["beam"]) == ("last.ckpt", 12, beam)
        expected = sentence_pass(model, datamodule.src_tokenizer.encode(text), ids)
        axes = expected.tokens(datamodule.src_tokenizer, datamodule.tgt_tokenizer).axes
        for kind, layers in expected.sentence_maps().items():
            assert (answer["kinds"][kind]["rows"], answer["kinds"][kind]["cols"]) == axes[kind]
            torch.testing.assert_close(torch.tensor(answer["kinds"][kind]["weights"]), torch.stack(layers),
                                       atol=1e-4, rtol=0)


@pytest.mark.parametrize(("validation_beam", "used"), [(3, 3), (MAX_BEAM + 4, MAX_BEAM)])
def test_your_sentence_is_translated_with_the_runs_validation_beam_unless_another_is_asked(
        tiny_run, tmp_path, validation_beam, used):
    """The beam the run validates with (``decode_beam_size``), at most MAX_BEAM, when the request names none
    or ``run``; the answer says which beam it used, and the run's."""
    logs, copy = copied_run(tiny_run, tmp_path)
    last = copy / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"]["decode_beam_size"] = validation_beam
    torch.save(checkpoint, last)
    client, _ = serve(logs)
    loaded = load_run(last)
    model, datamodule = loaded.module.model, loaded.datamodule
    text = datamodule.pairs("test")[0].source
    asked = f"/translate?run=copy&text={text.replace(' ', '%20')}"
    for query, beam in (("", used), ("&beam=run", used), ("&beam=2", 2)):
        answer = get(client, asked + query)
        ids = translate(model, datamodule.src_tokenizer, datamodule.tgt_tokenizer, [text], beam_size=beam)[0]
        assert answer["translation"] == datamodule.tgt_tokenizer.decode(ids)
        assert (answer["beam"], answer["run_beam"]) == (beam, validation_beam)


def test_translating_writes_nothing_to_the_run_folder(board, tiny_run):
    client, _, run, _ = board
    before = {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")}
    get(client, f"/translate?run={run}&text=the%20dog%20saw%20a%20cat")
    assert {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")} == before


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/attention?run=nope&step=12&sentence=0", 404, "unknown run 'nope'"),
        ("/attention?run={run}&step=7&sentence=0", 404,
         "no attention of sentence 0 at step 7 (logged steps: 6, 12)"),
        ("/attention?run={run}&step=twelve&sentence=0", 400, "'step' must be an integer, got 'twelve'"),
        ("/attention?run={run}&sentence=0", 400, "missing query parameter 'step'"),
        ("/attention?run={run}&step=12&sentence=5", 404, "no probe sentence 5"),
        ("/attention?run={run}&step=12&sentence=0&kind=self&layer=0&head=0", 400, "unknown kind 'self'"),
        ("/attention?run={run}&step=12&sentence=0&kind=cross&layer=2&head=0", 400, "layer 2 is out of range"),
        ("/attention?run={run}&step=12&sentence=0&kind=cross&layer=0&head=-1", 400,
         "head -1 is out of range"),
        ("/attention?run={run}&step=12&sentence=0&kind=cross", 400, "missing query parameter 'layer'"),
        ("/statistics?run={run}&step=3", 404, "no head statistics at step 3"),
        ("/translate?run={run}&text=%20%20", 400, "the sentence is empty"),
        ("/translate?run={run}&text=" + "dog%20" * 60, 400, "has 239 characters; at most 200"),
        ("/translate?run={run}&text=a%20dog&beam=9", 400, "beam must be between 1 and 8, got 9"),
        ("/translate?run={run}&text=a%20dog&beam=wide", 400,
         "'beam' must be an integer or 'run' (the run's validation beam), got 'wide'"),
        ("/translate?run={run}&text=a%20dog&beam=0", 400, "beam must be between 1 and 8, got 0"),
        ("/translate?run=nope&text=a%20dog", 404, "unknown run 'nope'"),
        ("/static/plugin.py", 404, "no static file 'plugin.py'"),
        ("/static/..%2F..%2Fsetup.js", 404, "no static file"),
        ("/static/" + "a" * 253 + ".js", 404, "no static file 'aaaa"),  # longer than a file name may be
    ],
)
def test_bad_requests_get_a_4xx_with_a_clear_message(board, path, status, message):
    client, _, run, _ = board
    answer = get(client, path.format(run=run), status=status)
    assert message in answer["error"]


def test_a_second_translation_while_one_runs_is_refused(board):
    client, plugin, run, _ = board
    lock = plugin._live.lock(run)
    lock.acquire()
    try:
        answer = get(client, f"/translate?run={run}&text=a%20dog", status=429)
        assert "already running" in answer["error"]
    finally:
        lock.release()
    get(client, f"/translate?run={run}&text=a%20dog")


def test_a_run_without_checkpoint_shows_its_maps_but_cannot_translate(tiny_run, tmp_path):
    copy = tmp_path / "logs" / "copy"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    client, _ = serve(tmp_path / "logs")
    (described,) = get(client, "/runs")["runs"]
    assert not described["can_translate"] and "no checkpoint yet in" in described["translate_note"]
    get(client, "/attention?run=copy&step=12&sentence=0")
    assert "no checkpoint yet in" in get(client, "/translate?run=copy&text=a%20dog", status=404)["error"]


def test_a_logdir_without_runs_lists_no_run(tmp_path):
    client, _ = serve(tmp_path)
    assert get(client, "/runs") == {"runs": [], "waiting": {}, "skipped": {}}


def test_the_frontend_is_served_as_javascript_modules(board):
    client, plugin, _, _ = board
    assert plugin.frontend_metadata().es_module_path == "/index.js"
    response = client.get(ROUTE + "/index.js")
    assert response.status_code == 200 and response.mimetype == "text/javascript"
    assert re.search(r"^export (async )?function render\(", response.get_data(as_text=True), re.MULTILINE)


def declared_entry_point() -> str:
    """The ``module:attribute`` pyproject.toml registers for TensorBoard's ``tensorboard_plugins`` group."""
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return project["entry-points"]["tensorboard_plugins"][PLUGIN_NAME]


def test_pyproject_registers_the_plugin_where_it_lives():
    module, _, attribute = declared_entry_point().partition(":")
    assert getattr(importlib.import_module(module), attribute) is AttentionPlugin


def test_the_project_as_pip_installs_it_registers_the_plugin_with_tensorboards_loader(tmp_path, monkeypatch):
    """The metadata ``pip install -e .`` writes (the build backend's, from pyproject.toml), first on the path,
    is what TensorBoard's own loader of dynamic plugins reads: it loads this tab. Built here, whatever is
    installed in the environment."""
    from setuptools import build_meta
    from tensorboard.default import get_dynamic_plugins

    monkeypatch.chdir(REPO)
    built = tmp_path / build_meta.prepare_metadata_for_build_editable(str(tmp_path))
    for other in tmp_path.iterdir():  # the egg-info the dist-info was made from
        if other != built:
            shutil.rmtree(other)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert (built / "entry_points.txt").read_text().split() == [
        "[tensorboard_plugins]", PLUGIN_NAME, "=", declared_entry_point()
    ]
    assert AttentionPlugin in get_dynamic_plugins()


def test_the_installed_project_registers_the_plugin_with_tensorboard():
    """The environment's install (CI's, from requirements.txt) is the source's: an install older than a move
    of the plugin stops plain ``tensorboard`` at start-up."""
    found = [ep for ep in entry_points(group="tensorboard_plugins") if ep.name == PLUGIN_NAME]
    if not found:
        pytest.skip("the project is not installed (pip install -r requirements.txt installs it)")
    assert found[0].value == declared_entry_point(), (
        f"the installed entry point {found[0].value} is older than pyproject.toml's "
        f"{declared_entry_point()}; run pip install -e . again"
    )
    assert found[0].load() is AttentionPlugin


def test_launcher_skips_an_installed_entry_point_whose_module_has_moved(monkeypatch):
    """An install older than the source (its entry point names a module since moved) must not stop the
    launcher, which adds the tab from the source itself; other installed plugins still load."""
    from importlib.metadata import EntryPoint

    import viz.tab.__main__ as launcher

    stale = EntryPoint(PLUGIN_NAME, "no_such_package.plugin:AttentionPlugin", "tensorboard_plugins")
    other = EntryPoint("other", "tests.conftest:tiny_config", "tensorboard_plugins")
    monkeypatch.setattr(launcher, "entry_points",
                        lambda group: [stale, other] if group == "tensorboard_plugins" else [])
    plugins = launcher.other_plugins()
    assert plugins[-1] is tiny_config and AttentionPlugin not in plugins


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_launcher_serves_tensorboard_with_the_attention_tab(tiny_run):
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "viz.tab", "--logdir", str(tiny_run.parent.parent),
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        listing, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/data/plugins_listing", timeout=5
                ) as reply:
                    listing = json.load(reply)
                if listing.get(PLUGIN_NAME, {}).get("enabled"):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert listing is not None, (
            server.stderr.read().decode() if server.poll() is not None else "no answer"
        )
        assert listing[PLUGIN_NAME]["enabled"] and listing[PLUGIN_NAME]["tab_name"] == "Attention"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{ROUTE}/runs", timeout=10) as reply:
            (described,) = json.load(reply)["runs"]
        assert described["steps"] == [6, 12]
    finally:
        server.kill()
        server.wait(timeout=10)


# -- hostile requests and runs whose files change or mislead ------------------------------------------------

ROUTES = ("/runs", "/attention", "/statistics", "/translate", "/index.js", "/static/heatmap.js")


@pytest.mark.parametrize("method", ["DELETE", "PUT", "POST", "PATCH", "OPTIONS"])
def test_every_route_answers_methods_it_does_not_take_with_405(board, method):
    client, _, run, _ = board
    for route in ROUTES:
        response = client.open(ROUTE + route + f"?run={run}&step=12&sentence=0&text=a", method=method)
        assert response.status_code == 405, (route, response.status_code)
        assert response.headers["Allow"] == "GET, HEAD"
        assert f"method {method} is not allowed" in json.loads(response.get_data(as_text=True))["error"]
    assert client.head(ROUTE + "/runs").status_code == 200


def test_runs_reads_the_logged_tensors_once_per_newest_step(board, monkeypatch):
    client, plugin, run, _ = board
    first = get(client, "/runs")
    reads = []
    read = plugin._logged.provider.read_tensors
    monkeypatch.setattr(plugin._logged.provider, "read_tensors", lambda **kw: reads.append(kw) or read(**kw))
    assert get(client, "/runs") == first and reads == []  # the page asks every 30 s
    listing = plugin._logged.provider.list_tensors

    def newer(**kwargs):  # the run logs a later validation
        tags = listing(**kwargs)
        series = tags[run]["attention/sentence_0/text"]
        tags[run]["attention/sentence_0/text"] = provider.TensorTimeSeries(
            max_step=series.max_step + 6, max_wall_time=series.max_wall_time + 1,
            plugin_content=series.plugin_content, description=series.description,
            display_name=series.display_name,
        )
        return tags

    monkeypatch.setattr(plugin._logged.provider, "list_tensors", newer)
    assert get(client, "/runs") == first and reads  # read again (the stand-in step holds no new data)


def copied_run(tiny_run, tmp_path, *, checkpoints=True):
    """A copy of the tiny run in a log folder of its own: (log folder, run folder)."""
    logs = tmp_path / "logs"
    ignore = None if checkpoints else shutil.ignore_patterns("checkpoints")
    shutil.copytree(tiny_run, logs / "copy", ignore=ignore)
    return logs, logs / "copy"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: h.update(num_heads=3), "invalid model settings (d_model (32) must be divisible by num_"),
        (lambda h: h.update(d_model=[32]), 'malformed model settings: Parser key "d_model": Expected a'),
        (lambda h: h.update(d_model=64), "weights do not fit the saved model settings"),
        (lambda h: h.update(d_model=10**7), "invalid model settings (d_model must be at most 65536"),
    ],
)
def test_a_checkpoint_with_malformed_settings_is_a_422_naming_the_file(tiny_run, tmp_path, change, message):
    logs, copy = copied_run(tiny_run, tmp_path)
    last = copy / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    change(checkpoint["hyper_parameters"])
    torch.save(checkpoint, last)
    client, _ = serve(logs)
    error = get(client, "/translate?run=copy&text=a%20dog", status=422)["error"]
    assert error.startswith(f"{last.resolve()}: ") and message in error and "\n" not in error


def test_a_checkpoint_whose_settings_are_a_list_is_a_422(tiny_run, tmp_path):
    logs, copy = copied_run(tiny_run, tmp_path)
    last = copy / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"] = list(checkpoint["hyper_parameters"].items())
    torch.save(checkpoint, last)
    client, _ = serve(logs)
    error = get(client, "/translate?run=copy&text=a%20dog", status=422)["error"]
    assert error == f"{last.resolve()}: malformed checkpoint (hyper_parameters is a list, not a mapping)"


def test_a_checkpoint_deleted_while_the_tab_loads_it_is_read_again(tiny_run, tmp_path, monkeypatch):
    """Training rotates its epoch checkpoints (no last.ckpt yet): the chosen one goes before it is read."""
    from training import checkpoints

    logs, copy = copied_run(tiny_run, tmp_path)
    (copy / "checkpoints" / "last.ckpt").unlink()
    for best in (copy / "checkpoints").glob("best-*.ckpt"):
        best.unlink()
    load = checkpoints.load_run
    asked = []

    def rotating(path, **kwargs):
        asked.append(path.name)
        if len(asked) == 1:
            path.unlink()  # deleted between the choice and the read
        return load(path, **kwargs)

    monkeypatch.setattr(checkpoints, "load_run", rotating)
    client, _ = serve(logs)
    answer = get(client, "/translate?run=copy&text=the%20dog")
    assert asked == ["epoch1-step12.ckpt", "epoch0-step6.ckpt"]
    assert (answer["checkpoint"], answer["step"]) == ("epoch0-step6.ckpt", 6)

    def always_gone(path, **kwargs):
        raise checkpoints.CheckpointMissing(f"{path}: no such checkpoint file")

    monkeypatch.setattr(checkpoints, "load_run", always_gone)
    client, _ = serve(logs)  # nothing loaded yet
    error = get(client, "/translate?run=copy&text=the%20dog", status=409)["error"]
    assert "checkpoints of run 'copy' changed while they were read" in error


def test_a_checkpoint_link_to_a_file_outside_the_log_folder_is_refused(tiny_run, tmp_path):
    logs, copy = copied_run(tiny_run, tmp_path)
    outside = tmp_path / "outside.ckpt"
    last = copy / "checkpoints" / "last.ckpt"
    last.rename(outside)
    last.symlink_to(outside)
    client, _ = serve(logs)
    (described,) = get(client, "/runs")["runs"]
    assert not described["can_translate"] and "resolves to a file outside" in described["translate_note"]
    error = get(client, "/translate?run=copy&text=a%20dog", status=403)["error"]
    link = last.parent.resolve() / "last.ckpt"
    assert error == f"{link} resolves to a file outside {logs.resolve()}; refused"


def test_a_symbolic_link_loop_in_one_run_is_a_4xx_for_that_run_only(tiny_run, tmp_path):
    logs, _ = copied_run(tiny_run, tmp_path)
    shutil.copytree(tiny_run, logs / "loop", ignore=shutil.ignore_patterns("checkpoints"))
    (logs / "loop" / "checkpoints").symlink_to("checkpoints")  # ln -s checkpoints loop/checkpoints
    client, _ = serve(logs)
    copy, loop = get(client, "/runs")["runs"]
    assert (copy["run"], copy["can_translate"]) == ("copy", True)
    note = f"{logs.resolve() / 'loop' / 'checkpoints'}: a loop of symbolic links; refused"
    assert (loop["run"], loop["can_translate"], loop["translate_note"]) == ("loop", False, note)
    assert get(client, "/translate?run=loop&text=a%20dog", status=422)["error"] == note
    assert get(client, "/translate?run=copy&text=a%20dog")["checkpoint"] == "last.ckpt"


def _text_edit(change):
    """An edit of probe sentence 0's JSON text: ``change(text)`` gives the new bytes."""

    def edit(value):
        if value.tag == "attention/sentence_0/text":
            value.tensor.string_val[0] = change(json.loads(value.tensor.string_val[0]))
        return True

    return edit


def _versioned(version):
    def edit(value):
        if value.metadata.plugin_data.plugin_name == PLUGIN_NAME:
            value.metadata.plugin_data.content = json.dumps({"version": version}).encode()
        return True

    return edit


@pytest.mark.parametrize(
    "edit, reason",
    [
        (_text_edit(lambda text: b"{not json"), "attention/sentence_0/text is not a JSON object"),
        (_text_edit(lambda text: json.dumps({k: v for k, v in text.items() if k != "source"}).encode()),
         "attention/sentence_0/text lacks 'source'"),
        (_text_edit(lambda text: json.dumps(text | {"methods": [1]}).encode()),
         ("attention/sentence_0/text has malformed 'methods' (expected a list of {name, label, per_head, "
          "signed, layers})")),
        (_text_edit(lambda text: json.dumps(text | {"source": float("nan")}).encode()),
         "attention/sentence_0/text holds NaN, which is not JSON"),
        (_text_edit(lambda text: json.dumps(text | {"source_tokens": 5}).encode()),
         "attention/sentence_0/text has a malformed 'source_tokens' (expected a list of strings)"),
        (_text_edit(lambda text: json.dumps(text | {"target_in": text["target_in"][:1]}).encode()),
         "attention/sentence_0/text has 1 'target_in' tokens but 9 'target_out' tokens"),
        (_text_edit(lambda text: json.dumps(text | {"gold": [[99, 0]]}).encode()),
         ("attention/sentence_0/text has a malformed 'gold' (expected null or a list of [target, source] "
          "positions within 9 × 9)")),
        (_versioned(2), "logged with layout version 2 of the attention summaries; this tab reads version 1"),
        (_versioned("x"),
         "logged with layout version 'x' of the attention summaries; this tab reads version 1"),
    ],
)
def test_a_run_with_malformed_attention_data_is_skipped_and_named(tiny_run, tmp_path, edit, reason, caplog):
    logs, _ = copied_run(tiny_run, tmp_path, checkpoints=False)
    rewritten(tiny_run, logs / "bad", edit)
    client, _ = serve(logs)
    answer = get(client, "/runs")
    assert [run["run"] for run in answer["runs"]] == ["copy"]
    assert answer["skipped"] == {"bad": f"run 'bad' {reason}"}
    assert f"run 'bad' {reason}" in caplog.text
    assert get(client, "/attention?run=bad&step=12&sentence=0", status=409)["error"] == f"run 'bad' {reason}"


def _nan_cross(value):
    """Probe sentence 0's cross weights with a NaN in every row, as a diverged run logs them."""
    if value.tag == "attention/sentence_0/cross":
        weights = np.frombuffer(value.tensor.tensor_content, dtype="<f2").copy()
        weights[::3] = np.nan
        value.tensor.tensor_content = weights.tobytes()
    return True


def test_non_finite_logged_weights_are_served_as_null(tiny_run, tmp_path):
    rewritten(tiny_run, tmp_path / "logs" / "nan", _nan_cross)
    client, _ = serve(tmp_path / "logs")
    cross = np.array(get(client, "/attention?run=nan&step=12&sentence=0")["kinds"]["cross"]["weights"],
                     dtype=float)  # None -> nan
    assert np.isnan(cross.reshape(-1)[::3]).all() and np.isfinite(cross.reshape(-1)[1::3]).all()
    answer = get(client, "/explanation?run=nan&step=12&sentence=0&method=attention")
    assert answer["per_head"][0][0][0][0] is None


def _nan_aer(value):
    """Every method's AER per layer NaN, as scores of a diverged run's maps come out."""
    if EXPLAIN_AER.match(value.tag):
        scores = np.frombuffer(value.tensor.tensor_content, dtype="<f4").copy()
        scores[:] = np.nan
        value.tensor.tensor_content = scores.tobytes()
    return True


EXPLAIN_AER = re.compile(r"^attention/explain/\w+/aer$")


def test_explanation_scores_that_are_nan_have_no_best_layer_and_no_history(tiny_run, tmp_path):
    rewritten(tiny_run, tmp_path / "logs" / "nan", _nan_aer)
    client, _ = serve(tmp_path / "logs")
    answer = get(client, "/explanations?run=nan&step=12")
    assert answer["methods"] and all(method["best"] is None for method in answer["methods"].values())
    assert all(aer is None for method in answer["methods"].values() for aer in method["aer"])
    assert answer["history"] == {name: [] for name in answer["methods"]} and answer["leader"] is None


def test_a_lens_of_a_diverged_run_is_logged_with_null():
    (value,) = json_summary("lens", {"top_probs": [[float("nan"), 0.5]], "rank": float("inf")}).value
    assert json.loads(value.tensor.string_val[0]) == {"top_probs": [[None, 0.5]], "rank": None}


@pytest.mark.parametrize(
    "scale, message",
    [(float("nan"), "weights are not finite (the run diverged)"),
     (1e30, "weights give non-finite attention (the run diverged)")],
)
def test_translating_with_diverged_weights_is_a_422(tiny_run, tmp_path, scale, message):
    logs, copy = copied_run(tiny_run, tmp_path)
    last = copy / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = {k: v * scale if v.is_floating_point() else v
                                for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, last)
    client, _ = serve(logs)
    error = get(client, "/translate?run=copy&text=a%20dog", status=422)["error"]
    assert error == f"{last.resolve()}: the checkpoint's {message}"


def test_the_launcher_without_a_log_folder_is_a_one_line_usage_error(capsys):
    import viz.tab.__main__ as launcher

    with pytest.raises(SystemExit) as exit:
        launcher.main([])
    assert exit.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m viz.tab: error: ") and "--logdir" in line


def test_a_tokenizer_larger_than_the_embedding_is_a_422_naming_both_sizes(tiny_run, tmp_path):
    """It was a 500 (an IndexError inside the embedding)."""
    logs, copy = copied_run(tiny_run, tmp_path)
    last = copy / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    tokenizers = checkpoint["TranslationDataModule"]
    tokenizers["src_tokenizer"] = larger_tokenizer(tokenizers["src_tokenizer"])
    torch.save(checkpoint, last)
    client, _ = serve(logs)
    error = get(client, "/translate?run=copy&text=a%20dog", status=422)["error"]
    size = Tokenizer.from_json(tokenizers["src_tokenizer"]).vocab_size
    rows = checkpoint["hyper_parameters"]["src_vocab_size"]
    assert error == (f"{last.resolve()}: tokenizers do not fit the model: the source tokenizer has {size} "
                     f"ids, the model's embedding {rows} (src_vocab_size)")


def test_the_vocabulary_route_serves_the_python_definitions_and_the_routes_keep_its_limits(board):
    client, _, run, _ = board
    answer = get(client, "/vocabulary")
    assert answer["kinds"] == [dataclasses.asdict(kind) for kind in ATTENTION_KINDS]
    assert [kind["name"] for kind in answer["kinds"]] == list(KINDS) == ["encoder", "decoder", "cross"]
    assert {kind["name"]: kind["label"] for kind in answer["kinds"]} == KIND_LABELS
    assert answer["methods"] == [{"name": name, "label": method.label, "weights": method.weights,
                                  "gradients": method.gradients, "takes_steps": method.takes_steps,
                                  "costly": method.costly} for name, method in METHODS.items()]
    # The properties the page treats methods by: the cross weights' own maps, and the one that takes steps.
    assert [m["name"] for m in answer["methods"] if m["weights"]] == ["attention"]
    assert [m["name"] for m in answer["methods"] if m["takes_steps"]] == ["integrated_gradients"]
    assert answer["ig_steps"] == {"default": IG_STEPS_PREVIEW, "max": MAX_IG_STEPS}
    assert answer["beam"] == {"default": "run", "max": MAX_BEAM}
    assert answer["upright"] == UPRIGHT_TOKEN.pattern
    assert answer["statistics"] == [dataclasses.asdict(statistic) for statistic in STATISTICS]
    # The limits it serves are those the translate route keeps.
    text = f"/translate?run={run}&text=a%20dog&method=integrated_gradients"
    error = get(client, f"{text}&ig_steps={MAX_IG_STEPS + 1}", status=400)["error"]
    assert error == f"ig_steps must be between 1 and {MAX_IG_STEPS}, got {MAX_IG_STEPS + 1}"
    error = get(client, f"/translate?run={run}&text=a%20dog&beam={MAX_BEAM + 1}", status=400)["error"]
    assert error == f"beam must be between 1 and {MAX_BEAM}, got {MAX_BEAM + 1}"


def test_the_pages_scripts_spell_no_name_the_vocabulary_route_serves():
    """No copy of a kind's words or help, of a method's name or label or of a limit: prose may say
    "cross-attention", but no string of the page's own is a name or label the route serves (the page tells
    methods apart by their properties, ``weights`` and ``takes_steps``)."""
    scripts = {path.name: path.read_text(encoding="utf-8")
               for path in (REPO / "viz" / "tab" / "static").glob("*.js")}
    literals = {match for text in scripts.values() for match in re.findall(r'"([^"]*)"', text)}
    labels = [kind.label for kind in ATTENTION_KINDS] + [method.label for method in METHODS.values()]
    served = {kind.short for kind in ATTENTION_KINDS} | set(METHODS)
    served |= {variant for label in labels
               for variant in (label, label.capitalize(), f"{label.capitalize()} (causal)")}
    assert literals & served == set()
    helps = [kind.help for kind in ATTENTION_KINDS]
    assert [name for name, text in scripts.items() if any(help_ in text for help_ in helps)] == []
    copies = re.compile(r"\bKINDS\s*=|IG_STEPS|MAX_BEAM|\[1, 2, 3")
    assert [name for name, text in scripts.items() if copies.search(text)] == []


def function_imports(path) -> list[str]:
    """The modules imported inside functions of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_the_backend_imports_lightning_only_for_a_checkpoint_and_reads_events_without_torch():
    tab = REPO / "viz" / "tab"
    assert {path.name: function_imports(path) for path in tab.glob("*.py") if function_imports(path)} == {
        "live.py": ["training"],  # training.checkpoints, and with it Lightning: loaded on a first translation
    }
    code = ("import sys\n"
            "import viz.tab.events\n"
            "assert 'torch' not in sys.modules, 'events imports torch'\n"
            "import viz.tab.plugin\n"
            "assert 'lightning' not in sys.modules, 'the routes import Lightning'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
