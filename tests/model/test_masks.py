"""The mask builders against literal expected matrices (True = may attend)."""

import torch

from model.masks import causal_mask, decoder_self_mask, padding_mask
from tests.conftest import BOS, PAD

T, F = True, False


def test_padding_mask_marks_real_tokens():
    ids = torch.tensor([[5, 6, 7], [8, PAD, PAD]])
    expected = torch.tensor([[T, T, T], [T, F, F]])
    mask = padding_mask(ids, pad_id=PAD)
    assert mask.shape == (2, 1, 1, 3)
    assert mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], expected)


def test_causal_mask_is_lower_triangle_with_diagonal():
    expected = torch.tensor([[T, F, F], [T, T, F], [T, T, T]])
    mask = causal_mask(3)
    assert mask.shape == (1, 1, 3, 3)
    assert torch.equal(mask[0, 0], expected)


def test_decoder_self_mask_combines_causal_and_padding():
    ids = torch.tensor([[BOS, 9, 9], [BOS, 9, PAD]])
    mask = decoder_self_mask(ids, pad_id=PAD)
    assert mask.shape == (2, 1, 3, 3)
    assert torch.equal(mask[0, 0], torch.tensor([[T, F, F], [T, T, F], [T, T, T]]))
    assert torch.equal(mask[1, 0], torch.tensor([[T, F, F], [T, T, F], [T, T, F]]))
