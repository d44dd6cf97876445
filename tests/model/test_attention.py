"""MultiHeadAttention: shapes, both paths equal, masking, numerical safety and the key/value cache."""

from functools import partial

import pytest
import torch

from model.attention import MultiHeadAttention
from model.cache import KVCache
from model.context import NO_CONTEXT, AttentionContext
from model.masks import causal_mask

B, TQ, TK, D, H = 2, 5, 7, 16, 4


@pytest.fixture
def attn():
    torch.manual_seed(0)
    return MultiHeadAttention(D, H).eval()


def key_padding(lengths, total):
    """(B, 1, 1, Tk) True for the first ``length`` keys of each row."""
    return (torch.arange(total)[None] < torch.tensor(lengths)[:, None])[:, None, None, :]


def test_shapes_self_and_cross(attn):
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    out, weights = attn(x, x, x, need_weights=True)
    assert out.shape == (B, TQ, D) and weights.shape == (B, H, TQ, TQ)
    out, weights = attn(x, memory, memory, need_weights=True)
    assert out.shape == (B, TQ, D) and weights.shape == (B, H, TQ, TK)
    out, weights = attn(x, memory, memory)
    assert out.shape == (B, TQ, D) and weights is None


def test_indivisible_heads_name_both_values():
    with pytest.raises(ValueError, match=r"d_model \(10\).*num_heads \(4\)"):
        MultiHeadAttention(10, 4)


def test_rows_sum_to_one_and_padded_keys_get_zero(attn):
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    mask = key_padding([7, 4], TK)
    _, weights = attn(x, memory, memory, context=AttentionContext.of(mask), need_weights=True)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, TQ))
    assert torch.all(weights[1, :, :, 4:] == 0)


def test_causal_upper_triangle_is_exactly_zero(attn):
    x = torch.randn(B, TQ, D)
    _, weights = attn(x, x, x, context=AttentionContext.of(causal_mask(TQ)), need_weights=True)
    upper = torch.ones(TQ, TQ, dtype=torch.bool).triu(diagonal=1)
    assert torch.all(weights[..., upper] == 0)
    assert torch.all(weights[..., ~upper] > 0)


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "both"])
def test_fused_path_equals_explicit_path(attn, mask_kind):
    x = torch.randn(B, TQ, D)
    masks = {
        "none": None,
        "padding": key_padding([5, 3], TQ),
        "causal": causal_mask(TQ),
        "both": key_padding([5, 3], TQ) & causal_mask(TQ),
    }
    fused, _ = attn(x, x, x, context=AttentionContext.of(masks[mask_kind]))
    explicit, _ = attn(x, x, x, context=AttentionContext.of(masks[mask_kind]), need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)


def test_equals_torch_multihead_attention_with_same_weights(attn):
    reference = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(attn.in_proj.weight)
        reference.in_proj_bias.copy_(attn.in_proj.bias)
        reference.out_proj.weight.copy_(attn.out_proj.weight)
        reference.out_proj.bias.copy_(attn.out_proj.bias)
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    mask = key_padding([7, 4], TK)
    # torch's key_padding_mask uses the opposite polarity: True = ignore.
    expected, expected_weights = reference(
        x, memory, memory, key_padding_mask=~mask[:, 0, 0], need_weights=True, average_attn_weights=False
    )
    for need_weights in (False, True):
        out, weights = attn(x, memory, memory, context=AttentionContext.of(mask), need_weights=need_weights)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_are_finite_and_zero(attn, need_weights):
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    mask = key_padding([7, 0], TK)  # the second sentence has no key at all
    out, weights = attn(x, memory, memory, context=AttentionContext.of(mask), need_weights=need_weights)
    assert torch.isfinite(out).all()
    # Zero heads, so the output is the output projection's bias alone.
    torch.testing.assert_close(out[1], attn.out_proj.bias.expand(TQ, D))
    if need_weights:
        assert torch.isfinite(weights).all() and torch.all(weights[1] == 0)


def test_rows_without_keys_stay_finite_with_a_kernel_that_gives_nan(attn, monkeypatch):
    """Some attention kernels return NaN for a query with no key to attend; the module must not pass it on."""

    def textbook_attention(q, k, v, attn_mask=None, dropout_p=0.0):
        scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
        return scores.masked_fill(~attn_mask, float("-inf")).softmax(-1) @ v  # 0/0 = NaN on empty rows

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", textbook_attention)
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    context = AttentionContext.of(key_padding([7, 0], TK))
    out, _ = attn(x, memory, memory, context=context)
    torch.testing.assert_close(out[1], attn.out_proj.bias.expand(TQ, D))
    torch.testing.assert_close(out[0], attn(x, memory, memory, context=context, need_weights=True)[0][0])


@pytest.mark.parametrize("need_weights", [False, True])
def test_attention_dropout_is_unbiased_and_only_in_training(need_weights):
    """Dropout on the attention weights: outputs vary in training, average to the eval output, and the
    returned weights are the undropped ones (rows still sum to 1)."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(1, TQ, D).expand(20000, TQ, D)  # one sentence, 20000 independent dropout draws
    expected, _ = attn.eval()(x[:1], x[:1], x[:1])
    out, weights = attn.train()(x, x, x, need_weights=need_weights)
    assert (out - expected).abs().amax() > 0.1
    torch.testing.assert_close(out.mean(0, keepdim=True), expected, atol=0.02, rtol=0)
    if need_weights:
        torch.testing.assert_close(weights.sum(-1), torch.ones(20000, H, TQ))


@pytest.mark.parametrize("need_weights", [False, True])
def test_bf16_autocast_forward_and_backward_are_finite(need_weights):
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H)
    x = torch.randn(B, TQ, D, requires_grad=True)
    mask = key_padding([5, 0], TQ) & causal_mask(TQ)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = attn(x, x, x, context=AttentionContext.of(mask), need_weights=need_weights)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    if need_weights:
        assert torch.isfinite(weights).all()
        torch.testing.assert_close(weights[0].float().sum(-1), torch.ones(H, TQ), atol=1e-2, rtol=0)
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def test_head_mask_equals_zeroing_that_heads_slice_before_output_projection(attn):
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    out, _ = attn(x, memory, memory, head_mask=head_mask)

    # The same by hand: run without projection, zero head 1's slice of the concatenated heads, project.
    captured = {}
    hook = attn.out_proj.register_forward_hook(lambda mod, inp, outp: captured.setdefault("heads", inp[0]))
    attn(x, memory, memory)
    hook.remove()
    heads = captured["heads"].clone()  # (B, TQ, D), head h at columns h*Dh:(h+1)*Dh
    heads[..., D // H : 2 * D // H] = 0
    torch.testing.assert_close(out, attn.out_proj(heads))


def test_per_sentence_head_mask(attn):
    x = torch.randn(B, TQ, D)
    masks = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
    out, _ = attn(x, x, x, head_mask=masks)
    full, _ = attn(x, x, x)
    ablated, _ = attn(x, x, x, head_mask=masks[1])
    torch.testing.assert_close(out[0], full[0])
    torch.testing.assert_close(out[1], ablated[1])


@pytest.mark.parametrize("reserve", [2, TQ])  # grows on the way / allocated once
def test_self_attention_cache_equals_full_causal_pass(attn, reserve):
    x = torch.randn(B, TQ, D)
    full, _ = attn(x, x, x, context=AttentionContext.of(causal_mask(TQ)))
    cache = KVCache(reserve=reserve)
    steps, buffers = [], set()
    for t in range(TQ):
        steps.append(attn(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)[0])
        buffers.add(cache.key.data_ptr())
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)
    assert cache.length == TQ and cache.key.shape[:2] == (B, H) and cache.key.shape[3] == D // H
    assert len(buffers) == (1 if reserve >= TQ else 2)  # room for 2 positions, then for 2 * 3


def test_cross_attention_cache_projects_memory_once(attn):
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    full, _ = attn(x, memory, memory)
    cache = KVCache(static=True)
    first, _ = attn(x[:, :1], memory, memory, cache=cache)
    key = cache.key
    # Later steps ignore the key/value arguments and reuse the cached projection.
    second, _ = attn(x[:, 1:2], torch.zeros_like(memory), torch.zeros_like(memory), cache=cache)
    assert cache.key is key
    torch.testing.assert_close(torch.cat([first, second], dim=1), full[:, :2])


def test_reordered_cache_decodes_like_a_cache_of_the_reordered_rows(attn):
    x = torch.randn(3, TQ, D)
    index = torch.tensor([2, 0, 0])  # rows may be dropped and repeated, as beam search does
    cache, reference = KVCache(reserve=TQ), KVCache(reserve=TQ)
    for t in range(2):
        attn(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
        attn(x[index, t : t + 1], x[index, t : t + 1], x[index, t : t + 1], cache=reference)
    cache.reorder(index)
    assert cache.key.shape == reference.key.shape  # the capacity is kept
    for t in range(2, TQ):
        step = x[index, t : t + 1]
        torch.testing.assert_close(
            attn(step, step, step, cache=cache)[0], attn(step, step, step, cache=reference)[0]
        )


@pytest.mark.parametrize("need_weights", [False, True])
def test_score_bias_is_added_to_scaled_scores_and_empty_rows_stay_zero(attn, need_weights):
    """The score-bias hook: softmax(q k^T / sqrt(Dh) + bias) on attended keys, and a row without keys gives
    zero weights and output, on both paths (the fused one takes the bias as a float mask with -inf)."""
    torch.manual_seed(1)
    x = torch.randn(B, TQ, D)
    bias = torch.randn(1, H, TQ, TQ) * 3
    mask = key_padding([5, 0], TQ) & causal_mask(TQ)  # the second sentence has no key at all
    context = AttentionContext.of(mask, score_bias=bias)
    out, weights = attn(x, x, x, context=context, need_weights=need_weights)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1], attn.out_proj.bias.expand(TQ, D))

    q, k, v = attn._project(x, x, x, NO_CONTEXT, None)
    scores = (q @ k.transpose(-2, -1)) / (D // H) ** 0.5 + bias
    expected = scores.masked_fill(~mask, float("-inf"))[:1].softmax(-1)  # (1, H, TQ, TQ), sentence 0
    expected_out = attn.out_proj(attn._merge_heads(expected @ v[:1]))
    torch.testing.assert_close(out[:1], expected_out, atol=1e-6, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights[:1], expected)
        assert torch.all(weights[1] == 0)


def test_score_bias_paths_agree_under_bf16_autocast(attn):
    x = torch.randn(B, TQ, D)
    bias = -torch.arange(TQ).float().view(1, 1, 1, TQ).expand(1, H, TQ, TQ)
    mask = key_padding([5, 0], TQ) & causal_mask(TQ)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused, _ = attn(x, x, x, context=AttentionContext.of(mask, score_bias=bias))
        explicit, _ = attn(x, x, x, context=AttentionContext.of(mask, score_bias=bias), need_weights=True)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused.float(), explicit.float(), atol=2e-2, rtol=2e-2)


def test_rotate_hook_rotates_queries_and_new_keys_before_they_are_cached(attn):
    """A position-dependent rotation: cached steps, each rotated at its own position, equal the full pass."""
    from model.positions import Rotary

    rotary = Rotary(D // H)
    x = torch.randn(B, TQ, D)
    rotate = partial(rotary, positions=torch.arange(TQ))
    full, _ = attn(x, x, x, context=AttentionContext.of(causal_mask(TQ), rotate=rotate))
    cache = KVCache(reserve=2)
    steps = []
    for t in range(TQ):
        step = x[:, t : t + 1]
        rotate = partial(rotary, positions=torch.tensor([t]))
        steps.append(attn(step, step, step, cache=cache, context=AttentionContext(rotate=rotate))[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)
    unrotated, _ = attn(x, x, x, context=AttentionContext.of(causal_mask(TQ)))
    assert not torch.allclose(full, unrotated, atol=1e-3)  # the hook did act
