"""Which tokens label the rows and columns of each kind of attention map: one convention for every view.

Rows are queries and columns keys. Decoder and cross-attention rows are labelled with the token being
*generated* at that position (the decoder's output), so a cross-attention row shows where the model looks to
produce that word; decoder columns are the tokens the decoder reads (``<s>`` and the tokens before it), so the
upper triangle of a decoder map is empty.
"""

from collections.abc import Sequence

KINDS = ("encoder", "decoder", "cross")  # the order of ``model.AttentionMaps``' fields

KIND_LABELS = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}


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
