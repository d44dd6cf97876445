"""The ATTENTION tab's backend: a TensorBoard dynamic plugin serving logged attention weights as JSON.

Routes (relative to ``data/plugin/attention/``; GET only: other methods get a 405; every error is a 4xx, with
``{"error": "one line"}``; a 409 while a run's checkpoints change under a read says to try again):

- ``index.js``, ``static/<file>``: the frontend, plain ES modules shipped with this package;
- ``vocabulary``: every list of names the page shows, as Python defines it: the attention kinds with their
  labels and help (``analysis.axes``), the explanation methods with their labels and the properties the page
  treats them by (``analysis.explain.registry.Method``: ``weights``, ``takes_steps``, ...), the steps a
  method that ``takes_steps`` may be asked for and the beam a typed sentence may ask
  (default, the run's validation beam, and most), the head statistics' definitions (``analysis.heads``),
  and which tokens stand upright in column labels (``viz.fonts.UPRIGHT_TOKEN``);
- ``runs``: runs with attention data, their logged steps, probe sentences and shapes, the explanation methods
  whose maps the probes have, whether they have a logit lens, the steps with explanation scores, and the
  head guided alignment supervised (``supervised``: layer and head counted from 1, labels, weight; null for
  none); under ``waiting``, each run with events but no maps yet, with a line saying why and when its first
  maps come (from the config.yaml it saved); and under ``skipped``, each run whose logged data is not in this
  tab's layout, with why (its routes answer 409);
- ``attention?run&step&sentence[&kind&layer&head]``: every head of one probe sentence at one step, or one map;
- ``explanation?run&step&sentence&method``: one explanation method's map of a probe sentence, per layer and
  per head where the method has heads, with the gold links and the map's AER (``analysis.explain.scores``)
  on data with gold alignments;
- ``lens?run&step&sentence``: the logit lens of a probe sentence (top tokens, the produced token's
  probability and rank per decoder layer);
- ``explanations?run&step``: every method's AER and agreement per layer (and head) over the explanation
  sentences, each method's best AER at every logged step, and which method leads since which step; on a gold
  set of more pairs, each method's ``reported``: its map chosen on the scored pairs and that map's AER on the
  others (null where nothing was reported);
- ``statistics?run&step``: the head statistics, layers × heads per kind, and their definitions;
- ``translate?run&text[&beam][&method][&ig_steps]``: translates a typed sentence with the run's newest
  weights (``viz.tab.live``), ``beam`` beams (by default, or ``run``, the run's validation beam; the answer
  says which) and returns every head's attention for it, in the shape of ``attention``; with
  ``method``, also that method's map and the logit lens under forced decoding of the translation. The
  sentence is read as the run reads its data (``read``: its script converted), and ``unknown`` holds the
  [start, end) characters of ``read`` that the run reads as ``<unk>``.

This module holds the routes, thin: parameters are read and checked here (method names among them, only
here), logged data comes from ``viz.tab.events`` and translations from ``viz.tab.live``.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from analysis.axes import ATTENTION_KINDS, KINDS, attention_axes
from analysis.explain.attributions import IG_STEPS_PREVIEW, MAX_IG_STEPS
from analysis.explain.registry import METHODS, WEIGHTS
from analysis.explain.scores import alignment_scores
from analysis.explain.trace import Explanation, layer_names
from analysis.heads import STATISTICS
from viz.fonts import UPRIGHT_TOKEN
from viz.tab.events import (
    DECIMALS,
    NO_PROBES,
    LoggedRuns,
    MalformedRun,
    RequestError,
    abridged,
    leader,
    logged_json,
    lowest,
    reported_map,
    rounded,
    run_settings,
    sentence_text,
    waiting_note,
)
from viz.tab.gold_words import word_aer
from viz.tab.live import MAX_BEAM, MAX_TEXT_CHARACTERS, RUN_BEAM, LiveRuns
from viz.tab.metadata import (
    ABOUT,
    AER,
    EXPLAIN_TAG,
    HEAD_SCORES,
    LAYER_SCORES,
    PLUGIN_NAME,
    REPORTED,
    RUN_TAG,
    SENTENCE_EXPLAIN_TAG,
    STATISTIC_TAG,
    explain_tag,
    sentence_tag,
)

STATIC = Path(__file__).parent / "static"
CONTENT_TYPES = {"js": "text/javascript", "css": "text/css"}
HTTP_METHODS = ("GET", "HEAD")  # every route only reads


def vocabulary() -> dict:
    """The ``vocabulary`` route's answer: every list of names the page shows, from its one definition."""
    return {
        "kinds": [dataclasses.asdict(kind) for kind in ATTENTION_KINDS],
        "methods": [{"name": name} | _properties(method) for name, method in METHODS.items()],
        "ig_steps": {"default": IG_STEPS_PREVIEW, "max": MAX_IG_STEPS},
        "beam": {"default": RUN_BEAM, "max": MAX_BEAM},
        "max_text_characters": MAX_TEXT_CHARACTERS,
        "upright": UPRIGHT_TOKEN.pattern,
        "statistics": [dataclasses.asdict(statistic) for statistic in STATISTICS],
    }


def _properties(method) -> dict:
    """A method's label and properties, every field of ``Method`` but its function."""
    return {field.name: getattr(method, field.name) for field in dataclasses.fields(method)
            if field.name != "function"}


def _json(request, data, code: int = 200):
    return http_util.Respond(request, json.dumps(data, allow_nan=False), "application/json", code=code)


def _not_allowed(request):
    """405 for a method no route takes, with the methods it does in ``Allow``; None for those."""
    if request.method in HTTP_METHODS:
        return None
    response = _json(request, {"error": f"method {request.method} is not allowed here; use GET"}, code=405)
    response.headers["Allow"] = ", ".join(HTTP_METHODS)
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


def _beam(request) -> int | None:
    """The beam a typed sentence asks for; None when it names none or RUN_BEAM: the run's validation beam."""
    text = request.args.get("beam", "")
    if text in ("", RUN_BEAM):
        return None
    try:
        beam = int(text)
    except ValueError:
        raise RequestError(400, f"query parameter 'beam' must be an integer or {RUN_BEAM!r} (the run's "
                                f"validation beam), got {text!r}") from None
    if not 1 <= beam <= MAX_BEAM:
        raise RequestError(400, f"beam must be between 1 and {MAX_BEAM}, got {beam}")
    return beam


def _probe_arguments(request) -> tuple[str, int, int]:
    """The run, step and probe sentence a route is asked about."""
    return _argument(request, "run"), _integer(request, "step"), _integer(request, "sentence")


def _method(request) -> str:
    """The request's explanation method, one of ``analysis.explain.registry.METHODS`` (else a 400): the one
    place a method name from the page is checked."""
    method = _argument(request, "method")
    if method not in METHODS:
        raise RequestError(400, f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return method


def _weights_method(decoder_layers: int) -> dict:
    """How a run logged without explanations describes ``WEIGHTS``, the method whose maps are the cross
    weights, per head."""
    return {"name": WEIGHTS, "label": METHODS[WEIGHTS].label, "per_head": True, "signed": False,
            "layers": list(layer_names(decoder_layers))}


def _with_weights(methods: list[dict], decoder_layers: int) -> list[dict]:
    """The methods whose maps the probes have, ``WEIGHTS`` (the cross weights) always first."""
    if methods and methods[0]["name"] == WEIGHTS:
        return methods
    return [_weights_method(decoder_layers), *(m for m in methods if m["name"] != WEIGHTS)]


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logged = LoggedRuns(context.data_provider)
        self._live = LiveRuns(Path(context.logdir).resolve() if context.logdir else None)

    def is_active(self) -> bool:
        return False  # TensorBoard enables the tab when the data provider lists summaries of this plugin

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention")

    def get_plugin_apps(self) -> dict:
        return {
            "/index.js": self._serve_index,
            "/static/*": self._serve_static,
            "/vocabulary": self._serve_vocabulary,
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

    # -- routes ---------------------------------------------------------------------------------------------

    @_route
    def _serve_vocabulary(self, request) -> dict:
        return vocabulary()

    @_route
    def _serve_runs(self, request) -> dict:
        runs, waiting, skipped = [], {}, {}
        listing = self._logged.listing(request)
        for run, tags in sorted(listing.items()):
            try:
                described = self._logged.description(request, run, tags)
            except MalformedRun as error:
                skipped[run] = str(error)
                continue
            if described is None:  # the start of training only, or summaries without a whole probe
                started = set(tags) == {RUN_TAG}
                waiting[run] = self._waiting(request, run) if started else NO_PROBES
                continue
            checkpoint, note, _ = self._live.checkpoint(run)  # looked up afresh: training saves new ones
            methods = _with_weights(described["methods"], described["num_layers"]["cross"])
            runs.append(described | {"methods": methods, "can_translate": checkpoint is not None,
                                     "translate_note": note})
        for run in sorted(set(self._logged.run_names(request)) - set(listing)):  # events, none of this tab's
            waiting[run] = self._waiting(request, run)
        return {"runs": runs, "waiting": dict(sorted(waiting.items())), "skipped": skipped}

    def _waiting(self, request, run: str) -> str:
        """Why a run has no maps yet and when its first come (``waiting_note``), from the config it saved."""
        logdir = self._live.logdir
        settings = run_settings(None if logdir is None else logdir / run)
        return waiting_note(settings, validated=self._logged.has_scalar(request, run, "val/loss"))

    @_route
    def _serve_attention(self, request) -> dict:
        run, step, sentence = _probe_arguments(request)
        data = self._logged.probe(request, run, step, sentence, list(KINDS), "attention")
        text = sentence_text(run, sentence, data["text"], step)
        weights = {kind: data[kind][step] for kind in KINDS}
        answer = {"run": run, "step": step, "sentence": sentence, "source": text["source"],
                  "target": text["target"]}
        return answer | _maps_answer(request, text["source_tokens"], text["target_in"], text["target_out"],
                                     weights, text.get("gold"))

    @_route
    def _serve_statistics(self, request) -> dict:
        run, step = _argument(request, "run"), _integer(request, "step")
        tags = [tag for tag in self._logged.run_tags(request, run) if STATISTIC_TAG.match(tag)]
        data = self._logged.read(request, run, tags)
        kinds: dict[str, dict[str, list]] = {}
        for tag in sorted(tags):
            kind, name = STATISTIC_TAG.match(tag).groups()
            if step in data.get(tag, {}):
                value = np.asarray(data[tag][step])
                if value.ndim != 2 or not np.issubdtype(value.dtype, np.number):
                    raise MalformedRun(f"run {run!r} {tag} is a {value.dtype} array of shape {value.shape}, "
                                       "expected numbers (layers, heads)")
                kinds.setdefault(kind, {})[name] = rounded(value)
        if not kinds:
            steps = sorted(set().union(*(data[tag].keys() for tag in data))) if data else []
            raise RequestError(404, f"run {run!r} logged no head statistics at step {step} "
                                    f"(logged steps: {abridged(steps)})")
        ordered = {kind: kinds[kind] for kind in KINDS if kind in kinds}
        names = {name for named in ordered.values() for name in named}
        definitions = [dataclasses.asdict(statistic) for statistic in STATISTICS]
        return {"run": run, "step": step, "kinds": ordered, "definitions": definitions,
                "descriptions": {d["name"]: d["description"] for d in definitions if d["name"] in names}}

    @_route
    def _serve_explanation(self, request) -> dict:
        run, step, sentence = _probe_arguments(request)
        method = _method(request)
        if METHODS[method].weights:
            data = self._logged.probe(request, run, step, sentence, ["cross"], "cross-attention")
            per_head = data["cross"][step].astype(np.float32)  # (L, H, T, S)
            per_layer = per_head.mean(axis=1)  # (L, T, S): the method's layer map is its heads' mean
        else:
            tags = self._logged.run_tags(request, run)
            parts = [f"explain/{method}", f"explain/{method}/per_layer"]  # the second for methods with heads
            parts = [part for part in parts if sentence_tag(sentence, part) in tags] or parts[:1]
            mapped = {m.group(2) for m in map(SENTENCE_EXPLAIN_TAG.match, tags) if m} | {WEIGHTS}
            logged = f" (its probes have maps of {', '.join(name for name in METHODS if name in mapped)})"
            data = self._logged.probe(request, run, step, sentence, parts, f"{method} maps", logged)
            per_layer = data[parts[-1]][step].astype(np.float32)  # (L, T, S)
            per_head = data[parts[0]][step].astype(np.float32) if len(parts) == 2 else None  # (L, H, T, S)
        text = sentence_text(run, sentence, data["text"], step)
        described = next((m for m in text.get("methods", []) if m["name"] == method), None)
        if described is None and METHODS[method].weights:  # a run logged without explanations
            described = _weights_method(per_layer.shape[0])
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
        aer = None if gold is None else _map_aer(method, described, per_layer, per_head, gold,
                                                 text.get("gold_words"))
        answer = {"run": run, "step": step, "sentence": sentence}
        return answer | _explanation_answer(method, described, rows, cols, per_layer, per_head) | {
            "gold": gold, "aer": aer}

    @_route
    def _serve_lens(self, request) -> dict:
        run, step, sentence = _probe_arguments(request)
        data = self._logged.probe(request, run, step, sentence, ["lens"], "logit lens")
        text = sentence_text(run, sentence, data["text"], step)
        lens = logged_json(run, sentence_tag(sentence, "lens"), data["lens"], step)
        return {"run": run, "step": step, "sentence": sentence, "rows": text["target_out"]} | lens

    @_route
    def _serve_explanations(self, request) -> dict:
        run, step = _argument(request, "run"), _integer(request, "step")
        tags = [tag for tag in self._logged.run_tags(request, run) if EXPLAIN_TAG.match(tag)]
        if not tags:
            why = self._why_no_scores(request, run)
            raise RequestError(404, f"run {run!r} logged no explanation scores{why}")
        named: dict[str, dict[str, dict]] = {}  # method -> score -> step -> value
        for tag, values in self._logged.read(request, run, tags).items():
            method, score = EXPLAIN_TAG.match(tag).groups()
            named.setdefault(method, {})[score] = values
        order = [name for name in METHODS if name in named and AER in named[name]]
        history = {name: {s: best for s, aer in named[name][AER].items()
                          if (best := lowest(run, explain_tag(name, AER), aer)) is not None}
                   for name in order}  # a diverged step's NaN scores are no point of the history
        present = [name for name in order if step in named[name][AER]]
        if not present:
            steps = sorted(set().union(*history.values()))
            raise RequestError(404, f"run {run!r} logged no explanation scores at step {step} "
                                    f"(logged steps: {abridged(steps)})")
        methods = {}
        for name in present:
            scores = {score: np.asarray(values[step]) for score, values in named[name].items()
                      if score not in (ABOUT, REPORTED) and step in values}
            if any(np.ndim(scores.get(score)) != 1 for score in LAYER_SCORES):
                raise MalformedRun(f"run {run!r} {' and '.join(explain_tag(name, s) for s in LAYER_SCORES)} "
                                   f"must all be logged at step {step}, one score per layer")
            about = named[name].get(ABOUT, {})
            about = logged_json(run, explain_tag(name, ABOUT), about, step) if about else {
                "label": METHODS[name].label, "layers": list(layer_names(len(scores[AER])))}
            if not isinstance(about.get("label"), str) or not isinstance(about.get("layers"), list):
                raise MalformedRun(f"run {run!r} {explain_tag(name, ABOUT)} is malformed (expected "
                                   "{label, layers})")
            finite = np.flatnonzero(np.isfinite(scores[AER]))
            best = None if not finite.size else int(finite[np.argmin(scores[AER][finite])])  # first of ties
            methods[name] = {"label": about["label"], "layers": about["layers"],
                             **{score: rounded(scores[score]) for score in LAYER_SCORES},
                             **{score: rounded(scores[score]) if score in scores else None
                                for score in HEAD_SCORES},
                             "best": None if best is None else {  # None: every layer's AER was NaN
                                 "layer": about["layers"][best],
                                 AER: round(float(scores[AER][best]), DECIMALS)},
                             REPORTED: reported_map(run, name, named[name].get(REPORTED), step)}
        rounded_history = {name: [[s, round(v, DECIMALS)] for s, v in sorted(steps.items())]
                           for name, steps in history.items()}
        return {"run": run, "step": step, "methods": methods, "history": rounded_history,
                "leader": leader(history, order, step)}

    def _why_no_scores(self, request, run: str) -> str:
        """Why a run logged no explanation scores, as the end of a sentence: no gold links, no sentence
        scored, or scores too big for the tab (the scalars that training logs beside them say which)."""
        described = self._logged.description(request, run, self._logged.run_tags(request, run))
        if described is not None and not described["has_gold"]:
            return ": its data has no gold alignment to score them against (the maps are still shown)"
        reason = ("they did not fit in --attention.max_bytes (the explain/* scalars have them)"
                  if self._logged.has_scalar(request, run, "explain/seconds")
                  else "it was trained with --attention.explanation_sentences 0")
        return f" although its data has gold alignments: {reason}"

    @_route
    def _serve_translate(self, request) -> dict:
        run = _argument(request, "run")
        text = " ".join(request.args.get("text", "").split())
        beam = _beam(request)
        method = _method(request) if request.args.get("method") else None
        ig_steps = _integer(request, "ig_steps", default=IG_STEPS_PREVIEW)
        if not 1 <= ig_steps <= MAX_IG_STEPS:
            raise RequestError(400, f"ig_steps must be between 1 and {MAX_IG_STEPS}, got {ig_steps}")
        self._logged.run_tags(request, run)
        if not text:
            raise RequestError(400, "the sentence is empty: type a sentence to translate")
        if len(text) > MAX_TEXT_CHARACTERS:
            raise RequestError(400, f"the sentence has {len(text)} characters; at most "
                                    f"{MAX_TEXT_CHARACTERS} are translated here")
        lock = self._live.lock(run)
        if not lock.acquire(blocking=False):
            raise RequestError(429, f"a translation is already running for run {run!r}; "
                                    "try again when it ends")
        try:
            done = self._live.translate(run, text, beam=beam, method=method, ig_steps=ig_steps)
        finally:
            lock.release()
        answer = {"run": run, "text": text, "translation": done.translation,
                  "checkpoint": done.checkpoint.name, "step": done.step, "beam": done.beam,
                  "run_beam": done.run_beam, "read": done.read, "unknown": done.unknown}
        if done.explanation is not None:
            e = done.explanation
            per_layer = e.per_layer[0].detach().cpu().numpy()  # (L, T, S)
            per_head = None if e.per_head is None else e.per_head[0].detach().cpu().numpy()  # (L, H, T, S)
            described = {"label": METHODS[method].label, "signed": e.signed, "layers": list(e.layers)}
            answer["explanation"] = _explanation_answer(method, described, done.target_out, done.source,
                                                        per_layer, per_head)
            answer["lens"] = {"rows": done.target_out} | done.lens
        maps = _maps_answer(request, done.source, done.target_in, done.target_out, done.weights, None)
        return answer | maps


def _explanation_answer(method: str, described: dict, rows, cols, per_layer: np.ndarray, per_head) -> dict:
    """A method's maps as routes answer them: per layer L × T × S, per head L × H × T × S or None."""
    return {"method": method, "label": described["label"], "signed": described["signed"],
            "layers": described["layers"], "rows": rows, "cols": cols, "per_layer": rounded(per_layer),
            "per_head": None if per_head is None else rounded(per_head)}


def _map_aer(method: str, described: dict, per_layer: np.ndarray, per_head, gold: list[list[int]],
             words: dict | None = None) -> dict:
    """AER of one sentence's map per layer (and head) against its gold cells [row, column], scored by
    ``analysis.explain.scores`` as the logged corpus figures are; or, for a gold set's probe, against its
    gold word links on its words (``viz.tab.gold_words``), as that set's logged figures are.

    On one unpadded sentence every row and column is a real token; rows with no reading (Shift-Att's EOS row)
    are zero and never gold-linked, so they count as the method's own validity masks would.
    """
    T, S = per_layer.shape[1:]
    heads = None if per_head is None else torch.from_numpy(per_head)[None]  # (1, L, H, T, S)
    explanation = Explanation(
        method, torch.from_numpy(per_layer)[None], heads, tuple(described["layers"]),  # (1, L, T, S)
        torch.ones(1, S, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool), described["signed"],
    )
    if words is not None:
        scores = word_aer(explanation, words)
    else:
        scores = alignment_scores(explanation, [{(col, row) for row, col in gold}])
    return {"per_layer": rounded(np.array([row.aer for row in scores.layers])),
            "per_head": None if scores.heads is None else rounded(np.array(scores.heads.aer))}


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
        kinds = {kind: {"rows": axes[kind][0], "cols": axes[kind][1], "weights": rounded(weights[kind])}
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
            "weights": rounded(array[layer, head]), "gold": gold if kind == "cross" else None}
