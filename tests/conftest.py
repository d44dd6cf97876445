"""Shared fixtures: tiny models that run in milliseconds on a CPU."""

import pytest
import torch

from model import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2


def tiny_config(**overrides) -> TransformerConfig:
    settings = dict(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_model=16,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=64,
    )
    settings.update(overrides)
    return TransformerConfig(**settings)


@pytest.fixture
def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config()).eval()


def random_ids(batch: int, length: int, vocab: int, *, generator=None) -> torch.Tensor:
    """Ids of ordinary tokens (no pad, bos or eos), shape (batch, length)."""
    return torch.randint(3, vocab, (batch, length), generator=generator)
