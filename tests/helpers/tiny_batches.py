"""Small batches and modules the tests of the packed and compiled training step share
(tests/model/test_compile.py, tests/model/test_packing.py, and tests/test_gpu.py, which runs them on a GPU).
"""

import random

import torch

from data.batching import collate
from tests.conftest import BOS, PAD, random_ids
from training.module import TranslationModule


def training_module(positional: str, dropout: float = 0.1) -> TranslationModule:
    torch.manual_seed(0)
    return TranslationModule(
        src_vocab_size=13, tgt_vocab_size=11, d_model=16, num_heads=2, num_encoder_layers=2,
        num_decoder_layers=2, d_ff=32, dropout=dropout, attention_dropout=dropout, positional=positional,
        label_smoothing=0.1,
    ).train()


def batch(size: int, longest: int, seed: int, *, padded: bool = True):
    """A collated batch of ``size`` sentence pairs of 2 to ``longest`` tokens, or all of ``longest``."""
    rng = random.Random(seed)

    def ids(vocab: int) -> list[int]:
        length = rng.randint(2, longest) if padded else longest
        return [rng.randrange(3, vocab) for _ in range(length)]

    return collate([(i, ids(13), ids(11)) for i in range(size)])


def padded_batch():
    """Three sentences of different lengths each side, so that both sides have padding in every position
    but the first."""
    torch.manual_seed(3)
    src = random_ids(3, 7, 13)
    src[0, 3:] = PAD
    src[1, 6:] = PAD
    tgt_in = random_ids(3, 6, 11)
    tgt_in[:, 0] = BOS
    tgt_in[0, 2:] = PAD
    tgt_in[2, 4:] = PAD
    return src, tgt_in
