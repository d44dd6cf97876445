"""Padding-free training: packed activations give the padded computation's logits and gradients."""

import pytest
import torch

from model import DecoderRequest, Transformer
from model.attention import MultiHeadAttention
from model.cache import KVCache
from model.context import AttentionContext
from model.packing import Packing, TokenIndex, token_index
from tests.conftest import EOS, PAD, tiny_config
from tests.helpers.tiny_batches import padded_batch


def test_pack_and_pad_literal():
    keep = torch.tensor([[True, True, False], [False, True, False]])
    packing = Packing.of(keep)
    assert packing.index.tolist() == [0, 1, 4]
    assert (packing.batch, packing.length, packing.tokens) == (2, 3, 3)
    x = torch.arange(12.0).view(2, 3, 2)  # (B, T, C)
    packed = packing.pack(x)
    assert packed.tolist() == [[0.0, 1.0], [2.0, 3.0], [8.0, 9.0]]
    expected = torch.tensor([[[0.0, 1.0], [2.0, 3.0], [0.0, 0.0]], [[0.0, 0.0], [8.0, 9.0], [0.0, 0.0]]])
    assert torch.equal(packing.pad(packed), expected)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "relative"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_packed_training_pass_equals_the_padded_one(positional, norm_first, monkeypatch):
    """Logits at the target tokens and every parameter's gradient, with each position encoding and both
    norms."""
    pads = []  # the rows of every Packing.pad: the packed layers pad source and target around attention
    pad = Packing.pad
    monkeypatch.setattr(Packing, "pad", lambda self, x: pads.append(x.size(0)) or pad(self, x))
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional=positional, norm_first=norm_first)).train()  # dropout 0
    src, tgt_in = padded_batch()
    keep = tgt_in != PAD  # the targets of the non-padding inputs
    tokens = TokenIndex.of(src, tgt_in, PAD)
    targets = torch.randint(3, 11, (int(keep.sum()),))

    def logits_and_grads(packed: bool):
        model.zero_grad()
        logits = model(src, tgt_in, tokens=tokens) if packed else model(src, tgt_in)[keep]
        torch.nn.functional.cross_entropy(logits, targets).backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    packed_logits, packed_grads = logits_and_grads(packed=True)
    assert set(pads) == {int((src != PAD).sum()), int(keep.sum())}
    pads.clear()
    padded_logits, padded_grads = logits_and_grads(packed=False)
    assert pads == []
    assert packed_logits.shape == (int(keep.sum()), 11)
    torch.testing.assert_close(packed_logits, padded_logits, rtol=1e-5, atol=1e-5)
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_a_batch_with_little_padding_is_not_packed(tiny_model, monkeypatch):
    """Below PACK_FROM padding the gathers and scatters cost more than they save: the padded layers run."""
    from model.transformer import PACK_FROM

    memories = []  # the encoder output of every pass: (N, D) packed, (B, S, D) padded
    encode = tiny_model.encode

    def recorded(*args, **kwargs):
        encoded = encode(*args, **kwargs)
        memories.append(encoded.memory)
        return encoded

    monkeypatch.setattr(tiny_model, "encode", recorded)
    src, tgt_in = padded_batch()
    full_src, full_tgt = src.clone(), tgt_in.clone()
    full_src[full_src == PAD], full_tgt[full_tgt == PAD] = 5, 6  # no padding at all
    logits = tiny_model(full_src, full_tgt, tokens=TokenIndex.of(full_src, full_tgt, PAD))
    torch.testing.assert_close(logits, tiny_model(full_src, full_tgt).flatten(0, 1))
    assert [m.dim() for m in memories] == [3, 3]
    assert ((src == PAD).sum() + (tgt_in == PAD).sum()) / (src.numel() + tgt_in.numel()) >= PACK_FROM
    tiny_model(src, tgt_in, tokens=TokenIndex.of(src, tgt_in, PAD))
    assert memories[-1].shape == (int((src != PAD).sum()), 16)


def test_packed_pass_with_heads_silenced_equals_the_padded_one(tiny_model):
    from model import HeadMask

    src, tgt_in = padded_batch()
    head_mask = HeadMask(encoder=torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]]))
    torch.testing.assert_close(
        tiny_model(src, tgt_in, tokens=TokenIndex.of(src, tgt_in, PAD), head_mask=head_mask),
        tiny_model(src, tgt_in, head_mask=head_mask)[tgt_in != PAD],
    )


def test_packed_inputs_refuse_a_cache_and_mismatched_rows():
    attention = MultiHeadAttention(8, 2)
    packing = Packing.of(torch.tensor([[True, False], [True, True]]))
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="no cache"):
        attention(x, x, x, context=AttentionContext(packing=(packing, packing)), cache=KVCache())
    with pytest.raises(ValueError, match="as many key rows"):
        attention(x, x[:2], x[:2], context=AttentionContext(packing=(packing, packing)))


def test_a_packed_encoder_output_is_not_for_cached_decoding(tiny_model):
    src, tgt_in = padded_batch()
    encoded = tiny_model.encode(src, tokens=Packing.of(src != PAD))
    assert encoded.memory.shape == (int((src != PAD).sum()), 16)
    with pytest.raises(ValueError, match="teacher-forced"):
        tiny_model.decode(tgt_in[:, :1], encoded, cache=tiny_model.new_cache())
    with pytest.raises(ValueError, match="teacher-forced"):
        tiny_model.decode(tgt_in, encoded, request=DecoderRequest(last_only=True))
    with pytest.raises(ValueError, match="needs the target's tokens too"):  # found ahead, not by a host sync
        tiny_model.decode(tgt_in, encoded)


# -- token positions found ahead: the training pass asks the device nothing ----------------------------------


def test_collated_token_positions_are_the_packings_of_the_batch():
    from data.batching import collate

    batch = collate([(0, [5, 6, 7], [4]), (1, [8], [9, 10, 11, 12])])  # src (2, 4), tgt (2, 5)
    assert batch.src_tokens.tolist() == [0, 1, 2, 3, 4, 5]  # row 0: 3 + EOS; row 1 (from 4): 1 + EOS
    assert batch.tgt_tokens.tolist() == [0, 1, 5, 6, 7, 8, 9]
    assert torch.equal(batch.src_tokens, Packing.of(batch.src != PAD).index)
    for targets in (batch.tgt_in, batch.tgt_out):  # the same positions on both sides of the shift
        assert torch.equal(batch.tgt_tokens, Packing.of(targets != PAD).index)
    found = TokenIndex.of(batch.src, batch.tgt_in, PAD)  # for batches that were not collated
    assert torch.equal(found.source, batch.src_tokens) and torch.equal(found.target, batch.tgt_tokens)
    assert found.labels(batch.tgt_out).tolist() == [4, EOS, 9, 10, 11, 12, EOS]  # the packed logits' targets


def test_a_pass_given_token_positions_equals_the_padded_pass_and_finds_none(tiny_model, monkeypatch):
    src, tgt_in = padded_batch()
    keep = tgt_in != PAD
    tokens = TokenIndex(token_index(src != PAD), token_index(keep))
    expected = tiny_model(src, tgt_in)[keep]
    found = []
    make = Packing.of
    monkeypatch.setattr(Packing, "of", lambda keep: found.append(keep) or make(keep))
    pads = []
    pad = Packing.pad
    monkeypatch.setattr(Packing, "pad", lambda self, x: pads.append(x.shape) or pad(self, x))
    torch.testing.assert_close(tiny_model(src, tgt_in, tokens=tokens), expected)
    assert found == [] and pads  # packed (padding is over PACK_FROM of this batch), on the positions given
    full_src, full_tgt = src.masked_fill(src == PAD, 5), tgt_in.masked_fill(tgt_in == PAD, 6)  # no padding
    full = TokenIndex(torch.arange(full_src.numel()), torch.arange(full_tgt.numel()))
    pads.clear()
    unpacked = tiny_model(full_src, full_tgt).flatten(0, 1)  # (B*T, V): every position is a token
    torch.testing.assert_close(tiny_model(full_src, full_tgt, tokens=full), unpacked)
    assert found == [] and pads == []  # below PACK_FROM: padded layers, logits gathered at the positions


def test_packing_is_off_on_devices_it_was_not_measured_on(tiny_model, monkeypatch):
    """``PACK_DEVICES``: on a GPU the gathers and scatters cost more kernels than the padding they save."""
    monkeypatch.setattr("model.transformer.PACK_DEVICES", ())  # as a CUDA batch sees it
    pads = []
    pad = Packing.pad
    monkeypatch.setattr(Packing, "pad", lambda self, x: pads.append(x.shape) or pad(self, x))
    src, tgt_in = padded_batch()
    keep = tgt_in != PAD
    tokens = TokenIndex(token_index(src != PAD), token_index(keep))
    torch.testing.assert_close(tiny_model(src, tgt_in, tokens=tokens), tiny_model(src, tgt_in)[keep])
    assert pads == []


def test_each_mask_is_made_safe_once_per_pass_not_once_per_layer(tiny_model, monkeypatch):
    """The rows of a mask with no key to attend are found once per pass (encoder, decoder self, cross), where
    the stacks' contexts are built, and every layer's attention reuses them (attention has no guard of its
    own to call)."""
    import model.attention
    import model.context

    assert not hasattr(model.attention, "guard_empty_rows")
    calls = []
    guard = model.context.guard_empty_rows

    def counted(mask):
        calls.append(mask.shape)
        return guard(mask)

    monkeypatch.setattr(model.context, "guard_empty_rows", counted)
    src, tgt_in = padded_batch()
    tiny_model(src, tgt_in, tokens=TokenIndex.of(src, tgt_in, PAD))
    b, s, t = *src.shape, tgt_in.size(1)
    assert calls == [(b, 1, 1, s), (b, 1, t, t), (b, 1, 1, s)]  # two layers each side
