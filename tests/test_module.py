"""The training system's pieces that need no Trainer: learning-rate schedules and the loss."""

import math

import pytest
import torch

from training.module import TranslationModule


def module(**overrides):
    settings = dict(src_vocab_size=13, tgt_vocab_size=11, d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32, warmup_steps=4, lr=1.0)
    settings.update(overrides)
    return TranslationModule(**settings)


def test_inverse_sqrt_schedule_warms_up_linearly_then_decays():
    m = module(schedule="inverse_sqrt")
    factors = [m._lr_factor(step) for step in range(8)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4:] == pytest.approx([math.sqrt(4 / 5), math.sqrt(4 / 6), math.sqrt(4 / 7), math.sqrt(4 / 8)])


def test_cosine_schedule_reaches_zero_at_the_last_step():
    m = module(schedule="cosine")
    m._total_steps = lambda: 12  # the Trainer's estimate during fit
    assert m._lr_factor(3) == 1.0
    assert m._lr_factor(7) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert m._lr_factor(11) == pytest.approx(0.0)


def test_constant_schedule_after_warm_up():
    m = module(schedule="constant")
    assert [m._lr_factor(s) for s in (0, 3, 100)] == [0.25, 1.0, 1.0]


def test_loss_ignores_padding_and_accepts_packed_logits():
    m = module()
    logits = torch.randn(2, 3, 11)
    targets = torch.tensor([[5, 6, 0], [7, 0, 0]])
    keep = targets != 0
    full = m.loss(logits, targets)
    packed = m.loss(logits[keep], targets[keep])
    torch.testing.assert_close(full, packed)
    torch.testing.assert_close(full, torch.nn.functional.cross_entropy(logits[keep], targets[keep]))


@pytest.mark.parametrize("overrides, message", [({"label_smoothing": 1.0}, "label_smoothing"), ({"lr": 0.0}, "lr")])
def test_bad_settings_name_the_setting(overrides, message):
    with pytest.raises(ValueError, match=message):
        module(**overrides)
