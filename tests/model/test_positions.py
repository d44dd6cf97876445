"""Position variants (model.positions): each keeps the model's contract; each signal is the published one."""

import math

import pytest
import torch

from model import Transformer
from model.decoding import beam_search, greedy_search
from model.positions import (
    POSITIONAL,
    ALiBi,
    RelativePositionBias,
    Rotary,
    alibi_slopes,
    relative_position_bucket,
)
from tests.conftest import BOS, EOS, PAD, random_ids, tiny_config
from tests.helpers.reference_decoding import plain_beam_search, rows_of, teacher_forced_greedy
from tests.helpers.weight_surgery import suppress_eos


def make_model(positional: str, seed: int = 2) -> Transformer:
    """A tiny model with non-trivial position signals and sharp next-token distributions."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(positional=positional, tie_output_embedding=False)).eval()
    with torch.no_grad():
        model.output_proj.weight.normal_(0.0, 1.0)
        if positional == "relative":  # the tables start at zero (position-blind): give them something to say
            for bias in model.positions.bias.values():
                bias.table.weight.normal_(0.0, 1.0)
    return model


@pytest.fixture(params=POSITIONAL)
def model(request):
    return make_model(request.param)


def target(b: int = 4, length: int = 6, seed: int = 4):
    tgt_in = random_ids(b, length, 11, generator=torch.Generator().manual_seed(seed))
    tgt_in[:, 0] = BOS
    return tgt_in


# -- configuration -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"positional": "sine"}, r"one of sinusoidal, learned, rope, alibi, relative, none; got 'sine'"),
        ({"d_model": 12, "num_heads": 4, "positional": "rope"}, r"even head dimension.*12 / num_heads 4 = 3"),
    ],
)
def test_config_names_the_bad_setting(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_odd_d_model_is_a_config_error_not_a_shape_error():
    with pytest.raises(ValueError, match=r"needs an even d_model \(sine and cosine pairs\), got 9"):
        tiny_config(d_model=9, num_heads=1)
    for positional in ("learned", "alibi", "relative", "none"):  # the others have no such constraint
        model = Transformer(tiny_config(d_model=9, num_heads=1, positional=positional)).eval()
        assert model(random_ids(2, 4, 13), target(2, 3)).shape == (2, 3, 11)


def test_default_is_sinusoidal_and_parameters_are_per_variant():
    assert tiny_config().positional == "sinusoidal"
    names = {p: {n for n, _ in Transformer(tiny_config(positional=p)).named_parameters()} for p in POSITIONAL}
    baseline = names["none"]
    assert names["sinusoidal"] == names["rope"] == names["alibi"] == baseline  # nothing trained for positions
    assert names["learned"] - baseline == {
        "positions.learned.encoder.table.weight", "positions.learned.decoder.table.weight"
    }
    # T5: one table per stack, shared by its layers.
    assert names["relative"] - baseline == {
        "positions.bias.encoder.table.weight", "positions.bias.decoder.table.weight"
    }


# -- the model's contract, per variant -----------------------------------------------------------------------


def test_shapes_and_attention_maps(model, src):
    tgt_in = target()
    logits, maps = model(src, tgt_in, return_attention=True)
    assert logits.shape == (4, 6, 11)
    assert [m.shape for m in maps.encoder] == [(4, 4, 7, 7)] * 2
    assert [m.shape for m in maps.decoder] == [(4, 4, 6, 6)] * 2
    assert [m.shape for m in maps.cross] == [(4, 4, 6, 7)] * 2
    for weights in (*maps.encoder, *maps.decoder, *maps.cross):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    for weights in maps.decoder:
        assert torch.all(weights.triu(diagonal=1) == 0)
    for weights in (*maps.encoder, *maps.cross):
        assert torch.all(weights[1, ..., 4:] == 0) and torch.all(weights[3, ..., 2:] == 0)


def test_fused_path_equals_weight_returning_path(model, src):
    tgt_in = target()
    tgt_in[2, 4:] = PAD
    src = src.clone()
    src[0] = PAD  # a sentence with no source token: every encoder and cross-attention row is empty
    fused = model(src, tgt_in)
    explicit, maps = model(src, tgt_in, return_attention=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    for weights in (*maps.encoder, *maps.cross):
        assert torch.all(weights[0] == 0)  # empty rows get zero weights, never NaN


def test_bf16_autocast_training_step_is_finite(model, src):
    """Biases and rotations under bf16 autocast, with a sentence whose every source key is padding."""
    model.train()
    src = src.clone()
    src[0] = PAD
    tgt_in = target()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_in.flatten())
    assert torch.isfinite(logits).all()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("ending", ["free", "suppressed"])
def test_cached_greedy_equals_uncached_and_teacher_forced(model, src, ending):
    if ending == "suppressed":
        suppress_eos(model)  # every sentence runs all 12 positions
    cached = greedy_search(model, src, 12)
    assert ending == "free" or (cached.size(1) == 12 and not (cached == EOS).any())
    assert torch.equal(cached, greedy_search(model, src, 12, use_cache=False))
    assert rows_of(cached) == teacher_forced_greedy(model, src, 12)


def test_beam_of_one_equals_greedy(model, src):
    assert torch.equal(model.generate(src, max_len=12, beam_size=1), beam_search(model, src, 12, beam_size=1))
    assert torch.equal(beam_search(model, src, 12, beam_size=1), greedy_search(model, src, 12))


def test_beam_search_with_its_reordered_cache_equals_a_plain_one_without_cache(model, src):
    """The cache reorder keeps every position state consistent: beams that swap rows decode as re-runs do."""
    found = rows_of(beam_search(model, src[:2], 8, beam_size=3, length_penalty=1.0))
    assert found == [plain_beam_search(model, s[s != PAD], 8, 3, 1.0) for s in src[:2]]


def test_no_future_leakage(model, src):
    tgt_in = target(length=8)
    logits = model(src, tgt_in)
    for t in range(1, 8):
        changed = tgt_in.clone()
        changed[:, t:] = random_ids(4, 8 - t, 11, generator=torch.Generator().manual_seed(t))
        torch.testing.assert_close(model(src, changed)[:, :t], logits[:, :t])


def test_padding_changes_nothing(model, src):
    tgt_in = target()
    logits = model(src, tgt_in)
    padded_src = torch.cat([src, torch.full((4, 5), PAD)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt_in), logits, atol=1e-5, rtol=1e-5)
    padded_tgt = torch.cat([tgt_in, torch.full((4, 3), PAD)], dim=1)
    torch.testing.assert_close(model(src, padded_tgt)[:, :6], logits, atol=1e-5, rtol=1e-5)
    alone = model(src[1:2, :4], tgt_in[1:2])  # the padded sentence without its padding
    torch.testing.assert_close(alone[0], logits[1], atol=1e-5, rtol=1e-5)


def test_the_position_signal_is_used_where_documented():
    """Permuting the source: a bag-of-words encoder (``none``) gives permuted memory, the others do not."""
    src = random_ids(1, 6, 13, generator=torch.Generator().manual_seed(5))
    permutation = torch.tensor([3, 1, 5, 0, 2, 4])
    for positional in POSITIONAL:
        model = make_model(positional)
        memory = model.encode(src).memory
        shuffled = model.encode(src[:, permutation]).memory
        same = torch.allclose(shuffled, memory[:, permutation], atol=1e-5)
        assert same == (positional == "none"), positional


# -- the signals themselves ----------------------------------------------------------------------------------


def test_rope_scores_depend_on_relative_positions_only():
    """Su et al. 2021 eq. 16: <R(m) q, R(n) k> = <q, R(n - m) k>: shifting all positions changes no score."""
    torch.manual_seed(0)
    rotary = Rotary(8)
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    positions = torch.tensor([0, 1, 2, 4, 7])

    def weights(shift):
        scores = rotary(q, positions + shift) @ rotary(k, positions + shift).transpose(-2, -1)
        return scores.softmax(-1)

    for shift in (1, 13, 100):
        torch.testing.assert_close(weights(shift), weights(0), atol=1e-5, rtol=1e-4)
    plain = (q @ k.transpose(-2, -1)).softmax(-1)
    assert not torch.allclose(weights(0), plain, atol=1e-3)  # the rotation does change the scores


def test_rope_rotates_feature_pairs_by_position_times_frequency():
    rotary = Rotary(4)  # theta = 1 and 10000^(-1/2) = 0.01
    x = torch.tensor([1.0, 0.0, 0.0, 2.0]).view(1, 1, 1, 4).expand(1, 1, 2, 4)
    out = rotary(x, torch.tensor([0, 3]))
    torch.testing.assert_close(out[0, 0, 0], x[0, 0, 0])  # position 0: identity
    c1, s1, c2, s2 = math.cos(3.0), math.sin(3.0), math.cos(0.03), math.sin(0.03)
    torch.testing.assert_close(out[0, 0, 1], torch.tensor([c1, s1, -2 * s2, 2 * c2]))


def test_alibi_slopes_are_the_papers():
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]))
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))
    # Not a power of two: the 4-head slopes, then every other of the 8-head ones.
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]))


def test_alibi_bias_literal():
    positions = torch.arange(3)
    symmetric = ALiBi(4, causal=False)(positions, positions)
    causal = ALiBi(4, causal=True)(positions, positions)
    assert symmetric.shape == causal.shape == (1, 4, 3, 3)
    torch.testing.assert_close(symmetric[0, 0], -0.25 * torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]))
    torch.testing.assert_close(causal[0, 0], -0.25 * torch.tensor([[0.0, 0, 0], [1, 0, 0], [2, 1, 0]]))
    torch.testing.assert_close(causal[0, 3], -(2**-8) * torch.tensor([[0.0, 0, 0], [1, 0, 0], [2, 1, 0]]))
    # A cached decoding step: query at position 3, keys 0..3.
    step = ALiBi(4, causal=True)(torch.tensor([3]), torch.arange(4))
    torch.testing.assert_close(step[0, 1], -(2**-4) * torch.tensor([[3.0, 2, 1, 0]]))


def t5_bucket(relative: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """T5's ``_relative_position_bucket`` for one relative position (key minus query), in plain Python."""
    bucket = 0
    n = relative
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if n > 0 else 0
        n = abs(n)
    else:
        n = max(-n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    log_ratio = math.log(n / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + int(log_ratio * (num_buckets - max_exact))
    return bucket + min(large, num_buckets - 1)


def test_relative_buckets_literal():
    relative = torch.tensor([-200, -20, -8, -7, -3, -1, 0, 1, 3, 8, 20, 200])
    bidirectional = relative_position_bucket(relative, bidirectional=True)
    unidirectional = relative_position_bucket(relative, bidirectional=False)
    assert bidirectional.tolist() == [15, 10, 8, 7, 3, 1, 0, 17, 19, 24, 26, 31]
    assert unidirectional.tolist() == [31, 17, 8, 7, 3, 1, 0, 0, 0, 0, 0, 0]
    wide = torch.arange(-300, 301)
    for flag in (True, False):
        got = relative_position_bucket(wide, bidirectional=flag)
        assert got.tolist() == [t5_bucket(r, flag) for r in wide.tolist()]


def test_relative_bias_looks_up_each_heads_bucket():
    bias = RelativePositionBias(2, bidirectional=False)
    with torch.no_grad():
        bias.table.weight.copy_(torch.arange(64.0).view(32, 2))  # bucket b, head h → 2b + h
    out = bias(torch.tensor([2]), torch.arange(3))  # query at 2, keys 0..2: distances 2, 1, 0
    torch.testing.assert_close(out, torch.tensor([[[[4.0, 2.0, 0.0]], [[5.0, 3.0, 1.0]]]]))


# -- it learns -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("positional", POSITIONAL)
def test_tiny_model_overfits_a_few_pairs(positional):
    """Reversal needs positions; ``none`` gets the decoder's order from its mask and distinct source words."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional=positional, d_model=32, num_heads=4, d_ff=64)).train()
    src = torch.stack([torch.randperm(10)[:5] + 3 for _ in range(4)])  # distinct words per sentence
    tgt = src.flip(1).clamp(max=10)
    tgt_in = torch.cat([torch.full((4, 1), BOS), tgt], dim=1)
    tgt_out = torch.cat([tgt, torch.full((4, 1), EOS)], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert rows_of(model.generate(src, max_len=8)) == tgt_out.tolist()
