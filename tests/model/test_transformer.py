"""The Transformer's contract: config validation, shapes, attention maps, no future leakage, padding
invariance."""

import dataclasses

import pytest
import torch

from model import HeadMask, Transformer
from tests.conftest import BOS, PAD, random_ids, tiny_config
from training.checkpoints import upgrade_state_dict


def batch(src_len=6, tgt_len=5, b=3):
    torch.manual_seed(1)
    src = random_ids(b, src_len, 13)
    tgt_in = random_ids(b, tgt_len, 11)
    tgt_in[:, 0] = BOS
    return src, tgt_in


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 30, "num_heads": 4}, r"d_model \(30\).*num_heads \(4\)"),
        ({"num_encoder_layers": 0}, "num_encoder_layers must be at least 1, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"eos_id": 0}, "must differ"),
        ({"share_embeddings": True}, "src_vocab_size=13 and tgt_vocab_size=11"),
        ({"pad_id": 20}, r"pad_id \(20\)"),
    ],
)
def test_config_errors_name_the_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 10**9},
         ("d_model must be at most 65536, got 1000000000: one d_model × d_model weight matrix alone would "
          "take 3.5 EiB")),
        ({"d_ff": 10**9},
         ("d_ff must be at most 262144, got 1000000000: one d_model × d_ff weight matrix alone would take "
          "59.6 GiB")),
        ({"max_len": 10**8},
         ("max_len must be at most 65536, got 100000000: one head's attention map over that many positions "
          "would take 35.5 PiB")),
        ({"num_decoder_layers": 10**6},
         ("num_decoder_layers must be at most 1024, got 1000000: their attention projections alone (4 "
          "d_model × d_model matrices a layer) would take 3.8 GiB")),
    ],
)
def test_huge_sizes_are_refused_naming_the_limit_and_the_memory_they_would_take(overrides, message):
    """Each of these used to allocate until the machine ran out of memory, then stop in a traceback."""
    with pytest.raises(ValueError) as refused:
        tiny_config(**overrides)
    assert str(refused.value) == message


def test_the_largest_sizes_allowed_are_accepted():
    largest = {"d_model": 65536, "d_ff": 262144, "max_len": 65536, "num_encoder_layers": 1024,
               "num_decoder_layers": 1024}
    config = tiny_config(**largest)  # a config only: nothing is allocated
    assert {name: getattr(config, name) for name in largest} == largest


def test_a_built_models_config_cannot_drift_from_its_weights():
    """The model reads its config at every call (the embedding scale sqrt(d_model), the pad id of its masks):
    a config changes only into a new object, checked again, and the built model computes what it did."""
    model = Transformer(tiny_config()).eval()
    src, tgt_in = batch()
    src[0, 4:] = PAD
    with torch.no_grad():
        before = model(src, tgt_in)
        with pytest.raises(dataclasses.FrozenInstanceError):
            model.config.d_model = 64  # would scale the embeddings by 8 instead of 4
        with pytest.raises(dataclasses.FrozenInstanceError):
            model.config.pad_id = 5  # would mask real tokens and attend to padding
        with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(4\)"):
            dataclasses.replace(model.config, d_model=30)
        assert model.config == tiny_config()
        torch.testing.assert_close(model(src, tgt_in), before, rtol=0, atol=0)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("tie", [True, False])
def test_shapes_and_attention_maps(norm_first, tie):
    model = Transformer(tiny_config(norm_first=norm_first, tie_output_embedding=tie)).eval()
    src, tgt_in = batch()
    src[0, 4:] = PAD
    logits, maps = model(src, tgt_in, return_attention=True)
    assert logits.shape == (3, 5, 11)
    assert [m.shape for m in maps.encoder] == [(3, 4, 6, 6)] * 2
    assert [m.shape for m in maps.decoder] == [(3, 4, 5, 5)] * 2
    assert [m.shape for m in maps.cross] == [(3, 4, 5, 6)] * 2
    for weights in (*maps.encoder, *maps.decoder, *maps.cross):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    for weights in maps.decoder:
        assert torch.all(weights.triu(diagonal=1) == 0)
    for weights in (*maps.encoder, *maps.cross):
        assert torch.all(weights[0, ..., 4:] == 0)
    torch.testing.assert_close(model(src, tgt_in), logits)


def test_shared_embeddings_are_one_table():
    model = Transformer(tiny_config(src_vocab_size=11, share_embeddings=True))
    assert model.src_embed is model.tgt_embed
    assert model.output_proj is None


def test_no_future_leakage(tiny_model):
    src, tgt_in = batch(tgt_len=8)
    logits = tiny_model(src, tgt_in)
    for t in range(1, 8):
        changed = tgt_in.clone()
        changed[:, t:] = random_ids(3, 8 - t, 11, generator=torch.Generator().manual_seed(t))
        torch.testing.assert_close(tiny_model(src, changed)[:, :t], logits[:, :t])


def test_appending_source_padding_changes_nothing(tiny_model):
    src, tgt_in = batch()
    logits = tiny_model(src, tgt_in)
    padded = torch.cat([src, torch.full((3, 5), PAD)], dim=1)
    torch.testing.assert_close(tiny_model(padded, tgt_in), logits, atol=1e-5, rtol=1e-5)


def test_appending_target_padding_leaves_real_positions_unchanged(tiny_model):
    src, tgt_in = batch()
    logits = tiny_model(src, tgt_in)
    padded = torch.cat([tgt_in, torch.full((3, 4), PAD)], dim=1)
    torch.testing.assert_close(tiny_model(src, padded)[:, :5], logits, atol=1e-5, rtol=1e-5)


def test_sentence_alone_equals_sentence_in_padded_batch(tiny_model):
    src, tgt_in = batch()
    src[1, 3:] = PAD
    logits = tiny_model(src, tgt_in)
    alone = tiny_model(src[1:2, :3], tgt_in[1:2])
    torch.testing.assert_close(alone[0], logits[1], atol=1e-5, rtol=1e-5)


def test_too_long_input_names_max_len():
    model = Transformer(tiny_config(max_len=8))
    with pytest.raises(ValueError, match=r"longer than max_len \(8\)"):
        model(random_ids(1, 9, 13), random_ids(1, 3, 11))


def test_bf16_autocast_training_step_is_finite():
    torch.manual_seed(0)
    model = Transformer(tiny_config(dropout=0.1)).train()
    src, tgt_in = batch()
    src[2, :] = PAD  # a sentence that is all padding: every cross-attention row is fully masked
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_in.flatten())
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_head_mask_of_ones_changes_nothing_and_zeros_change_output(tiny_model):
    src, tgt_in = batch()
    ones = torch.ones(2, 4)
    logits = tiny_model(src, tgt_in)
    torch.testing.assert_close(tiny_model(src, tgt_in, head_mask=HeadMask(ones, ones, ones)), logits)
    silenced = ones.clone()
    silenced[1, 2] = 0
    for kind in ("encoder", "decoder", "cross"):
        ablated = tiny_model(src, tgt_in, head_mask=HeadMask(**{kind: silenced}))
        assert not torch.allclose(ablated, logits)


def test_per_sentence_head_masks_match_separate_runs(tiny_model):
    src, tgt_in = batch(b=2)
    masks = torch.ones(2, 2, 4)
    masks[1, 0, 3] = 0  # the second sentence loses layer 1, head 4 of cross-attention
    logits = tiny_model(src, tgt_in, head_mask=HeadMask(cross=masks))
    torch.testing.assert_close(logits[0], tiny_model(src, tgt_in)[0])
    torch.testing.assert_close(logits[1], tiny_model(src, tgt_in, head_mask=HeadMask(cross=masks[1]))[1])


def test_logits_at_the_target_tokens_equal_the_full_logits_there(tiny_model):
    from model.packing import TokenIndex

    src, tgt_in = batch()
    tgt_in[0, 3:], tgt_in[2, 2:] = PAD, PAD  # 3, 5 and 2 target tokens
    packed = tiny_model(src, tgt_in, tokens=TokenIndex.of(src, tgt_in, PAD))
    assert packed.shape == (10, 11)
    torch.testing.assert_close(packed, tiny_model(src, tgt_in)[tgt_in != PAD])


def test_dropout_keeps_about_1_minus_p_and_rescales():
    from model.dropout import Dropout

    dropout = Dropout(0.25).train()
    x = torch.ones(200, 500)
    y = dropout(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.75))
    assert torch.equal(dropout.eval()(x), x)


def test_dropout_mask_bits_are_all_random_and_seeded():
    """Each of the four 16-bit integers cut from a 64-bit draw keeps a position with probability 1 - p (the
    top one too: a draw without the sign bit would keep every fourth position), and the default generator's
    seed fixes the mask."""
    from model.dropout import Dropout

    dropout = Dropout(0.25).train()
    torch.manual_seed(0)
    kept = torch.stack([dropout(torch.ones(4096)) != 0 for _ in range(50)])  # (50, 4096)
    per_lane = kept.view(50, -1, 4).float().mean(dim=(0, 1))  # positions 4i, 4i+1, 4i+2, 4i+3
    torch.testing.assert_close(per_lane, torch.full((4,), 0.75), atol=0.01, rtol=0)
    torch.manual_seed(7)
    first = dropout(torch.ones(3, 5, 7))
    torch.manual_seed(7)
    assert torch.equal(dropout(torch.ones(3, 5, 7)), first)
    assert torch.equal(Dropout(1.0).train()(torch.ones(6)), torch.zeros(6))
    with pytest.raises(ValueError, match="1.5"):
        Dropout(1.5)


def test_generated_ids_drop_eos_and_padding(tiny_model):
    eos = tiny_model.config.eos_id
    tokens = torch.tensor([[5, 6, eos, PAD], [7, eos, PAD, PAD], [8, 9, 10, 11]])
    assert tiny_model.generated_ids(tokens) == [[5, 6], [7], [8, 9, 10, 11]]
    assert tiny_model.device == torch.device("cpu")


def test_sinusoidal_encoding_literal():
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)); here D = 4."""
    from model.positions import SinusoidalPositionalEncoding

    encoding = SinusoidalPositionalEncoding(4, max_len=3)
    angles = torch.tensor([[0.0, 0.0], [1.0, 0.01], [2.0, 0.02]])  # pos / 10000^(2i/4) for i = 0, 1
    expected = torch.stack(
        [angles[:, 0].sin(), angles[:, 0].cos(), angles[:, 1].sin(), angles[:, 1].cos()], 1
    )
    torch.testing.assert_close(encoding(torch.zeros(1, 3, 4))[0], expected)
    torch.testing.assert_close(encoding(torch.zeros(1, 1, 4), offset=2)[0], expected[2:])


class Scale(torch.nn.Module):
    """A stand-in sublayer: its first input times ``factor``; as attention, with no weights."""

    def __init__(self, factor: float, attention: bool) -> None:
        super().__init__()
        self.factor, self.attention = factor, attention

    def forward(self, h, *args, **kwargs):
        return (self.factor * h, None) if self.attention else self.factor * h


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_sublayer_arrangement_and_residual_dropout(side, norm_first):
    """Pre-LN: x + dropout(f(norm(x))); post-LN (§3.1): norm(x + dropout(f(x))), for each sublayer in turn.

    Dropout is on the branch only.
    """
    from model.context import AttentionContext, StackContext
    from model.layers import DecoderLayer, EncoderLayer

    torch.manual_seed(0)
    config = tiny_config(d_model=8, num_heads=2, dropout=0.5, norm_first=norm_first)
    layer = (EncoderLayer if side == "encoder" else DecoderLayer)(config).eval()
    attention = ["self_attn", "cross_attn"] if side == "decoder" else ["self_attn"]
    for name in attention:
        setattr(layer, name, Scale(2.0, attention=True))
    layer.feed_forward = Scale(2.0, attention=False)
    x = torch.randn(2, 3, 8) * 3 + 1

    def run(layer):
        if side == "encoder":
            return layer(x, StackContext(AttentionContext.of(torch.ones(2, 1, 1, 3, dtype=torch.bool))))[0]
        memory, src_attend = torch.randn(2, 4, 8), torch.ones(2, 1, 1, 4, dtype=torch.bool)
        return layer(x, memory, StackContext(AttentionContext(), AttentionContext.of(src_attend)))[0]

    def norm(h):
        return torch.nn.functional.layer_norm(h, (8,))

    expected = x
    for _ in range(len(attention) + 1):  # the attention sublayers, then the feed-forward one
        expected = expected + 2 * norm(expected) if norm_first else norm(3 * expected)
    torch.testing.assert_close(run(layer), expected)

    if norm_first:  # in training, each element of the branch is dropped (0) or kept and doubled
        for name in attention[1:]:
            setattr(layer, name, Scale(0.0, attention=True))
        layer.feed_forward = Scale(0.0, attention=False)  # only the first branch is left
        branch = run(layer.train()) - x
        kept = 2 * 2 * norm(x)
        dropped = branch.abs() < 1e-6
        assert 0 < dropped.sum() < dropped.numel()
        torch.testing.assert_close(branch[~dropped], kept[~dropped])


# Checkpoints written before the sublayers were spelled out in the layers' forward name the norms so.
OLD_NORM_NAMES = {  # old name → today's, per layer
    "encoder_layers.{i}.attn_block.norm": "encoder_layers.{i}.self_attn_norm",
    "encoder_layers.{i}.ff_block.norm": "encoder_layers.{i}.feed_forward_norm",
    "decoder_layers.{i}.self_block.norm": "decoder_layers.{i}.self_attn_norm",
    "decoder_layers.{i}.cross_block.norm": "decoder_layers.{i}.cross_attn_norm",
    "decoder_layers.{i}.ff_block.norm": "decoder_layers.{i}.feed_forward_norm",
}


@pytest.mark.parametrize("norm_first", [True, False])
def test_checkpoints_with_the_old_norm_names_load_and_give_the_same_outputs(norm_first):
    """A training checkpoint (the model under ``model.``, as in TranslationModule) with the old names, brought
    to today's names as checkpoints are loaded, loads strictly into today's model and computes the same
    logits."""
    config = tiny_config(norm_first=norm_first, dropout=0.1)
    torch.manual_seed(0)
    trained = torch.nn.ModuleDict({"model": Transformer(config)})
    with torch.no_grad():  # norms unlike a fresh model's, so that a norm left unloaded shows
        for name, p in trained.named_parameters():
            if "norm" in name:
                p.normal_()
    old_state = {}
    for key, value in trained.state_dict().items():
        for i in range(2):
            for old, today in OLD_NORM_NAMES.items():
                today = f"model.{today.format(i=i)}."
                if key.startswith(today):
                    key = f"model.{old.format(i=i)}.{key[len(today):]}"
        old_state[key] = value
    for i in range(2):
        for old, today in OLD_NORM_NAMES.items():
            assert {f"model.{old.format(i=i)}.weight", f"model.{old.format(i=i)}.bias"} <= set(old_state)
            assert not any(today.format(i=i) + "." in key for key in old_state)

    torch.manual_seed(1)
    loaded = torch.nn.ModuleDict({"model": Transformer(config)})
    loaded.load_state_dict(upgrade_state_dict(old_state))  # strict: no key missing, none unexpected
    src, tgt_in = batch()
    expected = trained.model.eval()(src, tgt_in)
    torch.testing.assert_close(loaded.model.eval()(src, tgt_in), expected, rtol=0, atol=0)


def test_pre_ln_stacks_end_normalised(tiny_model):
    """Pre-LN leaves the residual stream unnormalised, so each stack ends with a LayerNorm (gain 1, bias 0
    here)."""
    src, _ = batch()
    memory = tiny_model.encode(src).memory
    torch.testing.assert_close(memory.mean(-1), torch.zeros(memory.shape[:2]), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        memory.var(-1, unbiased=False), torch.ones(memory.shape[:2]), atol=1e-3, rtol=0
    )


def test_padding_embeddings_start_at_zero_and_source_padding_is_never_trained(tiny_model):
    for embedding in (tiny_model.src_embed, tiny_model.tgt_embed):
        assert torch.all(embedding.weight[PAD] == 0) and embedding.weight[BOS].abs().sum() > 0
    src, tgt_in = batch()
    src[:, -2:] = PAD
    tiny_model.train()
    tiny_model(src, tgt_in).sum().backward()
    # The tied target table is also the output projection, whose padding row the softmax does train.
    assert torch.all(tiny_model.src_embed.weight.grad[PAD] == 0)


def test_each_stack_builds_one_context_per_call_and_every_layer_gets_it(tiny_model):
    """The per-call inputs a stack shares travel as one ``StackContext``, built once by ``encode`` and once
    by ``decode`` (a cached step included) and handed as the same object to every layer; the encoder's has
    no cross-attention, the decoder's cross-attention has no position hooks, and a cached step's
    self-attention attends every position so far."""
    import inspect

    from model.attention import MultiHeadAttention
    from model.context import StackContext

    seen = {"encoder": [], "decoder": []}
    for side, layers in (("encoder", tiny_model.encoder_layers), ("decoder", tiny_model.decoder_layers)):
        position = 1 if side == "encoder" else 2  # (x, context) / (x, memory, context)
        for layer in layers:
            layer.register_forward_pre_hook(lambda _, args, _s=side, _p=position: seen[_s].append(args[_p]))
    src, tgt_in = batch()
    tiny_model(src, tgt_in)
    encoder, decoder = seen["encoder"], seen["decoder"]
    assert len(encoder) == len(decoder) == 2 and isinstance(encoder[0], StackContext)
    assert encoder[0] is encoder[1] and decoder[0] is decoder[1]
    assert encoder[0].cross_attention is None
    cross = decoder[0].cross_attention
    assert cross.rotate is None and cross.score_bias is None
    assert torch.equal(cross.mask.attend, (src != PAD)[:, None, None, :])

    seen["decoder"].clear()
    cache = tiny_model.new_cache()
    encoded = tiny_model.encode(src)
    for t in range(2):
        tiny_model.decode(tgt_in[:, t : t + 1], encoded, cache=cache)
    first, second = seen["decoder"][::2]  # one context per step, the same for both layers
    assert seen["decoder"][1] is first and seen["decoder"][3] is second and first is not second
    assert first.self_attention.mask is None

    # One carrier instead of a parameter per feature: at most 7 parameters besides self.
    assert len(inspect.signature(MultiHeadAttention.forward).parameters) - 1 <= 7


# -- the fields an imported Marian model needs (export/marian.py) -------------------------------------------


def test_the_marian_fields_default_to_todays_model_and_its_weights():
    """Checkpoints saved before the fields existed load unchanged: no new weight, the same numbers."""
    config = tiny_config()
    assert (config.scale_embedding, config.logits_bias) == (True, False)
    assert "output_bias" not in Transformer(config).state_dict()


def test_a_logits_bias_is_added_to_every_logit(src):
    torch.manual_seed(0)
    plain = Transformer(tiny_config()).eval()
    biased = Transformer(tiny_config(logits_bias=True)).eval()
    biased.load_state_dict({**plain.state_dict(), "output_bias": torch.arange(11.0)})
    tgt_in = torch.tensor([[BOS, 4, 5]] * src.size(0))
    with torch.no_grad():
        torch.testing.assert_close(biased(src, tgt_in), plain(src, tgt_in) + torch.arange(11.0))


def test_unscaled_embeddings_are_scaled_ones_times_sqrt_d(src):
    """scale_embedding=False reads the embedding rows as they are: the model equals a scaled one whose rows
    are sqrt(D) times smaller (untied, so that the output projection stays the same)."""
    torch.manual_seed(0)
    scaled = Transformer(tiny_config(tie_output_embedding=False)).eval()
    unscaled = Transformer(tiny_config(tie_output_embedding=False, scale_embedding=False)).eval()
    state = scaled.state_dict()
    for name in ("src_embed.weight", "tgt_embed.weight"):
        state[name] = state[name] * 16**0.5
    unscaled.load_state_dict(state)
    tgt_in = torch.tensor([[BOS, 4, 5]] * src.size(0))
    with torch.no_grad():
        torch.testing.assert_close(unscaled(src, tgt_in), scaled(src, tgt_in))


def test_silu_is_swish():
    from model.layers import FeedForward

    x = torch.randn(3, 8)
    ff = FeedForward(8, 16, 0.0, "silu")
    torch.testing.assert_close(ff(x), ff.down(ff.up(x) * torch.sigmoid(ff.up(x))))
