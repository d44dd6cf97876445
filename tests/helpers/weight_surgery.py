"""Weight surgery for tests and benchmarks: a model whose decodings run exactly their length limit.

A device for measuring and testing decoding, not part of the model, so it lives beside the tests;
bench/speed.py and bench/peers/joeynmt_venv.py import it from here (``tests.helpers.weight_surgery``).
"""

import torch

from model.transformer import Transformer

EOS_SUPPRESSION = (
    "EOS can never win: feature 0 of the final decoder LayerNorm is pinned to 1 (gain 0, bias 1), the EOS "
    "row of the output projection reads only that feature with weight -10000, and no other row reads it"
)


def suppress_eos(model: Transformer) -> None:
    """Make the EOS logit -10000 at every position, so that every decoding runs exactly its ``max_len`` steps.

    Only weights change: each step does the same work with the same shapes. See ``EOS_SUPPRESSION``.
    """
    c = model.config
    if c.tie_output_embedding or not c.norm_first:
        raise ValueError("suppress_eos needs an untied output projection and the final LayerNorm of pre-LN")
    with torch.no_grad():
        model.decoder_norm.weight[0] = 0.0
        model.decoder_norm.bias[0] = 1.0
        model.output_proj.weight[:, 0] = 0.0
        model.output_proj.weight[c.eos_id] = 0.0
        model.output_proj.weight[c.eos_id, 0] = -10000
