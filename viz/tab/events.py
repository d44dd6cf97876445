"""What ``viz.logger.AttentionLogger`` logged, read for the ATTENTION tab through TensorBoard's data provider:
the runs, their probe sentences and steps, and the checks that each is in the layout ``viz.tab.metadata``
describes.

Nothing here imports torch, directly or through another module: listing runs and reading logged maps never
loads the model code.
"""

import json
import logging
from pathlib import Path

import numpy as np
import yaml
from tensorboard import plugin_util
from tensorboard.data import provider

from analysis.axes import KINDS
from viz.tab.metadata import (
    AER,
    EXPLAIN_TAG,
    PLUGIN_NAME,
    REPORTED,
    RUN_TAG,
    SENTENCE_TAG,
    STATISTIC_TAG,
    VERSION,
    explain_tag,
    layout_version,
    sentence_tag,
)

log = logging.getLogger(__name__)

ALL_STEPS = 1_000_000  # downsampling bound when reading: every step the loader kept
DECIMALS = 4
SENTENCE_FIELDS = ("source", "target", "source_tokens", "target_in", "target_out")
METHOD_FIELDS = {"name": str, "label": str, "per_head": bool, "signed": bool, "layers": list}
SUPERVISED_FIELDS = {"layer": int, "head": int, "labels": (str, type(None)), "weight": (int, float)}
SUPERVISED_FLAGS = ("shifted", "full_context", "null")  # how the head was trained; absent in older runs
GOLD_WORDS_FIELDS = ("source_words", "target_words", "source_count", "target_count", "sure", "possible")
# Optional: a run logged before them reads every word as itself.
GOLD_WORDS_READERS = ("source_readers", "target_readers")
NOT_YET = "no attention logged yet"
NO_PROBES = ("its attention summaries hold no probe sentence's maps (attention.num_sentences 0, or every "
             "probe over attention.max_bytes: its training warned which)")


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


def rounded(array: np.ndarray) -> list:
    """Nested lists of rounded floats; NaN and infinities (a diverged run's maps) as None, JSON's null."""
    array = np.asarray(array, dtype=np.float64)
    values = np.round(array, DECIMALS).astype(object)
    values[~np.isfinite(array)] = None
    return values.tolist()


def abridged(steps: list[int]) -> str:
    if not steps:
        return "none"
    return ", ".join(map(str, steps)) if len(steps) <= 8 else f"{steps[0]}, {steps[1]}, …, {steps[-1]}"


def logged_json(run: str, tag: str, values: dict[int, np.ndarray], step: int | None = None) -> dict:
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


def _no_constant(name: str):
    raise _NonFinite(name)


def lowest(run: str, tag: str, scores) -> float | None:
    """The lowest finite score of a logged array of scores (a method's best AER), None if it has none."""
    scores = np.asarray(scores)
    if not np.issubdtype(scores.dtype, np.number):
        raise MalformedRun(f"run {run!r} {tag} is a {scores.dtype} array, expected numbers")
    finite = scores[np.isfinite(scores)]
    return float(finite.min()) if finite.size else None


def sentence_text(run: str, sentence: int, values: dict[int, np.ndarray], step: int | None = None) -> dict:
    """A probe sentence's text (``viz.tab.metadata``), checked for what the routes read of it."""
    tag = sentence_tag(sentence, "text")
    text = logged_json(run, tag, values, step)
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
    if "gold_words" in text and not _gold_words(text["gold_words"], rows, cols):
        raise MalformedRun(f"run {run!r} {tag} has a malformed 'gold_words' (expected "
                           f"{{{', '.join(GOLD_WORDS_FIELDS)}}} of a {rows} × {cols} map)")
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


def _gold_words(record, rows: int, cols: int) -> bool:
    """Whether ``record`` is the words of a gold probe of a rows × cols map (``viz.tab.gold_words``)."""
    if not isinstance(record, dict) or any(field not in record for field in GOLD_WORDS_FIELDS):
        return False
    counts = record["source_count"], record["target_count"]
    if not all(_whole(count) and count > 0 for count in counts):
        return False

    def words(values, length: int, count: int) -> bool:
        return isinstance(values, list) and len(values) == length and all(
            _whole(v) and -1 <= v < count for v in values)

    def links(values) -> bool:  # [target word, source word]
        return isinstance(values, list) and all(
            isinstance(link, list) and len(link) == 2 and all(map(_whole, link))
            and 0 <= link[0] < counts[1] and 0 <= link[1] < counts[0] for link in values)

    readers = [(record[name], count) for name, count in zip(GOLD_WORDS_READERS, counts) if name in record]
    return (words(record["source_words"], cols, counts[0]) and words(record["target_words"], rows, counts[1])
            and links(record["sure"]) and links(record["possible"])
            and all(words(values, count, count) for values, count in readers))


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _method_described(method) -> bool:
    return isinstance(method, dict) and all(isinstance(method.get(k), t) for k, t in METHOD_FIELDS.items())


def supervised_head(run: str, values: dict[int, np.ndarray] | None) -> dict | None:
    """The head guided alignment supervised in the run, as its ``attention/run`` summary names it (``layer``
    and ``head`` counted from 1, ``labels``, ``weight``, and the flags ``shifted``, ``full_context`` and
    ``null``: false for runs logged before them);
    None where it names none."""
    if not values:
        return None
    supervised = logged_json(run, RUN_TAG, values).get("supervised")
    if supervised is None:
        return None
    if not (isinstance(supervised, dict) and all(
            isinstance(supervised.get(k), t) and not isinstance(supervised.get(k), bool)
            for k, t in SUPERVISED_FIELDS.items()) and min(supervised["layer"], supervised["head"]) >= 1):
        raise MalformedRun(f"run {run!r} {RUN_TAG} has a malformed 'supervised' (expected "
                           f"{{{', '.join(SUPERVISED_FIELDS)}}}, layer and head counted from 1)")
    flags = {flag: supervised.get(flag, False) for flag in SUPERVISED_FLAGS}  # false in runs before each
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise MalformedRun(f"run {run!r} {RUN_TAG} has a malformed 'supervised' ({flag!r} is not true or "
                               "false)")
    return {**{k: supervised[k] for k in SUPERVISED_FIELDS}, **flags}


def reported_map(run: str, method: str, values: dict[int, np.ndarray] | None, step: int) -> dict | None:
    """A method's map chosen on the scored gold pairs and its AER on the others, as logged at ``step``
    (``viz.tab.metadata``); None where it logged none then."""
    if not values or step not in values:
        return None
    tag = explain_tag(method, REPORTED)
    record = logged_json(run, tag, values, step)
    numbers = [record.get("aer"), record.get("chosen_aer")]  # null: NaN, written as JSON's null
    pairs = [record.get("choose"), record.get("report")]
    head = record.get("head")
    if not (isinstance(record.get("layer"), str) and (head is None or _whole(head))
            and all(n is None or (isinstance(n, (int, float)) and not isinstance(n, bool)) for n in numbers)
            and all(isinstance(p, list) and len(p) == 2 and all(map(_whole, p)) for p in pairs)):
        raise MalformedRun(f"run {run!r} {tag} is malformed (expected {{layer, head, aer, chosen_aer, "
                           "choose, report}})")
    aer, chosen = (None if n is None else round(float(n), DECIMALS) for n in numbers)
    return {"layer": record["layer"], "head": head, "aer": aer, "chosen_aer": chosen, "choose": pairs[0],
            "report": pairs[1]}


def run_settings(run_dir: Path | None) -> dict | None:
    """The settings a run saved beside its events: ``train.py``'s config.yaml, or the newest
    config.resumed-N.yaml of a resumed run; None where it saved none, or they cannot be read."""
    if run_dir is None:
        return None
    try:
        saved = [path for path in (run_dir / "config.yaml", *run_dir.glob("config.resumed-*.yaml"))
                 if path.is_file()]
        if not saved:
            return None
        newest = max(saved, key=lambda path: path.stat().st_mtime)
        settings = yaml.safe_load(newest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return settings if isinstance(settings, dict) else None


def waiting_note(settings: dict | None, *, validated: bool) -> str:
    """One line for a run with events but no attention maps: why, and when the first come, as its saved
    ``settings`` (``run_settings``) say; a general line where they say nothing. ``validated``: whether the
    run logged a validation loss."""
    attention, trainer = (settings or {}).get("attention"), (settings or {}).get("trainer") or {}
    every = attention.get("every_n_epochs", 1) if isinstance(attention, dict) else None
    if not isinstance(trainer, dict) or not _whole(every) or every < 0:  # not train.py's, or not readable
        return f"{NOT_YET}: train.py logs a run's first maps at its first validation"
    if every == 0:
        return "attention logging is off in this run (attention.every_n_epochs: 0 in its config.yaml)"
    later = "at every validation" if every == 1 else f"every {every} epochs"
    if validated:
        return (f"no attention logged at its validations so far (attention.every_n_epochs: {every}): maps "
                f"come {later} and at the end of training")
    if trainer.get("limit_val_batches") == 0:
        return f"{NOT_YET}: this run does not validate (trainer.limit_val_batches: 0); maps come at its end"
    first, after = _first_validation(trainer), f"{later} after, and at the end of training"
    return f"{NOT_YET}: maps come at the first validation, {first} ({after})"


def _first_validation(trainer: dict) -> str:
    """When a run of these trainer settings validates first (Lightning's ``val_check_interval`` and
    ``check_val_every_n_epoch``)."""
    interval, epochs = trainer.get("val_check_interval"), trainer.get("check_val_every_n_epoch", 1)
    if _whole(interval) and interval > 0:
        return f"after training batch {interval}"
    if isinstance(interval, float) and 0 < interval < 1:
        return "during epoch 1"
    return f"after epoch {epochs if _whole(epochs) and epochs > 0 else 1}"


def check_layout(run: str, tags: dict[str, provider.TensorTimeSeries]) -> None:
    """MalformedRun if any of the run's summaries names a layout other than this tab's ``VERSION``."""
    for series in tags.values():
        version = layout_version(series.plugin_content)
        if version != VERSION:
            raise MalformedRun(f"run {run!r} logged with layout version {version!r} of the attention "
                               f"summaries; this tab reads version {VERSION}")


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


class LoggedRuns:
    """The runs with attention summaries, read through TensorBoard's data provider, each described once per
    newest logged step."""

    def __init__(self, data_provider) -> None:
        self.provider = data_provider
        self._described: dict[str, tuple[tuple, dict | None]] = {}  # run -> (newest logged data, description)

    @staticmethod
    def _environ(request) -> dict:
        return {
            "ctx": plugin_util.context(request.environ),
            "experiment_id": plugin_util.experiment_id(request.environ),
        }

    def listing(self, request) -> dict[str, dict[str, provider.TensorTimeSeries]]:
        return self.provider.list_tensors(plugin_name=PLUGIN_NAME, **self._environ(request))

    def run_names(self, request) -> list[str]:
        """Every run with events, attention or not."""
        return [run.run_name for run in self.provider.list_runs(**self._environ(request))]

    def read(self, request, run: str, tags: list[str]) -> dict[str, dict[int, np.ndarray]]:
        """tag -> step -> value, for the tags of one run that exist."""
        data = self.provider.read_tensors(
            plugin_name=PLUGIN_NAME, downsample=ALL_STEPS, run_tag_filter=provider.RunTagFilter([run], tags),
            **self._environ(request),
        )
        return {
            tag: {datum.step: datum.numpy for datum in series} for tag, series in data.get(run, {}).items()
        }

    def has_scalar(self, request, run: str, tag: str) -> bool:
        """Whether the run logged the scalar ``tag`` (TensorBoard's scalars plugin keeps those)."""
        scalars = self.provider.list_scalars(
            plugin_name="scalars", run_tag_filter=provider.RunTagFilter([run], [tag]),
            **self._environ(request),
        )
        return bool(scalars.get(run))

    def run_tags(self, request, run: str) -> dict[str, provider.TensorTimeSeries]:
        """The run's tags: a 404 for a run with no attention data, a 409 (MalformedRun) for one logged
        otherwise."""
        listing = self.listing(request)
        if run not in listing:
            known = ", ".join(sorted(listing)) or "none"
            raise RequestError(404, f"unknown run {run!r} (runs with attention data: {known})")
        self.description(request, run, listing[run])
        return listing[run]

    @staticmethod
    def sentences(tags) -> list[int]:
        found = {int(m.group(1)) for m in map(SENTENCE_TAG.match, tags) if m}
        return sorted(n for n in found if all(sentence_tag(n, part) in tags for part in ("text", *KINDS)))

    def description(self, request, run: str, tags) -> dict | None:
        """What the logged tensors say of one run (None before its first complete probe), cached until the run
        logs a newer step (the page asks every 30 s per open tab). MalformedRun, warned of once per change of
        the data, if the run was logged in another layout.

        ``methods`` lists those whose own maps the probes have, as logged (not the method whose maps are
        the cross weights, which the routes add; a run logged without explanations lists none);
        ``supervised``, the head guided alignment trained (``supervised_head``), or None.
        """
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
        check_layout(run, tags)
        sentences = self.sentences(tags)
        if not sentences:
            return None
        first = self.read(request, run, [sentence_tag(sentences[0], kind) for kind in KINDS])
        logged = (set(first.get(sentence_tag(sentences[0], kind), {})) for kind in KINDS)
        steps = sorted(set.intersection(*logged))
        if not steps:
            return None
        texts = self.read(request, run, [sentence_tag(n, "text") for n in sentences])
        described = []
        for n in sentences:
            text = sentence_text(run, n, texts[sentence_tag(n, "text")])
            described.append({"id": n, "source": text["source"], "target": text["target"]})
        shapes = {kind: first[sentence_tag(sentences[0], kind)][steps[-1]].shape for kind in KINDS}
        for kind, shape in shapes.items():
            if len(shape) != 4:
                raise MalformedRun(f"run {run!r} {sentence_tag(sentences[0], kind)} has shape {shape}, "
                                   "expected (layers, heads, rows, columns)")
        text = sentence_text(run, sentences[0], texts[sentence_tag(sentences[0], "text")])
        # The methods with maps of their own (the routes add the cross weights' own, whose maps are the
        # weights: viz.tab.plugin._with_weights).
        methods = [m for m in text.get("methods", [])
                   if sentence_tag(sentences[0], f"explain/{m['name']}") in tags]
        return {
            "run": run,
            "steps": steps,
            "sentences": described,
            "kinds": list(KINDS),
            "num_layers": {kind: int(shape[0]) for kind, shape in shapes.items()},
            "num_heads": int(shapes["encoder"][1]),
            "has_gold": text.get("gold") is not None,
            "statistics_steps": self._statistic_steps(request, run, tags),
            "methods": methods,
            "has_lens": sentence_tag(sentences[0], "lens") in tags,
            "explanation_steps": self._explanation_steps(request, run, tags),
            "supervised": supervised_head(run, self.read(request, run, [RUN_TAG]).get(RUN_TAG)
                                          if RUN_TAG in tags else None),
        }

    def _explanation_steps(self, request, run: str, tags) -> list[int]:
        aer = [tag for tag in tags if (m := EXPLAIN_TAG.match(tag)) and m.group(2) == AER]
        data = self.read(request, run, aer) if aer else {}
        return sorted(set().union(*(values.keys() for values in data.values())))

    def _statistic_steps(self, request, run: str, tags) -> list[int]:
        tag = next((tag for tag in sorted(tags) if STATISTIC_TAG.match(tag)), None)
        return [] if tag is None else sorted(self.read(request, run, [tag]).get(tag, {}))

    def probe(
        self, request, run: str, step: int, sentence: int, parts: list[str], what: str, logged: str = ""
    ) -> dict:
        """part -> step -> value of one probe sentence's ``text`` and ``parts`` (404s naming what is
        missing, and ``logged``, what there is instead, where the parts were never logged)."""
        tags = self.run_tags(request, run)
        if sentence not in self.sentences(tags):
            raise RequestError(404, f"run {run!r} has no probe sentence {sentence} "
                                    f"(it has {self.sentences(tags)})")
        wanted = [sentence_tag(sentence, "text"), *(sentence_tag(sentence, part) for part in parts)]
        if any(tag not in tags for tag in wanted):
            raise RequestError(404, f"run {run!r} logged no {what} of sentence {sentence}{logged}")
        data = self.read(request, run, wanted)
        if any(step not in data.get(tag, {}) for tag in wanted[1:]):
            steps = sorted(data.get(wanted[1], {}))
            raise RequestError(404, f"run {run!r} logged no {what} of sentence {sentence} at step {step} "
                                    f"(logged steps: {abridged(steps)})")
        return {tag.removeprefix(sentence_tag(sentence, "")): data[tag] for tag in wanted}
