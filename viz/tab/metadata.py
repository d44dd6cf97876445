"""What the ATTENTION tab's summaries are called and how they are marked, shared by the writer and the plugin.

Every summary carries ``SummaryMetadata.plugin_data.plugin_name = "attention"`` and the tensor data class, so
TensorBoard hands it to this plugin (and to no other tab). Tags:

- ``attention/sentence_<i>/text``: a string tensor, JSON ``{"source", "target", "source_tokens",
  "target_in", "target_out", "gold"}`` for probe sentence ``i`` (0-based);
  and, with the explanations, ``"methods"``: [{"name", "label", "per_head", "signed", "layers"}] (every
  method whose map the probe has, the cross weights' own first); for a probe of a gold alignment set,
  ``"gold"`` holds the cells of its gold words' tokens and ``"gold_words"`` its words and word links
  (``viz.tab.gold_words``), on which its maps are scored;
- ``attention/sentence_<i>/<kind>``: float16 (L, H, Tq, Tk), every layer and head of one attention kind;
- ``attention/sentence_<i>/explain/<method>``: float16, one explanation method's map under forced decoding of
  the reference: (L, H, T, S) for methods with heads, (L, T, S) for the others (rows: the tokens produced,
  ``target_out``; columns: the source tokens); never for the method whose maps are the ``cross`` weights
  (``analysis.explain.registry.Method.weights``);
- ``attention/sentence_<i>/explain/<method>/per_layer``: float16 (L, T, S), the per-layer map of a method
  with heads (not always the mean of its heads': value-weighted attention is the norm of their sum);
- ``attention/sentence_<i>/lens``: JSON ``{"layers", "top_tokens", "top_probs", "produced_prob",
  "produced_rank"}``, the logit lens under forced decoding of the reference
  (``evaluation.explanations.lens_record``);
- ``attention/statistics/<kind>/<name>``: float32 (L, H), one head statistic over many validation sentences;
- ``attention/explain/<method>/<score>``: float32, a method's scores against the gold alignment over the
  ``explanation_sentences``: ``LAYER_SCORES`` (``aer``, ``agreement``: (L,)), and ``HEAD_SCORES``
  (``head_aer``, ``head_agreement``: (L, H)) for methods with heads; ``attention/explain/<method>/layers``
  (``ABOUT``): JSON ``{"label", "layers"}``;
  ``attention/explain/<method>/reported`` (``REPORTED``), on a gold set of more pairs than those scored:
  JSON ``{"layer", "head", "aer", "chosen_aer", "choose", "report", "apart"}``, the map chosen on the scored
  pairs (head counted from 1, null for a layer's map) and its AER on the others
  (``evaluation.gold_alignment.reported``, with the pair numbers of ``Parts.as_dict``);
- ``attention/run``: JSON ``{"every_n_epochs"}``, and ``"supervised": {"layer", "head", "labels", "weight"}``
  where guided alignment trains a head (counted from 1), written as training starts, so that TensorBoard
  shows the tab and the tab lists the run (waiting, with when its first maps come) before its first maps.
"""

import json
import re

from tensorboard.compat.proto import summary_pb2

from analysis.axes import KINDS

PLUGIN_NAME = "attention"
VERSION = 1  # of the tags and contents above

_KIND = "|".join(KINDS)
RUN_TAG = "attention/run"
SENTENCE_TAG = re.compile(rf"^attention/sentence_(\d+)/(text|{_KIND})$")
STATISTIC_TAG = re.compile(rf"^attention/statistics/({_KIND})/(\w+)$")
SENTENCE_EXPLAIN_TAG = re.compile(r"^attention/sentence_(\d+)/explain/(\w+)$")  # not the per_layer maps
# A method's scores, as its tags and the explanations route name them: per layer, the fields of
# analysis.explain.scores.LayerScore (and HeadScores); AER, the first, ranks methods and maps (lower: better).
LAYER_SCORES = ("aer", "agreement")
AER = LAYER_SCORES[0]
HEAD_SCORES = tuple(f"head_{score}" for score in LAYER_SCORES)
ABOUT, REPORTED = "layers", "reported"  # a method's JSON beside its scores: {label, layers}; its reported map
_EXPLAIN_PART = "|".join((*LAYER_SCORES, *HEAD_SCORES, ABOUT, REPORTED))
EXPLAIN_TAG = re.compile(rf"^attention/explain/(\w+)/({_EXPLAIN_PART})$")


def sentence_tag(index: int, part: str) -> str:
    return f"attention/sentence_{index}/{part}"


def statistic_tag(kind: str, name: str) -> str:
    return f"attention/statistics/{kind}/{name}"


def explain_tag(method: str, score: str) -> str:
    return f"attention/explain/{method}/{score}"


def layout_version(content: bytes):
    """The layout version a summary's plugin content names (``create_metadata``), else None."""
    try:
        data = json.loads(content)
    except ValueError:  # not JSON, or not UTF-8
        return None
    return data.get("version") if isinstance(data, dict) else None


def create_metadata() -> summary_pb2.SummaryMetadata:
    content = json.dumps({"version": VERSION}).encode()
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
