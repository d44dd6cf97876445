"""The ATTENTION tab's backend: a TensorBoard dynamic plugin serving logged attention weights as JSON.

Routes (relative to ``data/plugin/attention/``; GET only: other methods get a 405; every error is a 4xx, or a
503 while a run's checkpoints change under a read, with ``{"error": "one line"}``):

- ``index.js``, ``static/<file>``: the frontend, plain ES modules shipped with this package;
- ``runs``: runs with attention data, their logged steps, probe sentences and shapes;
- ``attention?run&step&sentence[&kind&layer&head]``: every head of one probe sentence at one step, or one map;
- ``statistics?run&step``: the head statistics, layers × heads per kind;
- ``translate?run&text[&beam]``: translates a typed sentence with the run's newest weights (on the CPU; the
  checkpoint that ``training.run_checkpoints.newest_checkpoint`` chooses, as ``train.py --resume`` does) and
  returns every head's attention for it, in the shape of ``attention``.

The weights come from the summaries that ``viz.logger.AttentionLogger`` writes
(``viz.tab.metadata``); nothing is ever written to the run folder.
"""

import json
import re
import threading
from pathlib import Path

import numpy as np
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from analysis.axes import KINDS, attention_axes
from viz.tab.metadata import PLUGIN_NAME, SENTENCE_TAG, STATISTIC_TAG, sentence_tag

_GONE = object()

STATIC = Path(__file__).parent / "static"
STATIC_FILE = re.compile(r"^[A-Za-z0-9_-]+\.(js|css)$")
CONTENT_TYPES = {"js": "text/javascript", "css": "text/css"}
ALL_STEPS = 1_000_000  # downsampling bound when reading: every step the loader kept
DECIMALS = 4
MAX_TEXT_CHARACTERS = 200
MAX_BEAM = 8
METHODS = ("GET", "HEAD")  # every route only reads
CHECKPOINT_TRIES = 3  # reads of a run's newest checkpoint while training rotates its checkpoints

DESCRIPTIONS = {
    "entropy": "mean entropy of the head's attention rows, in nats: low = focused on few tokens",
    "distance": "mean distance in tokens between a query and the keys it attends to",
    "diagonal": "share of attention on the query's own position",
    "previous": "share of attention on the position just before the query's",
    "next": "share of attention on the position just after the query's",
    "agreement": "share of target words whose strongest attention falls on a gold-aligned source word "
    "(higher is better)",
    "aer": "alignment error rate of the head's strongest links against the gold alignment (lower is better)",
}


class RequestError(Exception):
    """A request the plugin cannot answer; ``status`` is the HTTP code (4xx) and the message one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
    return np.round(array.astype(np.float64), DECIMALS).tolist()


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
        match = STATIC_FILE.match(name)
        path = STATIC / name
        if not match or not path.is_file():
            return _json(request, {"error": f"no static file {name!r}"}, code=404)
        return http_util.Respond(request, path.read_text(encoding="utf-8"), CONTENT_TYPES[match.group(1)])

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
        return listing[run]

    @staticmethod
    def _sentences(tags) -> list[int]:
        found = {int(m.group(1)) for m in map(SENTENCE_TAG.match, tags) if m}
        return sorted(n for n in found if all(sentence_tag(n, part) in tags for part in ("text", *KINDS)))

    @staticmethod
    def _text(values: dict[int, np.ndarray], step: int | None = None) -> dict:
        """A sentence's JSON text at ``step`` (the tokens do not change during a run), else its latest."""
        value = values[step] if step in values else values[max(values)]
        return json.loads(value.item())

    def _describe_run(self, request, run: str, tags: dict[str, provider.TensorTimeSeries]) -> dict | None:
        """What /runs says of one run; what it reads of the logged tensors is cached until the run logs a
        newer step (the page asks every 30 s per open tab), its checkpoint is looked up afresh."""
        newest = max(((s.max_step, s.max_wall_time) for s in tags.values()), default=None)
        key = (newest, len(tags))
        cached = self._described.get(run)
        if cached is None or cached[0] != key:
            cached = key, self._read_description(request, run, tags)
            self._described[run] = cached
        if cached[1] is None:
            return None
        checkpoint, note, _ = self._checkpoint(run)
        return cached[1] | {"can_translate": checkpoint is not None, "translate_note": note}

    def _read_description(self, request, run: str, tags) -> dict | None:
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
            text = self._text(texts[sentence_tag(n, "text")])
            described.append({"id": n, "source": text["source"], "target": text["target"]})
        shapes = {kind: first[sentence_tag(sentences[0], kind)][steps[-1]].shape for kind in KINDS}
        has_gold = self._text(texts[sentence_tag(sentences[0], "text")]).get("gold") is not None
        return {
            "run": run,
            "steps": steps,
            "sentences": described,
            "kinds": list(KINDS),
            "num_layers": {kind: int(shape[0]) for kind, shape in shapes.items()},
            "num_heads": int(shapes["encoder"][1]),
            "has_gold": has_gold,
            "statistics_steps": self._statistic_steps(request, run, tags),
        }

    def _statistic_steps(self, request, run: str, tags) -> list[int]:
        tag = next((tag for tag in sorted(tags) if STATISTIC_TAG.match(tag)), None)
        return [] if tag is None else sorted(self._read(request, run, [tag]).get(tag, {}))

    # -- routes ---------------------------------------------------------------------------------------------

    @_route
    def _serve_runs(self, request) -> dict:
        runs = []
        for run, tags in sorted(self._listing(request).items()):
            described = self._describe_run(request, run, tags)
            if described is not None:
                runs.append(described)
        return {"runs": runs}

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
        text = self._text(data[parts[0]], step)
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
                kinds.setdefault(kind, {})[name] = _rounded(np.asarray(data[tag][step]))
        if not kinds:
            steps = sorted(set().union(*(data[tag].keys() for tag in data))) if data else []
            raise RequestError(404, f"run {run!r} logged no head statistics at step {step} "
                                    f"(logged steps: {_abridged(steps)})")
        ordered = {kind: kinds[kind] for kind in KINDS if kind in kinds}
        names = {name for named in ordered.values() for name in named}
        return {"run": run, "step": step, "kinds": ordered,
                "descriptions": {name: DESCRIPTIONS.get(name, name) for name in sorted(names)}}

    @_route
    def _serve_translate(self, request) -> dict:
        run = _argument(request, "run")
        text = " ".join(request.args.get("text", "").split())
        beam = _integer(request, "beam", default=1)
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
            return self._translate(run, text, beam, request)
        finally:
            lock.release()

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
        )

        if self._logdir is None:
            return None, "translation needs TensorBoard started with --logdir (not --logdir_spec)", 404
        folder = (self._logdir / run / "checkpoints").resolve()
        if not folder.is_relative_to(self._logdir):
            return None, f"run {run!r} is outside the log directory", 403
        if not folder.is_dir():
            return None, f"no checkpoint yet in {folder}", 404
        try:
            return newest_checkpoint(folder, inside=self._logdir), None, 200
        except CheckpointMissing as error:
            return None, str(error), 404
        except CheckpointRefused as error:  # a symbolic link out of the log directory
            return None, str(error), 403
        except CheckpointError as error:  # one of them unreadable: named
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

    def _translate(self, run: str, text: str, beam: int, request) -> dict:
        import torch

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
        answer = {"run": run, "text": text, "translation": tgt_tok.decode(ids), "checkpoint": checkpoint.name,
                  "step": loaded.global_step, "beam": beam}
        return answer | _maps_answer(request, attention.source, attention.target_in, attention.target_out,
                                     weights, None)


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
