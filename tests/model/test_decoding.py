"""Decoding: the cache changes nothing, beam search finds what exhaustive search finds, batching changes
nothing."""

import itertools
import math

import pytest
import torch

from analysis.flops import matmul_flops
from model import DecoderRequest, EncoderOutput, HeadMask, Transformer
from model.decoding import BeamRows, _allowed_logits, beam_search, greedy_search
from tests.conftest import BOS, EOS, PAD, random_ids, tiny_config
from tests.helpers.reference_decoding import plain_beam_search, rows_of, teacher_forced_greedy
from tests.helpers.weight_surgery import suppress_eos


@pytest.fixture
def model():
    torch.manual_seed(0)
    model = Transformer(tiny_config(tie_output_embedding=False)).eval()
    with torch.no_grad():  # sharp, varied next-token distributions: hypotheses of many lengths compete
        model.output_proj.weight.normal_(0.0, 1.0)
    return model


def test_default_limit_follows_each_source_length(model, src):
    lengths = (src != PAD).sum(dim=1)
    for row, length in zip(rows_of(model.generate(src)), lengths.tolist()):
        assert len(row) <= 2 * length + 10
        assert EOS in row or len(row) == 2 * length + 10


def test_output_contract(model, src):
    out = model.generate(src, max_len=12)
    lengths = [len(row) for row in rows_of(out)]
    assert len(set(lengths)) > 1, "the fixture should produce hypotheses of several lengths"
    assert out.dtype == torch.long and out.shape[0] == 4 and out.shape[1] <= 12
    for row in out.tolist():
        if EOS in row:
            first = row.index(EOS)
            assert all(t == PAD for t in row[first + 1 :])
        else:
            assert len(row) == 12 and PAD not in row


def test_cached_greedy_equals_uncached_and_teacher_forced(model, src):
    cached = greedy_search(model, src, 12)
    uncached = greedy_search(model, src, 12, use_cache=False)
    assert torch.equal(cached, uncached)
    assert rows_of(cached) == teacher_forced_greedy(model, src, 12)


def never_ending(model):
    """The fixture model with EOS all but impossible: every hypothesis runs into its length limit."""
    direction = torch.nn.functional.normalize(
        torch.randn(model.config.d_model, generator=torch.Generator().manual_seed(0)), dim=0
    )
    with torch.no_grad():
        model.decoder_norm.bias.copy_(8.0 * direction)
        model.output_proj.weight[EOS] = -direction
    return model


def test_a_cached_step_costs_its_current_length_and_a_rerun_the_whole_prefix(model, src):
    """The work of both decodings, counted, equals the textbook count for n steps of B sentences.

    Per decoder layer and new position: projections 2D(3D + D) (self) + 2D(D + D) (cross) + 4DF
    (feed-forward), attention 4Dk over k keys; the vocabulary projection 2DV of the last position only.
    With the cache, step t runs one position over t self-attention keys, and the encoder output is projected
    to keys and values once; the re-run computes all t positions over the causal t x t scores, and projects
    the encoder output again at every step.
    """
    model = never_ending(model)
    c = model.config
    b, s, n = src.size(0), src.size(1), 9
    d, f, v = c.d_model, c.d_ff, c.tgt_vocab_size
    per_position = 2 * d * (3 * d + d) + 2 * d * (d + d) + 4 * d * f  # one decoder layer
    memory_kv = 2 * s * d * 2 * d  # cross-attention keys and values, per layer and sentence
    encoder = c.num_encoder_layers * b * (s * (2 * d * (3 * d + d) + 4 * d * f) + 4 * s * s * d)
    layers, logits = c.num_decoder_layers * b, b * 2 * d * v  # the vocabulary projection of one step
    cached = encoder + layers * memory_kv + sum(
        layers * (per_position + 4 * d * t + 4 * d * s) + logits for t in range(1, n + 1)
    )
    rerun = encoder + sum(
        layers * (t * per_position + 4 * d * t * t + memory_kv + 4 * d * t * s) + logits
        for t in range(1, n + 1)
    )
    assert matmul_flops(lambda: greedy_search(model, src, n)) == cached
    assert matmul_flops(lambda: greedy_search(model, src, n, use_cache=False)) == rerun


@pytest.mark.parametrize("max_len", [12, None])  # None: each sentence's limit follows its own length
def test_batched_generation_equals_one_sentence_at_a_time(model, src, max_len):
    if max_len is None:
        model = never_ending(model)
    for beam_size in (1, 3):
        batched = rows_of(model.generate(src, max_len=max_len, beam_size=beam_size))
        alone = [
            rows_of(model.generate(s[s != PAD][None], max_len=max_len, beam_size=beam_size))[0] for s in src
        ]
        assert batched == alone
        if max_len is None:
            assert any(EOS not in row for row in batched), "some sentence should run into its limit"


def test_beam_of_one_equals_greedy(model, src):
    assert torch.equal(
        beam_search(model, src, 12, beam_size=1, length_penalty=0.0), greedy_search(model, src, 12)
    )
    assert torch.equal(model.generate(src, max_len=12, beam_size=1), greedy_search(model, src, 12))


def test_beam_hypotheses_end_with_eos_or_stop_at_max_len(model, src):
    out = model.generate(src, max_len=6, beam_size=4)
    for row in rows_of(out):
        assert row[-1] == EOS or len(row) == 6
        assert EOS not in row[:-1]


def sequence_score(model, sentence, tokens):
    logits = model(sentence[None], torch.tensor([[BOS, *tokens[:-1]]]))[0].log_softmax(-1)
    return sum(logits[i, t].item() for i, t in enumerate(tokens))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    """With a beam wider than the search space, beam search must return the best hypothesis of all."""
    torch.manual_seed(2)
    model = Transformer(tiny_config(tgt_vocab_size=6, tie_output_embedding=False)).eval()
    with torch.no_grad():
        model.output_proj.weight.normal_(0.0, 1.0)
    sentence = random_ids(1, 4, 13, generator=torch.Generator().manual_seed(5))[0]
    max_len, vocab = 3, 6

    def penalty(n):
        return ((5 + n) / 6) ** alpha

    best, best_score = None, -math.inf
    for n in range(1, max_len + 1):
        for tokens in itertools.product([t for t in range(vocab) if t not in (PAD, BOS)], repeat=n):
            if EOS in tokens[:-1] or (n < max_len and tokens[-1] != EOS):
                continue  # a hypothesis ends at its first EOS or at max_len
            score = sequence_score(model, sentence, list(tokens)) / penalty(n)
            if score > best_score:
                best, best_score = list(tokens), score
    found = rows_of(beam_search(model, sentence[None], max_len, beam_size=vocab**2, length_penalty=alpha))[0]
    assert found == best


def test_beam_search_never_scores_below_greedy(model, src):
    greedy = rows_of(greedy_search(model, src, 10))
    beam = rows_of(beam_search(model, src, 10, beam_size=4, length_penalty=0.0))
    for s, g, b in zip(src, greedy, beam):
        s = s[s != PAD]
        assert sequence_score(model, s, b) >= sequence_score(model, s, g) - 1e-5


def test_early_stop_when_every_sentence_finishes(monkeypatch):
    model = Transformer(tiny_config(tie_output_embedding=False)).eval()
    with torch.no_grad():  # the decoder's output is always the same vector, and only EOS scores against it
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.fill_(1.0)
        model.output_proj.weight.zero_()
        model.output_proj.weight[EOS] = 1.0
    steps = []
    decode = model.decode
    monkeypatch.setattr(model, "decode", lambda *args, **kwargs: steps.append(1) or decode(*args, **kwargs))
    src = random_ids(3, 5, 13)
    assert model.generate(src, max_len=50).tolist() == [[EOS]] * 3
    assert len(steps) == 1  # greedy: every sentence ended at step 1
    steps.clear()
    assert model.generate(src, max_len=50, beam_size=3, length_penalty=0.0).tolist() == [[EOS]] * 3
    # Beam search too: EOS finishes at step 1, and no live beam (a non-EOS token, about e^-16 likely) can
    # beat it any more, although only 1 of the 3 hypotheses has finished.
    assert len(steps) == 1


def test_generation_is_capped_at_the_models_max_len():
    """BOS takes position 0, so max_len positions feed exactly max_len generated tokens."""
    model = Transformer(tiny_config(tie_output_embedding=False, max_len=8)).eval()
    suppress_eos(model)
    src = random_ids(2, 5, 13)
    for beam_size in (1, 3):
        out = model.generate(src, max_len=1000, beam_size=beam_size)
        assert out.shape == (2, 8) and not (out == EOS).any() and not (out == PAD).any()


@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_batched_beam_search_equals_a_plain_one_sentence_at_a_time(model, src, alpha):
    """Batching, the cache and its reordering, the stopping rule and the length penalty, against plain lists.

    With alpha 2 the third sentence's best hypothesis is found only after 3 hypotheses have finished: stopping
    as soon as there are 3 would return another.
    """
    found = rows_of(beam_search(model, src, 10, beam_size=3, length_penalty=alpha))
    expected = [plain_beam_search(model, s[s != PAD], 10, 3, alpha) for s in src]
    assert found == expected


def test_beams_share_their_sentences_cross_attention_keys_and_values(model, src):
    """Beam search decodes K rows per sentence against one encoder output row per sentence: cross-attention
    keys and values are projected once per sentence and never copied when beams are reordered, and every
    step's logits equal those of decoding against the encoder output repeated for each beam."""
    b, k = src.size(0), 3
    encoded = model.encode(src)
    repeated = EncoderOutput(
        encoded.memory.repeat_interleave(k, 0), encoded.src_attend.repeat_interleave(k, 0), []
    )
    shared_cache, repeated_cache = model.new_cache(), model.new_cache()
    tokens = torch.full((b * k, 1), BOS)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        logits = model.decode(tokens, encoded, cache=shared_cache).logits  # (B*K, 1, V)
        torch.testing.assert_close(logits, model.decode(tokens, repeated, cache=repeated_cache).logits)
        cross_keys = [cross.key for _, cross in shared_cache.layers]
        assert all(key.size(0) == b for key in cross_keys)  # one row per sentence
        # Beams survive, repeat or drop within their sentence, as in beam search.
        index = (torch.arange(b)[:, None] * k + torch.randint(0, k, (b, k), generator=gen)).view(-1)
        shared_cache.reorder(index)
        repeated_cache.reorder(index)
        assert all(cross.key is key for (_, cross), key in zip(shared_cache.layers, cross_keys))
        tokens = random_ids(b * k, 1, 11, generator=gen)
    with pytest.raises(AssertionError, match="a row moved to another sentence"):
        shared_cache.reorder(torch.arange(b * k).roll(1))  # the shared rows would no longer fit


def test_beam_rows_fold_a_sentences_beams_into_one_row_of_queries():
    rows = BeamRows(2)
    x = torch.arange(12.0).view(4, 3, 1)  # (B, T, D): rows 0, 1 are the first sentence's beams
    folded = rows.fold(x)  # (B/G, G*T, D)
    assert folded.squeeze(-1).tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    assert torch.equal(rows.unfold(folded), x)
    weights = torch.arange(24.0).view(2, 1, 6, 2)  # (B/G, H, G*T, S)
    assert torch.equal(rows.unfold_weights(weights), weights.view(4, 1, 3, 2))
    assert BeamRows.of(4, 4) is None and BeamRows.of(6, 2) == BeamRows(3)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_sentences_beams_share_its_encoder_row_like_the_row_repeated(model, src, need_weights):
    """G consecutive decoder rows (a sentence's beams) against one encoder output row per sentence: the
    logits, the attention maps and a per-sentence cross-attention head mask equal those of the row repeated
    for each beam, teacher-forced or in cached steps."""
    b, k = src.size(0), 3
    encoded = model.encode(src)
    repeated = EncoderOutput(
        encoded.memory.repeat_interleave(k, 0), encoded.src_attend.repeat_interleave(k, 0), []
    )
    tgt_in = random_ids(b * k, 4, 11, generator=torch.Generator().manual_seed(1))
    tgt_in[:, 0] = BOS
    per_sentence = torch.rand(b, 2, 4, generator=torch.Generator().manual_seed(2))  # (B, L, H)
    masks = HeadMask(cross=per_sentence.repeat_interleave(k, 0))  # (B*K, L, H)
    request = DecoderRequest(weights=need_weights)
    shared = model.decode(tgt_in, encoded, head_mask=masks, request=request)
    expected = model.decode(tgt_in, repeated, head_mask=masks, request=request)
    torch.testing.assert_close(shared.logits, expected.logits)
    for ours, theirs in zip(shared.cross_attention, expected.cross_attention, strict=True):
        assert ours.shape == (b * k, 4, 4, src.size(1))
        torch.testing.assert_close(ours, theirs)
    cache = model.new_cache()
    for t in range(tgt_in.size(1)):
        step = model.decode(tgt_in[:, t : t + 1], encoded, cache=cache, head_mask=masks).logits
        torch.testing.assert_close(step, expected.logits[:, t : t + 1])
    assert all(cross.key.size(0) == b for _, cross in cache.layers)  # one row per sentence
    with pytest.raises(AssertionError, match="different cross-attention head masks"):
        model.decode(tgt_in, encoded, head_mask=HeadMask(cross=torch.rand(b * k, 2, 4)))


def test_decoder_rows_that_cannot_share_the_encoder_rows_are_refused(model, src):
    encoded = model.encode(src[:2])
    for rows in (5, 1):
        with pytest.raises(ValueError, match=f"{rows} decoder rows cannot share 2 encoder output rows"):
            model.decode(torch.full((rows, 1), BOS), encoded)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ruling_out_padding_and_bos_leaves_the_callers_logits_alone(dtype):
    logits = torch.randn(3, 11).to(dtype)
    before = logits.clone()
    allowed = _allowed_logits(logits, PAD, BOS)
    assert torch.equal(logits, before)
    assert allowed.dtype == torch.float32
    assert (allowed[:, [PAD, BOS]] == -math.inf).all()
    others = [t for t in range(11) if t not in (PAD, BOS)]
    assert torch.equal(allowed[:, others], before[:, others].float())


def test_a_batch_of_no_sentences_decodes_to_no_tokens(model):
    src = torch.zeros(0, 7, dtype=torch.long)
    outputs = [
        greedy_search(model, src, 5),
        greedy_search(model, src, 5, use_cache=False),
        beam_search(model, src, 5, beam_size=3),
        model.generate(src),  # per-sentence default limits: an empty (0,) tensor
        model.generate(src, beam_size=3),
    ]
    for out in outputs:
        assert out.shape == (0, 0) and out.dtype == torch.long
        assert model.generated_ids(out) == []
    for search in (greedy_search, lambda *args: beam_search(*args, beam_size=3)):
        with pytest.raises(ValueError, match="max_len must be at least 1, got 0"):
            search(model, src, 0)  # a bad limit is an error whatever the batch


@pytest.mark.parametrize("alpha", [-0.5, math.nan])
def test_a_negative_length_penalty_is_refused(model, src, alpha):
    """Beam search's early stop is a valid bound only if longer hypotheses are never favoured (alpha >= 0)."""
    with pytest.raises(ValueError, match=f"length_penalty must be at least 0, got {alpha}"):
        beam_search(model, src, 10, beam_size=3, length_penalty=alpha)
    with pytest.raises(ValueError, match="length_penalty must be at least 0"):
        model.generate(src, max_len=10, beam_size=3, length_penalty=alpha)


@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_beam_search_sets_finished_sentences_aside(model, src, alpha, monkeypatch):
    """Sentences leave the batch as they finish: later steps decode fewer rows, and every sentence still gets
    what it gets alone, with its own head mask too."""
    c = model.config
    generator = torch.Generator().manual_seed(5)
    layers_heads = {
        "decoder": (c.num_decoder_layers, c.num_heads), "cross": (c.num_decoder_layers, c.num_heads)
    }
    masks = {kind: (torch.rand(len(src), *shape, generator=generator) > 0.3).float()
             for kind, shape in layers_heads.items()}
    rows = []
    decode = model.decode

    def counting_decode(tokens, *args, **kwargs):
        rows.append(tokens.size(0))
        return decode(tokens, *args, **kwargs)

    monkeypatch.setattr(model, "decode", counting_decode)
    found = rows_of(beam_search(model, src, 10, beam_size=3, length_penalty=alpha,
                                head_mask=HeadMask(**masks)))
    assert rows == sorted(rows, reverse=True) and rows[0] == 3 * len(src) and rows[-1] < rows[0]
    monkeypatch.setattr(model, "decode", decode)
    alone = [
        rows_of(beam_search(model, s[None], 10, beam_size=3, length_penalty=alpha,
                            head_mask=HeadMask(**{kind: m[i : i + 1] for kind, m in masks.items()})))[0]
        for i, s in enumerate(src)
    ]
    assert found == alone
