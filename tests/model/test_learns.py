"""A tiny Transformer memorises a few pairs: the loss goes to zero and decoding reproduces every target."""

import pytest
import torch
import torch.nn.functional as F

from model import Transformer
from tests.conftest import BOS, EOS, PAD, tiny_config


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [True, False])
def test_tiny_model_overfits_a_few_pairs(norm_first):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    pairs = []
    for length in (3, 4, 5, 6, 5, 4):
        src = torch.randint(3, 13, (length,), generator=generator)
        tgt = torch.randint(3, 11, (length + 1,), generator=generator)
        pairs.append((src, tgt))
    src = torch.nn.utils.rnn.pad_sequence([s for s, _ in pairs], batch_first=True, padding_value=PAD)
    tgt_in = torch.nn.utils.rnn.pad_sequence(
        [torch.cat([torch.tensor([BOS]), t]) for _, t in pairs], batch_first=True, padding_value=PAD
    )
    tgt_out = torch.nn.utils.rnn.pad_sequence(
        [torch.cat([t, torch.tensor([EOS])]) for _, t in pairs], batch_first=True, padding_value=PAD
    )

    model = Transformer(tiny_config(d_model=32, d_ff=64, norm_first=norm_first))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.01

    model.eval()
    for beam_size in (1, 4):
        out = model.generate(src, max_len=10, beam_size=beam_size)
        assert torch.equal(out, tgt_out[:, : out.size(1)]), f"beam {beam_size} did not reproduce the targets"
