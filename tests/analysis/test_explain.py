"""Explanation methods (analysis.explain) against hand computations, brute force and autograd; their scores
against gold alignments."""

from types import SimpleNamespace

import pytest
import torch

from analysis.explain.attributions import (
    gradient_x_input_rows,
    integrated_gradients,
    integrated_gradients_rows,
)
from analysis.explain.registry import METHODS, WEIGHTS, check_methods, explain
from analysis.explain.rollout import rollout, with_residual
from analysis.explain.scores import alignment_scores
from analysis.explain.shift_att import shift_rows
from analysis.explain.trace import Explanation, Trace
from analysis.explain.value_norms import transformed_values, value_weighted
from data.batching import Batch
from evaluation.explanations import explain_pass, lens_of
from evaluation.forced import forced_pass, sentence_pass
from model import Transformer
from model.attention import MultiHeadAttention, project_values
from tests.conftest import BOS, EOS, PAD, tiny_config


def pair_batch():
    """Two sentence pairs for ``tiny_config()`` models; the second is padded on both sides."""
    src = torch.tensor([[5, 6, 7, 8, EOS], [9, 4, EOS, PAD, PAD]])
    tgt_out = torch.tensor([[3, 4, 5, EOS], [6, EOS, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 3, 4, 5], [BOS, 6, PAD, PAD]])
    return src, tgt_in, tgt_out


def handmade_trace(cross: list[torch.Tensor], encoder: list[torch.Tensor] | None = None) -> Trace:
    B, _, T, S = cross[0].shape
    return Trace(
        cross=cross, encoder=encoder or [], src_valid=torch.ones(B, S, dtype=torch.bool),
        tgt_valid=torch.ones(B, T, dtype=torch.bool),
    )


# -- Shift-Att ----------------------------------------------------------------------------------------------


def test_shift_att_reads_each_token_at_the_step_that_takes_it_as_input():
    # One layer, one head; row t produces target token t (the last one EOS) and reads token t - 1.
    rows = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    explanation = explain("shift_att", handmade_trace([rows.view(1, 1, 3, 3)]))
    expected = torch.tensor([[0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.0, 0.0, 0.0]])  # rows 1, 2, then none
    assert torch.equal(explanation.per_head[0, 0, 0], expected)
    assert torch.equal(explanation.per_layer[0, 0], expected)
    assert explanation.tgt_valid.tolist() == [[True, True, False]]  # EOS has no step that reads it
    assert torch.equal(shift_rows(rows), expected)


def test_shift_att_aligns_where_raw_attention_is_one_step_late():
    # Each step looks at the source of the word it reads, not of the word it produces: raw attention is a step
    # late, Shift-Att right.
    late = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]).view(1, 1, 3, 3)
    trace = handmade_trace([late])
    gold = [{(0, 0), (1, 1)}]  # (source, target): word 0 ↔ word 0, word 1 ↔ word 1
    assert alignment_scores(explain("attention", trace), gold).layers[0].aer == 1.0
    assert alignment_scores(explain("shift_att", trace), gold).layers[0].aer == 0.0


# -- value-weighted attention -------------------------------------------------------------------------------


def test_value_weighted_attention_equals_brute_force_from_the_module_weights():
    torch.manual_seed(0)
    D, H, T, S = 8, 2, 3, 4
    attention = MultiHeadAttention(D, H).eval()
    query, memory = torch.randn(1, T, D), torch.randn(1, S, D)
    output, weights = attention(query, memory, memory, need_weights=True)
    values = project_values(attention, memory)  # (1, H, S, Dh)
    per_head, per_layer = value_weighted(weights, values, attention.out_proj.weight)

    Dh = D // H
    w_v, b_v = attention.in_proj.weight[2 * D :], attention.in_proj.bias[2 * D :]
    w_o = attention.out_proj.weight
    brute_head = torch.zeros(H, T, S)
    brute_layer = torch.zeros(T, S)
    with torch.no_grad():
        for i in range(T):
            for j in range(S):
                total = torch.zeros(D)
                for h in range(H):
                    cut = slice(h * Dh, (h + 1) * Dh)
                    v = w_v[cut] @ memory[0, j] + b_v[cut]  # head h's value of source token j
                    moved = weights[0, h, i, j] * (w_o[:, cut] @ v)
                    brute_head[h, i, j] = moved.norm()
                    total += moved
                brute_layer[i, j] = total.norm()
    assert torch.allclose(per_head[0], brute_head, atol=1e-5)
    assert torch.allclose(per_layer[0], brute_layer, atol=1e-5)
    # The pieces add up to what the module computed: Σ_j Σ_h α f_h(x_j) + output bias = its output.
    f = transformed_values(project_values(attention, memory), w_o)  # (1, H, S, D)
    rebuilt = torch.einsum("bhts,bhsd->btd", weights, f) + attention.out_proj.bias
    assert torch.allclose(rebuilt, output, atol=1e-5)


# -- rollout ------------------------------------------------------------------------------------------------


def test_rollout_of_identity_attention_is_the_identity():
    eye = torch.eye(4).expand(2, 3, 4, 4)  # (B, H, S, S)
    assert torch.equal(rollout([eye, eye, eye]), torch.eye(4).expand(2, 4, 4))


def test_rollout_matches_a_hand_computed_two_layer_case():
    first = torch.tensor([[1.0, 0.0], [0.5, 0.5]]).view(1, 1, 2, 2)
    second = torch.tensor([[0.0, 1.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    # 0.5·A + 0.5·I: [[1, 0], [0.25, 0.75]] and [[0.5, 0.5], [0, 1]]; the second layer's applies last.
    assert torch.equal(with_residual(first)[0, 0], torch.tensor([[1.0, 0.0], [0.25, 0.75]]))
    expected = torch.tensor([[0.625, 0.375], [0.25, 0.75]])
    assert torch.allclose(rollout([first, second])[0], expected)
    # Composed with cross-attention: a decoder row that reads encoder output 0 reads inputs 0.625 and 0.375.
    cross = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    explanation = explain("rollout", handmade_trace([cross], [first, second]))
    assert torch.allclose(explanation.per_layer[0, 0], expected)


def test_rollout_averages_heads_before_it_mixes():
    heads = torch.stack([torch.eye(2), torch.tensor([[0.0, 1.0], [1.0, 0.0]])]).unsqueeze(0)  # (1, 2, 2, 2)
    # Mean over heads [[0.5, 0.5], [0.5, 0.5]]; with the residual [[0.75, 0.25], [0.25, 0.75]].
    assert torch.allclose(rollout([heads])[0], torch.tensor([[0.75, 0.25], [0.25, 0.75]]))


# -- gradient attributions ----------------------------------------------------------------------------------


@pytest.fixture
def traced():
    torch.manual_seed(0)
    # GELU: a smooth model, so that 64 quadrature points integrate its gradient closely (ReLU's kinks do not).
    model = Transformer(tiny_config(activation="gelu")).eval()
    src, tgt_in, tgt_out = pair_batch()
    seen = forced_pass(model, Batch(src, tgt_in, tgt_out, torch.arange(2)))
    return model, seen.trace, seen.hidden, (src, tgt_in, tgt_out)


def test_gradient_x_input_matches_autograd(traced):
    _, trace, _, _ = traced
    sentences, targets = torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 1, 2, 3, 0, 1])
    inputs, words = trace.embeddings[sentences].detach(), trace.words[sentences]
    attributions = gradient_x_input_rows(trace.log_probs, inputs, sentences, targets, words)  # (N, S, D)
    for n, (b, t) in enumerate(zip(sentences.tolist(), targets.tolist())):
        e = trace.embeddings[b].detach().clone().requires_grad_()
        row = trace.log_probs(e.unsqueeze(0), torch.tensor([b]), torch.tensor([t]))  # (1,)
        (grad,) = torch.autograd.grad(row[0], e)
        expected = grad * e.detach() * trace.words[b, :, None]
        assert torch.allclose(attributions[n], expected, atol=1e-6)
    assert attributions[:4, -1].abs().sum() == 0  # EOS is not attributed
    assert attributions[4:, 2:].abs().sum() == 0  # nor EOS and padding of the second sentence
    # The Explanation reduces each row to the norm of its source tokens' attributions.
    explanation = explain("grad_x_input", trace)
    assert torch.allclose(explanation.per_layer[sentences, 0, targets], attributions.norm(dim=-1), atol=1e-6)


def test_integrated_gradients_are_complete(traced):
    _, trace, _, _ = traced
    sentences, targets = torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 1, 2, 3, 0, 1])
    inputs, words = trace.embeddings[sentences].detach(), trace.words[sentences]
    attributions, _ = integrated_gradients_rows(
        trace.log_probs, inputs, sentences, targets, words, ig_steps=64
    )
    baselines = torch.where(words[:, :, None], torch.zeros_like(inputs), inputs)  # EOS stays itself
    with torch.no_grad():
        f_x = trace.log_probs(inputs, sentences, targets)  # (N,)
        f_baseline = trace.log_probs(baselines, sentences, targets)
    total = attributions.sum(dim=(1, 2))  # (N,)
    difference = f_x - f_baseline
    assert difference.abs().min() > 1e-3  # a case where completeness says something
    assert torch.allclose(total, difference, rtol=0.01, atol=0.0)
    # The signed Explanation keeps completeness: each row sums to f(x) - f(baseline).
    explanation = integrated_gradients(trace, reduction="sum", ig_steps=64)
    assert torch.allclose(explanation.per_layer[sentences, 0, targets].sum(dim=-1), difference, rtol=0.01)
    assert explanation.signed


def test_every_method_returns_the_same_kind_of_matrix(traced):
    model, trace, _, _ = traced
    L, H = model.config.num_decoder_layers, model.config.num_heads
    for name in METHODS:
        explanation = explain(name, trace, ig_steps=4)  # the other methods take no steps
        B, layers, T, S = explanation.per_layer.shape
        assert (B, T, S) == (2, 4, 5), name
        assert layers == (1 if METHODS[name].gradients else L), name
        if explanation.per_head is not None:
            assert explanation.per_head.shape == (2, L, H, 4, 5), name
        # Padded rows and columns of the second sentence carry nothing.
        assert explanation.per_layer[1, :, :, 3:].abs().sum() == 0, name
        assert explanation.per_layer[1, :, 2:].abs().sum() == 0, name


def test_the_registrys_properties_say_what_each_method_does(traced):
    """``weights``: the maps are the trace's cross weights, per head as the model computed them;
    ``takes_steps``: ``ig_steps`` changes the maps (the other methods ignore it); ``gradients``: one
    embeddings row, the maps of every other method one per decoder layer."""
    model, trace, _, _ = traced
    valid = trace.tgt_valid[:, None, None, :, None] & trace.src_valid[:, None, None, None, :]  # (B,1,1,T,S)
    cross = torch.stack(trace.cross, dim=1) * valid  # (B, L, H, T, S), the padding zeroed
    for name, method in METHODS.items():
        few, many = explain(name, trace, ig_steps=1), explain(name, trace, ig_steps=16)
        assert (not torch.equal(few.per_layer, many.per_layer)) == method.takes_steps, name
        assert few.per_layer.shape[1] == (1 if method.gradients else model.config.num_decoder_layers), name
        is_weights = few.per_head is not None and few.per_head.shape == cross.shape and torch.equal(
            few.per_head, cross)
        assert is_weights == method.weights, name
    assert [name for name, method in METHODS.items() if method.weights] == [WEIGHTS]
    assert all(method.takes_steps for method in METHODS.values() if method.costly)  # the steps are the cost


def test_unknown_method_is_named():
    assert check_methods(("rollout", "attention")) == ["rollout", "attention"]
    with pytest.raises(ValueError, match="unknown explanation method 'saliency'; expected one of attention"):
        check_methods(["attention", "saliency"])


# -- logit lens ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
def test_logit_lens_of_the_last_layer_is_the_models_output(norm_first):
    torch.manual_seed(0)
    model = Transformer(tiny_config(norm_first=norm_first, tie_output_embedding=norm_first)).eval()
    src, tgt_in, tgt_out = pair_batch()
    lens = lens_of(model, forced_pass(model, Batch(src, tgt_in, tgt_out, torch.arange(2))), top_k=3)
    with torch.no_grad():
        probs = model(src, tgt_in).softmax(dim=-1)  # (B, T, V)
    assert lens.top_ids.shape == (2, 2, 4, 3)
    assert torch.allclose(lens.produced_prob[:, -1], probs.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1),
                          atol=1e-6)
    top = probs.topk(3, dim=-1)
    assert torch.equal(lens.top_ids[:, -1], top.indices)
    assert torch.allclose(lens.top_probs[:, -1], top.values, atol=1e-6)
    expected_rank = (probs > probs.gather(-1, tgt_out.unsqueeze(-1))).sum(dim=-1)
    assert torch.equal(lens.produced_rank[:, -1], expected_rank)
    # An earlier layer reads differently (the lens is not just the output repeated).
    assert not torch.allclose(lens.produced_prob[:, 0], lens.produced_prob[:, -1])


def test_token_embeddings_given_to_encode_are_used_as_looked_up():
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src = pair_batch()[0]
    with torch.no_grad():
        looked_up = model.encode(src).memory
        given = model.encode(src, token_embeddings=model.src_embed(src)).memory
        zeroed = model.encode(src, token_embeddings=torch.zeros(2, 5, 16)).memory
    assert torch.equal(looked_up, given)
    assert not torch.allclose(looked_up, zeroed)


# -- scores -------------------------------------------------------------------------------------------------


def _explanation(per_layer, per_head=None, src_valid=None) -> Explanation:
    B, L, T, S = per_layer.shape
    src_valid = torch.ones(B, S, dtype=torch.bool) if src_valid is None else src_valid
    layers = tuple(f"layer {i + 1}" for i in range(L))
    return Explanation("test", per_layer, per_head, layers, src_valid, torch.ones(B, T, dtype=torch.bool))


def test_aer_of_a_perfect_matrix_is_zero_and_of_a_known_case_its_hand_value():
    gold = [{(2, 0), (0, 1), (1, 2)}]  # (source, target)
    perfect = torch.zeros(1, 1, 3, 3)
    perfect[0, 0, 0, 2] = perfect[0, 0, 1, 0] = perfect[0, 0, 2, 1] = 1.0
    # Layer 2 aligns target 0 right and targets 1, 2 wrong: |A ∩ G| = 1, |A| = |G| = 3 → AER 1 - 2/6.
    half = torch.zeros(1, 1, 3, 3)
    half[0, 0, 0, 2] = half[0, 0, 1, 1] = half[0, 0, 2, 2] = 1.0
    per_layer = torch.cat([perfect, half], dim=1)  # (1, 2, 3, 3)
    per_head = torch.stack([perfect, half], dim=2).expand(1, 2, 2, 3, 3)  # heads 1, 2 = perfect, half
    table = alignment_scores(_explanation(per_layer, per_head), gold)
    assert [row.aer for row in table.layers] == pytest.approx([0.0, 2 / 3])
    assert [row.agreement for row in table.layers] == pytest.approx([1.0, 1 / 3])
    assert torch.tensor(table.heads.aer).allclose(torch.tensor([[0.0, 2 / 3], [0.0, 2 / 3]]))
    assert table.best == table.layers[0]


def test_signed_scores_never_align_to_a_padded_position():
    # Every valid score is negative; the padded column (0 after masking) must not win the arg-max.
    scores = torch.tensor([[-0.5, -0.1, 0.0], [-0.2, -0.9, 0.0]]).view(1, 1, 2, 3)
    src_valid = torch.tensor([[True, True, False]])
    table = alignment_scores(_explanation(scores, src_valid=src_valid), [{(1, 0), (0, 1)}])
    assert table.layers[0].aer == 0.0


def test_a_hypothesis_cut_without_eos_is_explained_on_the_tokens_it_generated(tiny_model):
    """``finished=False``: rows are the generated tokens, the last one read after the one before it, as
    the maps show such a hypothesis; not a row for an EOS never produced."""
    src_ids, hypothesis = [3, 4, 5], [6, 7, 8, 9]
    seen = sentence_pass(tiny_model, src_ids, hypothesis, finished=False)
    per_head = explain_pass(seen, ["attention"])["attention"].per_head[0]  # (L, H, T, S)
    lens = lens_of(tiny_model, seen)
    assert per_head.shape[2:] == (len(hypothesis), len(src_ids) + 1)
    tokens = SimpleNamespace(tokens=lambda ids: [str(i) for i in ids])
    shown = seen.tokens(tokens, tokens)
    assert shown.target_in == [str(i) for i in [BOS] + hypothesis[:-1]]
    assert shown.target_out == [str(i) for i in hypothesis]
    torch.testing.assert_close(per_head, torch.stack(seen.sentence_maps()["cross"]))
    # The lens follows the generated tokens: the last row's produced token is the last generated one.
    with torch.no_grad():
        logits = tiny_model(torch.tensor([src_ids + [EOS]]), torch.tensor([[BOS] + hypothesis[:-1]]))
    own = logits.float().softmax(dim=-1)[0, torch.arange(4), torch.tensor(hypothesis)]  # (T,)
    torch.testing.assert_close(lens.produced_prob[0, -1], own)
