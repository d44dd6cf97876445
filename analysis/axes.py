"""Which tokens label the rows and columns of each kind of attention map: one convention for every view.

Rows are queries and columns keys. Decoder and cross-attention rows are labelled with the token being
*generated* at that position (the decoder's output), so a cross-attention row shows where the model looks to
produce that word; decoder columns are the tokens the decoder reads (``<s>`` and the tokens before it), so the
upper triangle of a decoder map is empty.
"""

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One kind of attention map, as every view names it (the ATTENTION tab reads these from its
    ``vocabulary`` route, figures and tables from ``KIND_LABELS``)."""

    name: str  # in tags, keys and URLs
    label: str  # in titles and figures, lower case: "encoder self-attention"
    short: str  # one word, for a button: "Encoder"
    help: str  # what one row of its map shows
    rows: str  # "source" or "target": the side its queries come from
    cols: str  # the side its keys come from
    causal: bool  # its queries see no later key: the upper triangle of its maps is masked
    aligns: bool  # target → source: the maps that explanation methods explain and gold alignments score


# In the order of ``model.AttentionMaps``' fields.
ATTENTION_KINDS = (
    Kind("encoder", "encoder self-attention", "Encoder", "Each source token attends to every source token",
         "source", "source", causal=False, aligns=False),
    Kind("decoder", "decoder self-attention", "Decoder",
         "Each target position attends to the tokens read so far (causal; grey: the masked future); a row is "
         "labelled with the token generated there", "target", "target", causal=True, aligns=False),
    Kind("cross", "cross-attention", "Cross", "Target → source: a row shows where the model looks to produce "
         "that word", "target", "source", causal=False, aligns=True),
)
KINDS = tuple(kind.name for kind in ATTENTION_KINDS)
KIND_LABELS = {kind.name: kind.label for kind in ATTENTION_KINDS}


def attention_axes(
    source: Sequence[str], target_in: Sequence[str], target_out: Sequence[str]
) -> dict[str, tuple[list[str], list[str]]]:
    """Per attention kind, the (row tokens, column tokens) of its maps.

    Args:
        source: the S source tokens, as the encoder reads them (EOS included).
        target_in: the T tokens the decoder reads (BOS, then the target without its last token).
        target_out: the T tokens the decoder generates (the target, then EOS).
    """
    if len(target_in) != len(target_out):
        raise ValueError(f"target_in and target_out must have the same length, got {len(target_in)} and "
                         f"{len(target_out)}")
    source, target_in, target_out = list(source), list(target_in), list(target_out)
    return {"encoder": (source, source), "decoder": (target_out, target_in), "cross": (target_out, source)}
