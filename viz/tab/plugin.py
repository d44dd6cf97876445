"""The ATTENTION tab's backend: a TensorBoard dynamic plugin serving logged attention weights as JSON.

Routes (relative to ``data/plugin/attention/``; GET only: other methods get a 405; every error is a 4xx, or a
503 while a run's checkpoints change under a read, with ``{"error": "one line"}``):

- ``index.js``, ``static/<file>``: the frontend, plain ES modules shipped with this package;
- ``runs``: runs with attention data, their logged steps, probe sentences and shapes, the explanation methods
  whose maps the probes have, whether they have a logit lens, and the steps with explanation scores; and,
  under ``skipped``, each run whose logged data is not in this tab's layout, with why (its routes answer 409);
- ``attention?run&step&sentence[&kind&layer&head]``: every head of one probe sentence at one step, or one map;
- ``explanation?run&step&sentence&method``: one explanation method's map of a probe sentence, per layer and
  per head where the method has heads, with the gold links and the map's AER (``analysis.explain.scores``)
  on data with gold alignments;
- ``lens?run&step&sentence``: the logit lens of a probe sentence (top tokens, the produced token's
  probability and rank per decoder layer);
- ``explanations?run&step``: every method's AER and agreement per layer (and head) over the explanation
  sentences, each method's best AER at every logged step, and which method leads since which step;
- ``statistics?run&step``: the head statistics, layers × heads per kind, and their definitions
  (``analysis.heads.STATISTICS``);
- ``translate?run&text[&beam][&method][&ig_steps]``: translates a typed sentence with the run's newest weights
  (on the CPU; the checkpoint that ``training.run_checkpoints.newest_checkpoint`` chooses, as ``train.py
  --resume`` does) and returns every head's attention for it, in the shape of ``attention``; with ``method``,
  also that method's map and the logit lens under forced decoding of the translation.

The weights come from the summaries that ``viz.logger.AttentionLogger`` writes
(``viz.tab.metadata``); nothing is ever written to the run folder.
"""

import dataclasses
import json
import logging
import threading
from pathlib import Path

import numpy as np
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from analysis.axes import KINDS, attention_axes
from analysis.explain.attributions import MAX_IG_STEPS
from viz.tab.metadata import (
    EXPLAIN_TAG,
    PLUGIN_NAME,
    SENTENCE_EXPLAIN_TAG,
    SENTENCE_TAG,
    STATISTIC_TAG,
    VERSION,
    explain_tag,
    layout_version,
    sentence_tag,
)

log = logging.getLogger(__name__)

_GONE = object()

STATIC = Path(__file__).parent / "static"
CONTENT_TYPES = {"js": "text/javascript", "css": "text/css"}
ALL_STEPS = 1_000_000  # downsampling bound when reading: every step the loader kept
DECIMALS = 4
MAX_TEXT_CHARACTERS = 200
MAX_BEAM = 8
METHODS = ("GET", "HEAD")  # every route only reads
CHECKPOINT_TRIES = 3  # reads of a run's newest checkpoint while training rotates its checkpoints
IG_STEPS = 16  # Integrated Gradients' steps for a typed sentence; MAX_IG_STEPS bounds them


class RequestError(Exception):
    """A request the plugin cannot answer; ``status`` is the HTTP code (4xx) and the message one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class MalformedRun(RequestError):
    """A run whose logged data is not the layout this tab reads (``viz.tab.metadata``): /runs skips it, naming
    why, and its routes answer 409, so that one damaged run never takes the others down."""

    def __init__(self, message: str) -> None:
        super().__init__(409, message)


def _json(request, data, code: int = 200):
    return http_util.Respond(request, json.dumps(data, allow_nan=False), "application/json", code=code)


def _not_allowed(request):
    """405 for a method no route takes, with the methods it does in ``Allow``; None for those."""
    if request.method in METHODS:
        return None
    response = _json(request, {"error": f"method {request.method} is not allowed here; use GET"}, code=405)
    response.headers["Allow"] = ", ".join(METHODS)
    return response


def _route(handler):
    """A werkzeug application answering ``handler(self, request)``'s dict as JSON, RequestError as its status,
    and methods other than GET as 405."""

    @wrappers.Request.application
    def application(self, request):
        if (refused := _not_allowed(request)) is not None:
            return refused
        try:
            return _json(request, handler(self, request))
        except RequestError as error:
            return _json(request, {"error": str(error)}, code=error.status)

    return application


def _argument(request, name: str) -> str:
    value = request.args.get(name)
    if value is None or value == "":
        raise RequestError(400, f"missing query parameter '{name}'")
    return value


def _integer(request, name: str, *, default: int | None = None) -> int:
    if default is not None and not request.args.get(name):
        return default
    text = _argument(request, name)
    try:
        return int(text)
    except ValueError:
        raise RequestError(400, f"query parameter '{name}' must be an integer, got {text!r}") from None


def _rounded(array: np.ndarray) -> list:
    """Nested lists of rounded floats; NaN and infinities (a diverged run's maps) as None, JSON's null."""
    array = np.asarray(array, dtype=np.float64)
    rounded = np.round(array, DECIMALS).astype(object)
    rounded[~np.isfinite(array)] = None
    return rounded.tolist()


def _logged_json(run: str, tag: str, values: dict[int, np.ndarray], step: int | None = None) -> dict:
    """The JSON object logged under ``tag`` at ``step``, else its latest (a sentence's tokens do not change
    during a run); MalformedRun if it is none."""
    value = values[step] if step in values else values[max(values)]
    try:
        text = json.loads(value.item(), parse_constant=_no_constant) if value.dtype == object else None
    except _NonFinite as error:
        raise MalformedRun(f"run {run!r} {tag} holds {error}, which is not JSON") from None
    except ValueError:  # not JSON, or more than one string
        text = None
    if not isinstance(text, dict):
        raise MalformedRun(f"run {run!r} {tag} is not a JSON object")
    return text


class _NonFinite(Exception):
    """NaN or an infinity in logged JSON: Python reads them, but no answer of the tab may hold them."""


def _lowest(run: str, tag: str, scores) -> float | None:
    """The lowest finite score of a logged array of scores (a method's best AER), None if it has none."""
    scores = np.asarray(scores)
    if not np.issubdtype(scores.dtype, np.number):
        raise MalformedRun(f"run {run!r} {tag} is a {scores.dtype} array, expected numbers")
    finite = scores[np.isfinite(scores)]
    return float(finite.min()) if finite.size else None


def _no_constant(name: str):
    raise _NonFinite(name)


SENTENCE_FIELDS = ("source", "target", "source_tokens", "target_in", "target_out")
METHOD_FIELDS = {"name": str, "label": str, "per_head": bool, "signed": bool, "layers": list}


def _sentence_text(run: str, sentence: int, values: dict[int, np.ndarray], step: int | None = None) -> dict:
    """A probe sentence's text (``viz.tab.metadata``), checked for what the routes read of it."""
    tag = sentence_tag(sentence, "text")
    text = _logged_json(run, tag, values, step)
    missing = [field for field in SENTENCE_FIELDS if field not in text]
    if missing:
        raise MalformedRun(f"run {run!r} {tag} lacks {', '.join(map(repr, missing))}")
    for field in ("source", "target"):
        if not isinstance(text[field], str):
            raise MalformedRun(f"run {run!r} {tag} has a malformed {field!r} (expected a string)")
    for field in SENTENCE_FIELDS[2:]:
        if not isinstance(text[field], list) or not all(isinstance(token, str) for token in text[field]):
            raise MalformedRun(f"run {run!r} {tag} has a malformed {field!r} (expected a list of strings)")
    rows, cols = len(text["target_out"]), len(text["source_tokens"])
    if len(text["target_in"]) != rows:
        raise MalformedRun(f"run {run!r} {tag} has {len(text['target_in'])} 'target_in' tokens but {rows} "
                           "'target_out' tokens")
    gold = text.get("gold")
    if gold is not None and not (isinstance(gold, list) and all(_link(link, rows, cols) for link in gold)):
        raise MalformedRun(f"run {run!r} {tag} has a malformed 'gold' (expected null or a list of "
                           f"[target, source] positions within {rows} × {cols})")
    methods = text.get("methods", [])
    if not isinstance(methods, list) or not all(map(_method_described, methods)):
        raise MalformedRun(f"run {run!r} {tag} has malformed 'methods' (expected a list of "
                           f"{{{', '.join(METHOD_FIELDS)}}})")
    return text


def _link(link, rows: int, cols: int) -> bool:
    """Whether ``link`` is one gold link [target position, source position] of a rows × cols map."""
    return (isinstance(link, list) and len(link) == 2
            and all(isinstance(i, int) and not isinstance(i, bool) for i in link)
            and 0 <= link[0] < rows and 0 <= link[1] < cols)


def _method_described(method) -> bool:
    return isinstance(method, dict) and all(isinstance(method.get(k), t) for k, t in METHOD_FIELDS.items())


def _check_layout(run: str, tags: dict[str, provider.TensorTimeSeries]) -> None:
    """MalformedRun if any of the run's summaries names a layout other than this tab's ``VERSION``."""
    for series in tags.values():
        version = layout_version(series.plugin_content)
        if version != VERSION:
            raise MalformedRun(f"run {run!r} logged with layout version {version!r} of the attention "
                               f"summaries; this tab reads version {VERSION}")


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._provider = context.data_provider
        self._logdir = Path(context.logdir).resolve() if context.logdir else None
        self._translators: dict[str, tuple[Path, tuple, object]] = {}  # run -> (checkpoint, stat, LoadedRun)
        self._described: dict[str, tuple[tuple, dict | None]] = {}  # run -> (newest logged data, description)
        self._busy: dict[str, threading.Lock] = {}
        self._busy_guard = threading.Lock()

    def is_active(self) -> bool:
        return False  # TensorBoard enables the tab when the data provider lists summaries of this plugin

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention")

    def get_plugin_apps(self) -> dict:
        return {
            "/index.js": self._serve_index,
            "/static/*": self._serve_static,
            "/runs": self._serve_runs,
            "/attention": self._serve_attention,
            "/explanation": self._serve_explanation,
            "/lens": self._serve_lens,
            "/explanations": self._serve_explanations,
            "/statistics": self._serve_statistics,
            "/translate": self._serve_translate,
        }

    # -- static files ---------------------------------------------------------------------------------------

    @wrappers.Request.application
    def _serve_index(self, request):
        return self._static_file(request, "index.js")

    @wrappers.Request.application
    def _serve_static(self, request):
        return self._static_file(request, request.path.rsplit("/", 1)[-1])

    def _static_file(self, request, name: str):
        if (refused := _not_allowed(request)) is not None:
            return refused
        # Looked up among the files shipped, never opened by the requested name: no path, however long or
        # strange, reaches the file system.
        shipped = {path.name: path for path in STATIC.iterdir() if path.suffix[1:] in CONTENT_TYPES}
        if name not in shipped:
            return _json(request, {"error": f"no static file {name[:100]!r}"}, code=404)
        path = shipped[name]
        return http_util.Respond(request, path.read_text(encoding="utf-8"), CONTENT_TYPES[path.suffix[1:]])

    # -- reading the logged data ----------------------------------------------------------------------------

    def _environ(self, request) -> dict:
        return {
            "ctx": plugin_util.context(request.environ),
            "experiment_id": plugin_util.experiment_id(request.environ),
        }

    def _listing(self, request) -> dict[str, dict[str, provider.TensorTimeSeries]]:
        return self._provider.list_tensors(plugin_name=PLUGIN_NAME, **self._environ(request))

    def _read(self, request, run: str, tags: list[str]) -> dict[str, dict[int, np.ndarray]]:
        """tag -> step -> value, for the tags of one run that exist."""
        data = self._provider.read_tensors(
            plugin_name=PLUGIN_NAME, downsample=ALL_STEPS, run_tag_filter=provider.RunTagFilter([run], tags),
            **self._environ(request),
        )
        return {
            tag: {datum.step: datum.numpy for datum in series} for tag, series in data.get(run, {}).items()
        }

    def _run_tags(self, request, run: str) -> dict[str, provider.TensorTimeSeries]:
        listing = self._listing(request)
        if run not in listing:
            known = ", ".join(sorted(listing)) or "none"
            raise RequestError(404, f"unknown run {run!r} (runs with attention data: {known})")
        self._description(request, run, listing[run])  # MalformedRun (409) for a run logged otherwise
        return listing[run]

    @staticmethod
    def _sentences(tags) -> list[int]:
        found = {int(m.group(1)) for m in map(SENTENCE_TAG.match, tags) if m}
        return sorted(n for n in found if all(sentence_tag(n, part) in tags for part in ("text", *KINDS)))

    def _describe_run(self, request, run: str, tags: dict[str, provider.TensorTimeSeries]) -> dict | None:
        """What /runs says of one run: its description, and whether its checkpoint (looked up afresh) can
        translate."""
        described = self._description(request, run, tags)
        if described is None:
            return None
        checkpoint, note, _ = self._checkpoint(run)
        return described | {"can_translate": checkpoint is not None, "translate_note": note}

    def _description(self, request, run: str, tags) -> dict | None:
        """What the logged tensors say of one run (None before its first complete probe), cached until the run
        logs a newer step (the page asks every 30 s per open tab). MalformedRun, warned of once per change of
        the data, if the run was logged in another layout."""
        newest = max(((s.max_step, s.max_wall_time) for s in tags.values()), default=None)
        key = (newest, len(tags))
        cached = self._described.get(run)
        if cached is None or cached[0] != key:
            try:
                described = self._read_description(request, run, tags)
            except MalformedRun as error:
                log.warning("ATTENTION tab: skipping %s", error)
                described = error
            cached = self._described[run] = key, described
        if isinstance(cached[1], MalformedRun):
            raise cached[1]
        return cached[1]

    def _read_description(self, request, run: str, tags) -> dict | None:
        _check_layout(run, tags)
        sentences = self._sentences(tags)
        if not sentences:
            return None
        first = self._read(request, run, [sentence_tag(sentences[0], kind) for kind in KINDS])
        steps = sorted(set.intersection(*(set(first.get(sentence_tag(sentences[0], k), {})) for k in KINDS)))
        if not steps:
            return None
        texts = self._read(request, run, [sentence_tag(n, "text") for n in sentences])
        described = []
        for n in sentences:
            text = _sentence_text(run, n, texts[sentence_tag(n, "text")])
            described.append({"id": n, "source": text["source"], "target": text["target"]})
        shapes = {kind: first[sentence_tag(sentences[0], kind)][steps[-1]].shape for kind in KINDS}
        for kind, shape in shapes.items():
            if len(shape) != 4:
                raise MalformedRun(f"run {run!r} {sentence_tag(sentences[0], kind)} has shape {shape}, "
                                   "expected (layers, heads, rows, columns)")
        text = _sentence_text(run, sentences[0], texts[sentence_tag(sentences[0], "text")])
        has_gold = text.get("gold") is not None
        return {
            "run": run,
            "steps": steps,
            "sentences": described,
            "kinds": list(KINDS),
            "num_layers": {kind: int(shape[0]) for kind, shape in shapes.items()},
            "num_heads": int(shapes["encoder"][1]),
            "has_gold": has_gold,
            "statistics_steps": self._statistic_steps(request, run, tags),
            "methods": self._methods(text, tags, sentences[0], shapes["cross"][0]),
            "has_lens": sentence_tag(sentences[0], "lens") in tags,
            "explanation_steps": self._explanation_steps(request, run, tags),
        }

    @staticmethod
    def _methods(text: dict, tags, sentence: int, decoder_layers: int) -> list[dict]:
        """The methods whose maps the probes have, ``attention`` (the cross weights) always first."""
        logged = [m for m in text.get("methods", []) if m["name"] == "attention"
                  or sentence_tag(sentence, f"explain/{m['name']}") in tags]
        if logged and logged[0]["name"] == "attention":
            return logged
        from analysis.explain.registry import METHODS  # torch: only for runs logged without explanations
        from analysis.explain.trace import layer_names

        attention = {"name": "attention", "label": METHODS["attention"].label, "per_head": True,
                     "signed": False, "layers": list(layer_names(decoder_layers))}
        return [attention, *(m for m in logged if m["name"] != "attention")]

    def _explanation_steps(self, request, run: str, tags) -> list[int]:
        aer = [tag for tag in tags if (m := EXPLAIN_TAG.match(tag)) and m.group(2) == "aer"]
        data = self._read(request, run, aer) if aer else {}
        return sorted(set().union(*(values.keys() for values in data.values())))

    def _statistic_steps(self, request, run: str, tags) -> list[int]:
        tag = next((tag for tag in sorted(tags) if STATISTIC_TAG.match(tag)), None)
        return [] if tag is None else sorted(self._read(request, run, [tag]).get(tag, {}))

    # -- routes ---------------------------------------------------------------------------------------------

    @_route
    def _serve_runs(self, request) -> dict:
        runs, skipped = [], {}
        for run, tags in sorted(self._listing(request).items()):
            try:
                described = self._describe_run(request, run, tags)
            except MalformedRun as error:
                skipped[run] = str(error)
                continue
            if described is not None:
                runs.append(described)
        return {"runs": runs, "skipped": skipped}

    @_route
    def _serve_attention(self, request) -> dict:
        run = _argument(request, "run")
        step = _integer(request, "step")
        sentence = _integer(request, "sentence")
        tags = self._run_tags(request, run)
        if sentence not in self._sentences(tags):
            raise RequestError(404, f"run {run!r} has no probe sentence {sentence} "
                                    f"(it has {self._sentences(tags)})")
        parts = [sentence_tag(sentence, part) for part in ("text", *KINDS)]
        data = self._read(request, run, parts)
        missing = [tag for tag in parts[1:] if step not in data.get(tag, {})]
        if missing:
            steps = sorted(data.get(parts[1], {}))
            raise RequestError(404, f"run {run!r} logged no attention of sentence {sentence} at step {step} "
                                    f"(logged steps: {_abridged(steps)})")
        text = _sentence_text(run, sentence, data[parts[0]], step)
        weights = {kind: data[sentence_tag(sentence, kind)][step] for kind in KINDS}
        answer = {"run": run, "step": step, "sentence": sentence, "source": text["source"],
                  "target": text["target"]}
        return answer | _maps_answer(request, text["source_tokens"], text["target_in"], text["target_out"],
                                     weights, text.get("gold"))

    @_route
    def _serve_statistics(self, request) -> dict:
        run = _argument(request, "run")
        step = _integer(request, "step")
        tags = [tag for tag in self._run_tags(request, run) if STATISTIC_TAG.match(tag)]
        data = self._read(request, run, tags)
        kinds: dict[str, dict[str, list]] = {}
        for tag in sorted(tags):
            kind, name = STATISTIC_TAG.match(tag).groups()
            if step in data.get(tag, {}):
                value = np.asarray(data[tag][step])
                if value.ndim != 2 or not np.issubdtype(value.dtype, np.number):
                    raise MalformedRun(f"run {run!r} {tag} is a {value.dtype} array of shape {value.shape}, "
                                       "expected numbers (layers, heads)")
                kinds.setdefault(kind, {})[name] = _rounded(value)
        if not kinds:
            steps = sorted(set().union(*(data[tag].keys() for tag in data))) if data else []
            raise RequestError(404, f"run {run!r} logged no head statistics at step {step} "
                                    f"(logged steps: {_abridged(steps)})")
        from analysis.heads import STATISTICS  # torch

        ordered = {kind: kinds[kind] for kind in KINDS if kind in kinds}
        names = {name for named in ordered.values() for name in named}
        definitions = [dataclasses.asdict(statistic) for statistic in STATISTICS]
        return {"run": run, "step": step, "kinds": ordered, "definitions": definitions,
                "descriptions": {d["name"]: d["description"] for d in definitions if d["name"] in names}}

    def _probe(
        self, request, run: str, step: int, sentence: int, parts: list[str], what: str, logged: str = ""
    ) -> dict:
        """part -> step -> value of one probe sentence's ``text`` and ``parts`` (404s naming what is
        missing, and ``logged``, what there is instead, where the parts were never logged)."""
        tags = self._run_tags(request, run)
        if sentence not in self._sentences(tags):
            raise RequestError(404, f"run {run!r} has no probe sentence {sentence} "
                                    f"(it has {self._sentences(tags)})")
        wanted = [sentence_tag(sentence, "text"), *(sentence_tag(sentence, part) for part in parts)]
        if any(tag not in tags for tag in wanted):
            raise RequestError(404, f"run {run!r} logged no {what} of sentence {sentence}{logged}")
        data = self._read(request, run, wanted)
        if any(step not in data.get(tag, {}) for tag in wanted[1:]):
            steps = sorted(data.get(wanted[1], {}))
            raise RequestError(404, f"run {run!r} logged no {what} of sentence {sentence} at step {step} "
                                    f"(logged steps: {_abridged(steps)})")
        return {tag.removeprefix(sentence_tag(sentence, "")): data[tag] for tag in wanted}

    @_route
    def _serve_explanation(self, request) -> dict:
        run = _argument(request, "run")
        step = _integer(request, "step")
        sentence = _integer(request, "sentence")
        method = _method(request)
        if method == "attention":
            data = self._probe(request, run, step, sentence, ["cross"], "cross-attention")
            per_head = data["cross"][step].astype(np.float32)  # (L, H, T, S)
            per_layer = per_head.mean(axis=1)  # (L, T, S): the method's layer map is its heads' mean
        else:
            tags = self._run_tags(request, run)
            parts = [f"explain/{method}", f"explain/{method}/per_layer"]  # the second for methods with heads
            parts = [part for part in parts if sentence_tag(sentence, part) in tags] or parts[:1]
            from analysis.explain.registry import METHODS

            mapped = {m.group(2) for m in map(SENTENCE_EXPLAIN_TAG.match, tags) if m} | {"attention"}
            logged = f" (its probes have maps of {', '.join(name for name in METHODS if name in mapped)})"
            data = self._probe(request, run, step, sentence, parts, f"{method} maps", logged)
            per_layer = data[parts[-1]][step].astype(np.float32)  # (L, T, S)
            per_head = data[parts[0]][step].astype(np.float32) if len(parts) == 2 else None  # (L, H, T, S)
        text = _sentence_text(run, sentence, data["text"], step)
        described = next((m for m in text.get("methods", []) if m["name"] == method), None)
        if described is None and method == "attention":  # a run logged without explanations
            described = self._methods(text, {}, sentence, per_layer.shape[0])[0]
        if described is None:
            raise RequestError(409, f"run {run!r} logged {method} maps of sentence {sentence} without their "
                                    "description (layers, label)")
        rows, cols = text["target_out"], text["source_tokens"]
        if per_layer.ndim != 3 or per_layer.shape[1:] != (len(rows), len(cols)):
            raise RequestError(409, f"the logged {method} map {per_layer.shape} does not match the tokens "
                                    f"({len(rows)} × {len(cols)})")
        if len(described["layers"]) != per_layer.shape[0]:
            raise MalformedRun(f"run {run!r} logged {method} maps of {per_layer.shape[0]} layers but names "
                               f"{len(described['layers'])} in {sentence_tag(sentence, 'text')}")
        if per_head is not None and (per_head.ndim != 4 or per_head.shape[::2] != per_layer.shape[:2]
                                     or per_head.shape[3] != per_layer.shape[2]):
            raise MalformedRun(f"run {run!r} logged a {method} map per head of shape {per_head.shape}, which "
                               f"does not match its map per layer {per_layer.shape}")
        gold = text.get("gold")
        aer = None if gold is None else _map_aer(method, described, per_layer, per_head, gold)
        answer = {"run": run, "step": step, "sentence": sentence}
        return answer | _explanation_answer(method, described, rows, cols, per_layer, per_head) | {
            "gold": gold, "aer": aer}

    @_route
    def _serve_lens(self, request) -> dict:
        run = _argument(request, "run")
        step = _integer(request, "step")
        sentence = _integer(request, "sentence")
        data = self._probe(request, run, step, sentence, ["lens"], "logit lens")
        text = _sentence_text(run, sentence, data["text"], step)
        lens = _logged_json(run, sentence_tag(sentence, "lens"), data["lens"], step)
        return {"run": run, "step": step, "sentence": sentence, "rows": text["target_out"]} | lens

    @_route
    def _serve_explanations(self, request) -> dict:
        run = _argument(request, "run")
        step = _integer(request, "step")
        from analysis.explain.registry import METHODS  # torch
        from analysis.explain.scores import best_layer
        from analysis.explain.trace import layer_names

        tags = [tag for tag in self._run_tags(request, run) if EXPLAIN_TAG.match(tag)]
        if not tags:
            why = self._why_no_scores(request, run)
            raise RequestError(404, f"run {run!r} logged no explanation scores{why}")
        data = self._read(request, run, tags)
        named: dict[str, dict[str, dict]] = {}  # method -> score -> step -> value
        for tag, values in data.items():
            method, score = EXPLAIN_TAG.match(tag).groups()
            named.setdefault(method, {})[score] = values
        order = [name for name in METHODS if name in named and "aer" in named[name]]
        history = {name: {s: lowest for s, aer in named[name]["aer"].items()
                          if (lowest := _lowest(run, explain_tag(name, "aer"), aer)) is not None}
                   for name in order}  # a diverged step's NaN scores are no point of the history
        present = [name for name in order if step in named[name]["aer"]]
        if not present:
            steps = sorted(set().union(*history.values()))
            raise RequestError(404, f"run {run!r} logged no explanation scores at step {step} "
                                    f"(logged steps: {_abridged(steps)})")
        methods = {}
        for name in present:
            scores = {score: np.asarray(values[step]) for score, values in named[name].items()
                      if score != "layers" and step in values}
            if any(np.ndim(scores.get(score)) != 1 for score in ("aer", "agreement")):
                raise MalformedRun(f"run {run!r} {explain_tag(name, 'aer')} and "
                                   f"{explain_tag(name, 'agreement')} must both be logged at step {step}, "
                                   "one score per layer")
            about = named[name].get("layers", {})
            about = _logged_json(run, explain_tag(name, "layers"), about, step) if about else {
                "label": METHODS[name].label, "layers": list(layer_names(len(scores["aer"])))}
            if not isinstance(about.get("label"), str) or not isinstance(about.get("layers"), list):
                raise MalformedRun(f"run {run!r} {explain_tag(name, 'layers')} is malformed (expected "
                                   "{label, layers})")
            table = {"layers": [{"layer": layer, "aer": float(a)} for layer, a in zip(about["layers"],
                                                                                       scores["aer"])
                                if np.isfinite(a)]}
            best = best_layer(table) if table["layers"] else None  # None: every layer's AER was NaN
            heads = {score: _rounded(scores[score]) if score in scores else None
                     for score in ("head_aer", "head_agreement")}
            methods[name] = {"label": about["label"], "layers": about["layers"],
                             "aer": _rounded(scores["aer"]), "agreement": _rounded(scores["agreement"]),
                             **heads,
                             "best": best and {"layer": best["layer"], "aer": round(best["aer"], DECIMALS)}}
        rounded = {name: [[s, round(v, DECIMALS)] for s, v in sorted(steps.items())]
                   for name, steps in history.items()}
        return {"run": run, "step": step, "methods": methods, "history": rounded,
                "leader": leader(history, order, step)}

    @_route
    def _serve_translate(self, request) -> dict:
        run = _argument(request, "run")
        text = " ".join(request.args.get("text", "").split())
        beam = _integer(request, "beam", default=1)
        method = _method(request) if request.args.get("method") else None
        ig_steps = _integer(request, "ig_steps", default=IG_STEPS)
        if not 1 <= ig_steps <= MAX_IG_STEPS:
            raise RequestError(400, f"ig_steps must be between 1 and {MAX_IG_STEPS}, got {ig_steps}")
        self._run_tags(request, run)
        if not text:
            raise RequestError(400, "the sentence is empty: type a sentence to translate")
        if len(text) > MAX_TEXT_CHARACTERS:
            raise RequestError(400, f"the sentence has {len(text)} characters; at most "
                                    f"{MAX_TEXT_CHARACTERS} are translated here")
        if not 1 <= beam <= MAX_BEAM:
            raise RequestError(400, f"beam must be between 1 and {MAX_BEAM}, got {beam}")
        lock = self._lock(run)
        if not lock.acquire(blocking=False):
            raise RequestError(429, f"a translation is already running for run {run!r}; "
                                    "try again when it ends")
        try:
            return self._translate(run, text, beam, request, method, ig_steps)
        finally:
            lock.release()

    def _why_no_scores(self, request, run: str) -> str:
        """Why a run logged no explanation scores, as the end of a sentence: no gold links, no sentence
        scored, or scores too big for the tab (the scalars that training logs beside them say which)."""
        described = self._description(request, run, self._run_tags(request, run))
        if described is not None and not described["has_gold"]:
            return ": its data has no gold alignment to score them against (the maps are still shown)"
        scalars = self._provider.list_scalars(
            plugin_name="scalars", run_tag_filter=provider.RunTagFilter([run], ["explain/seconds"]),
            **self._environ(request),
        )
        reason = ("they did not fit in --attention.max_bytes (the explain/* scalars have them)"
                  if scalars.get(run) else "it was trained with --attention.explanation_sentences 0")
        return f" although its data has gold alignments: {reason}"

    # -- your own sentence ----------------------------------------------------------------------------------

    def _lock(self, run: str) -> threading.Lock:
        with self._busy_guard:
            return self._busy.setdefault(run, threading.Lock())

    def _checkpoint(self, run: str) -> tuple[Path | None, str | None, int]:
        """The run's newest weights (``newest_checkpoint``'s rule), else None, why, and the HTTP status."""
        from training.run_checkpoints import (
            CheckpointError,
            CheckpointMissing,
            CheckpointRefused,
            newest_checkpoint,
            resolved,
        )

        if self._logdir is None:
            return None, "translation needs TensorBoard started with --logdir (not --logdir_spec)", 404
        try:
            folder = resolved(self._logdir / run / "checkpoints")
            if not folder.is_relative_to(self._logdir):
                return None, f"run {run!r} is outside the log directory", 403
            if not folder.is_dir():
                return None, f"no checkpoint yet in {folder}", 404
            return newest_checkpoint(folder, inside=self._logdir), None, 200
        except CheckpointMissing as error:
            return None, str(error), 404
        except CheckpointRefused as error:  # a symbolic link out of the log directory
            return None, str(error), 403
        except CheckpointError as error:  # one of them unreadable, or a loop of links: named
            return None, str(error), 422

    def _loaded(self, run: str):
        """The run's newest checkpoint and its LoadedRun (cached while the file is unchanged).

        Training deletes old epoch checkpoints and replaces last.ckpt while the tab reads them: a file that
        vanishes or changes under a read is looked up again, and after CHECKPOINT_TRIES such reads the answer
        is a 503 (try again), never a 500.
        """
        from training.checkpoints import CheckpointError, CheckpointMissing, load_run  # torch, Lightning

        for _ in range(CHECKPOINT_TRIES):
            checkpoint, note, status = self._checkpoint(run)
            if checkpoint is None:
                raise RequestError(status, note)
            try:
                before = _identity(checkpoint)
                cached = self._translators.get(run)
                if cached is not None and cached[:2] == (checkpoint, before):
                    return checkpoint, cached[2]
                loaded = load_run(checkpoint)
                if _identity(checkpoint) != before:
                    continue  # replaced while it was read
                _check_finite(checkpoint, loaded.module.model)
            except (CheckpointMissing, FileNotFoundError):
                continue
            except CheckpointError as error:
                if _identity(checkpoint, missing=None) != before:
                    continue  # a half-written or replaced file
                raise RequestError(422, str(error)) from None
            self._translators[run] = (checkpoint, before, loaded)
            return checkpoint, loaded
        raise RequestError(503, f"the checkpoints of run {run!r} changed while they were read (training "
                                "saves new ones); try again")

    def _translate(self, run: str, text: str, beam: int, request, method: str | None, ig_steps: int) -> dict:
        import torch

        from evaluation.explanations import lens_record, sentence_explanations
        from evaluation.translate import translate_hypotheses
        from viz.maps import sentence_attention

        checkpoint, loaded = self._loaded(run)
        model, datamodule = loaded.module.model, loaded.datamodule
        src_tok, tgt_tok = datamodule.src_tokenizer, datamodule.tgt_tokenizer
        src_ids = src_tok.encode(text)
        if len(src_ids) + 1 > model.config.max_len:
            raise RequestError(400, f"the sentence has {len(src_ids) + 1} tokens with </s>; this model reads "
                                    f"at most {model.config.max_len}")
        with torch.inference_mode():
            ids, finished = translate_hypotheses(model, src_tok, tgt_tok, [text], beam_size=beam,
                                                 max_len=loaded.module.hparams.get("decode_max_len"))[0]
            attention = sentence_attention(model, src_tok, tgt_tok, src_ids, ids, finished=finished)
        weights = {kind: torch.stack(layers).numpy() for kind, layers in attention.maps.items()}
        if not all(np.isfinite(array).all() for array in weights.values()):  # finite weights that overflow
            raise RequestError(422, f"{checkpoint}: the checkpoint's weights give non-finite attention (the "
                                    "run diverged)")
        answer = {"run": run, "text": text, "translation": tgt_tok.decode(ids), "checkpoint": checkpoint.name,
                  "step": loaded.global_step, "beam": beam}
        if method is not None:
            # Under forced decoding of the model's own translation; the gradient methods need autograd.
            with torch.inference_mode(False), torch.enable_grad():
                explained, lens = sentence_explanations(
                    model, src_ids, ids, methods=[method], finished=finished,
                    options={"integrated_gradients": {"steps": ig_steps}},
                )
            e = explained[method]
            per_layer = e.per_layer[0].detach().cpu().numpy()  # (L, T, S)
            per_head = None if e.per_head is None else e.per_head[0].detach().cpu().numpy()  # (L, H, T, S)
            described = {"label": _label(method), "signed": e.signed, "layers": list(e.layers)}
            answer["explanation"] = _explanation_answer(
                method, described, attention.target_out, attention.source, per_layer, per_head
            )
            answer["lens"] = {"rows": attention.target_out} | lens_record(lens, tgt_tok)
        return answer | _maps_answer(request, attention.source, attention.target_in, attention.target_out,
                                     weights, None)


def _check_finite(checkpoint: Path, model) -> None:
    """A 422 for weights with a NaN or infinity: a diverged run's checkpoint translates nothing."""
    import torch

    if not all(torch.isfinite(p).all() for p in model.parameters()):
        raise RequestError(422, f"{checkpoint}: the checkpoint's weights are not finite (the run diverged)")


def _method(request) -> str:
    """The request's explanation method, one of ``analysis.explain.registry.METHODS`` (else a 400)."""
    from analysis.explain.registry import METHODS  # torch

    method = _argument(request, "method")
    if method not in METHODS:
        raise RequestError(400, f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return method


def _label(method: str) -> str:
    from analysis.explain.registry import METHODS

    return METHODS[method].label


def _explanation_answer(method: str, described: dict, rows, cols, per_layer: np.ndarray, per_head) -> dict:
    """A method's maps as routes answer them: per layer L × T × S, per head L × H × T × S or None."""
    return {"method": method, "label": described["label"], "signed": described["signed"],
            "layers": described["layers"], "rows": rows, "cols": cols, "per_layer": _rounded(per_layer),
            "per_head": None if per_head is None else _rounded(per_head)}


def _map_aer(method: str, described: dict, per_layer: np.ndarray, per_head, gold: list[list[int]]) -> dict:
    """AER of one sentence's map per layer (and head) against its gold cells [row, column], scored by
    ``analysis.explain.scores`` as the logged corpus figures are.

    On one unpadded sentence every row and column is a real token; rows with no reading (Shift-Att's EOS row)
    are zero and never gold-linked, so they count as the method's own validity masks would.
    """
    import torch

    from analysis.explain.scores import count_alignment
    from analysis.explain.trace import Explanation

    T, S = per_layer.shape[1:]
    heads = None if per_head is None else torch.from_numpy(per_head)[None]  # (1, L, H, T, S)
    explanation = Explanation(
        method, torch.from_numpy(per_layer)[None], heads, tuple(described["layers"]),  # (1, L, T, S)
        torch.ones(1, S, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool), described["signed"],
    )
    table = count_alignment(explanation, [{(col, row) for row, col in gold}]).table(explanation.layers)
    return {"per_layer": _rounded(np.array([row["aer"] for row in table["layers"]])),
            "per_head": None if table["heads"] is None else _rounded(np.array(table["heads"]["aer"]))}


def leader(history: dict[str, dict[int, float]], order: list[str], step: int) -> dict | None:
    """The method of lowest best AER at ``step`` (the first in ``order`` of ties), its AER, and since_step:
    the earliest logged step from which it has led at every logged step up to ``step``.

    ``history``: method -> logged step -> best AER (its lowest over layers).
    """

    def first(at: int) -> str | None:
        scored = [name for name in order if at in history.get(name, {})]
        return min(scored, key=lambda name: history[name][at]) if scored else None

    best = first(step)
    if best is None:
        return None
    steps = sorted(s for s in set().union(*history.values()) if s <= step)
    since = step
    for earlier in reversed(steps):
        if first(earlier) != best:
            break
        since = earlier
    return {"method": best, "aer": round(history[best][step], DECIMALS), "since_step": since}


def _maps_answer(request, source, target_in, target_out, weights: dict[str, np.ndarray], gold) -> dict:
    """The maps of every kind (or the one map a request narrows to), labelled as ``analysis.axes`` says."""
    axes = attention_axes(source, target_in, target_out)
    for kind, array in weights.items():
        rows, cols = axes[kind]
        if array.shape[2:] != (len(rows), len(cols)):
            raise RequestError(409, f"the logged {kind} weights {array.shape} do not match the tokens "
                                    f"({len(rows)} × {len(cols)})")
    kind = request.args.get("kind")
    if kind is None:
        kinds = {kind: {"rows": axes[kind][0], "cols": axes[kind][1], "weights": _rounded(weights[kind])}
                 for kind in KINDS}
        return {"kinds": kinds, "gold": gold}
    if kind not in KINDS:
        raise RequestError(400, f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    array = weights[kind]  # (L, H, Tq, Tk)
    layer, head = _integer(request, "layer"), _integer(request, "head")
    if not 0 <= layer < array.shape[0]:
        raise RequestError(400, f"layer {layer} is out of range: {kind} has layers 0..{array.shape[0] - 1}")
    if not 0 <= head < array.shape[1]:
        raise RequestError(400, f"head {head} is out of range: {kind} has heads 0..{array.shape[1] - 1}")
    return {"kind": kind, "layer": layer, "head": head, "rows": axes[kind][0], "cols": axes[kind][1],
            "weights": _rounded(array[layer, head]), "gold": gold if kind == "cross" else None}


def _identity(path: Path, missing=_GONE) -> tuple:
    """What tells one version of a file from the next: (inode, size, modification time in ns). A file that is
    gone raises FileNotFoundError, or gives ``missing`` when that is given."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        if missing is _GONE:
            raise
        return missing
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _abridged(steps: list[int]) -> str:
    if not steps:
        return "none"
    return ", ".join(map(str, steps)) if len(steps) <= 8 else f"{steps[0]}, {steps[1]}, …, {steps[-1]}"
