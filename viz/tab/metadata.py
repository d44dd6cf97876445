"""What the ATTENTION tab's summaries are called and how they are marked, shared by the writer and the plugin.

Every summary carries ``SummaryMetadata.plugin_data.plugin_name = "attention"`` and the tensor data class, so
TensorBoard hands it to this plugin (and to no other tab). Tags:

- ``attention/sentence_<i>/text``: a string tensor, JSON ``{"source", "target", "source_tokens",
  "target_in", "target_out", "gold"}`` for probe sentence ``i`` (0-based);
- ``attention/sentence_<i>/<kind>``: float16 (L, H, Tq, Tk), every layer and head of one attention kind;
- ``attention/statistics/<kind>/<name>``: float32 (L, H), one head statistic over many validation sentences.
"""

import json
import re

from tensorboard.compat.proto import summary_pb2

PLUGIN_NAME = "attention"
VERSION = 1  # of the tags and contents above

SENTENCE_TAG = re.compile(r"^attention/sentence_(\d+)/(text|encoder|decoder|cross)$")
STATISTIC_TAG = re.compile(r"^attention/statistics/(encoder|decoder|cross)/(\w+)$")


def sentence_tag(index: int, part: str) -> str:
    return f"attention/sentence_{index}/{part}"


def statistic_tag(kind: str, name: str) -> str:
    return f"attention/statistics/{kind}/{name}"


def create_metadata() -> summary_pb2.SummaryMetadata:
    content = json.dumps({"version": VERSION}).encode()
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
