"""Checkpoints saved by earlier versions, brought to today's parameter names as they are loaded.

Every path that loads a checkpoint's weights applies ``upgrade_state_dict`` first: ``read_checkpoint``
(evaluation, the ATTENTION tab, averaging), ``--resume``'s check, and Lightning's own restore
(``TranslationModule.on_load_checkpoint``). The model itself knows only today's names.
"""

import re

# Checkpoints written before the sublayers were spelled out in the layers' forward name a layer's norms
# ``<block>.norm``: (stack, old block) → today's norm attribute of the layer.
OLD_NORM_NAMES = {
    ("encoder_layers", "attn_block"): "self_attn_norm",
    ("encoder_layers", "ff_block"): "feed_forward_norm",
    ("decoder_layers", "self_block"): "self_attn_norm",
    ("decoder_layers", "cross_block"): "cross_attn_norm",
    ("decoder_layers", "ff_block"): "feed_forward_norm",
}
_OLD_NORM = re.compile(r"(?<![^.])(encoder_layers|decoder_layers)\.(\d+)\.(\w+_block)\.norm\.")


def upgrade_state_dict(state_dict: dict) -> dict:
    """The weights of ``state_dict`` under today's names (a new dict, in the same order); today's names and
    anything not a parameter name of an earlier version pass unchanged, whatever prefix they carry
    (``model.`` in a training checkpoint)."""

    def today(match: re.Match) -> str:
        stack, layer, block = match.groups()
        norm = OLD_NORM_NAMES.get((stack, block))
        return match[0] if norm is None else f"{stack}.{layer}.{norm}."

    return {_OLD_NORM.sub(today, key, count=1) if isinstance(key, str) else key: value
            for key, value in state_dict.items()}
