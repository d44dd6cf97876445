"""Guided alignment (Garg et al. 2019): one cross-attention head trained on word links beside the translation.

The head's weights are computed beside the fused kernel without changing what it computes; the loss is the
cross-entropy of the head's rows against the link distributions; its gradient reaches the model through that
head's queries and keys only; with the option off, training is what it was; the labels are read, mapped to
tokens and collated on the CPU, and eflomal's are cached beside the tokenizers.
"""

import math

import pytest
import torch

from data.alignment_labels import (
    alignment_targets,
    collate_aligned,
    read_alignment_labels,
    token_links,
    write_links_file,
)
from data.corpora import CorpusError
from data.datamodule import TranslationDataModule
from data.pairs import Pair
from data.reader import ToyOptions
from model import AlignedHead, Transformer
from model.attention import head_weights
from model.context import AttentionContext
from model.packing import TokenIndex
from model.transformer import PACK_FROM
from model.types import DecoderRequest
from tests.conftest import PAD, random_ids, tiny_config
from tests.helpers.host_syncs import WatchOrdinarySteps
from tests.helpers.tiny_module import attach, cpu_trainer, module
from training.module import TranslationModule, alignment_loss, token_index_of, with_null

# -- the model: one head's weights beside the fused kernel ---------------------------------------------------


def padded_pair(batch: int = 4, source: int = 9, target: int = 7, seed: int = 0):
    """Source and target ids with most rows padded, so that the training pass packs its tokens."""
    generator = torch.Generator().manual_seed(seed)
    src, tgt_in = random_ids(batch, source, 13, generator=generator), random_ids(batch, target, 11,
                                                                                 generator=generator)
    for row in range(1, batch):
        src[row, source - 2 * row:] = PAD
        tgt_in[row, target - row - 1:] = PAD
    return src, tgt_in


def test_one_heads_weights_are_the_explicit_paths_for_that_head():
    torch.manual_seed(0)
    attention = Transformer(tiny_config()).decoder_layers[0].cross_attn
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 6, 16)
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    mask[2] = False  # a row with no key at all: zero weights, as on the explicit path
    context = AttentionContext.of(mask)
    _, every = attention(x, memory, memory, context=context, need_weights=True)  # (B, H, T, S)
    for head in range(4):
        one = head_weights(attention, x, memory, head, context=context)  # (B, 1, T, S)
        torch.testing.assert_close(one, every[:, head : head + 1])
    assert torch.all(one[2] == 0) and torch.all(one[1, ..., 4:] == 0)
    with pytest.raises(ValueError, match=r"head must be in \[0, 4\), got 4"):
        head_weights(attention, x, memory, 4, context=context)


@pytest.mark.parametrize("packed", [False, True])
def test_asking_for_the_supervised_head_leaves_the_logits_bit_for_bit(packed):
    """The logits are those of the plain pass, exactly (the fused kernel computes them either way), and the
    head's weights are that head's map of the explicit pass; packed or padded."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(num_decoder_layers=3)).eval()
    src, tgt_in = padded_pair()
    tokens = TokenIndex.of(src, tgt_in, PAD) if packed else None
    if packed:
        padding = 1 - (tokens.source.numel() + tokens.target.numel()) / (src.numel() + tgt_in.numel())
        assert padding >= PACK_FROM  # the layers compute on the tokens only
    plain = model(src, tgt_in, tokens=tokens)
    logits, weights = model(src, tgt_in, tokens=tokens, alignment_head=(1, 2))
    assert torch.equal(logits, plain)
    _, maps = model(src, tgt_in, return_attention=True)
    keep = tgt_in != PAD  # packed, padded queries are not computed at all
    torch.testing.assert_close(weights[keep], maps.cross[1][:, 2][keep])
    with pytest.raises(ValueError, match=r"layer must be in \[0, 3\), got 3"):
        model(src, tgt_in, alignment_head=(3, 0))


@pytest.mark.parametrize("packed", [False, True])
def test_the_full_context_head_sees_the_words_after_each_row_and_leaves_the_logits_alone(packed):
    """alignment_head with full_context (Garg et al. 2019): the head's weights come from a second pass without
    the causal mask, every head's map of which ``full_context_attention`` returns explicitly: so a row's
    weights change with a later target word, where the causal pass's do not; the logits are the plain
    pass's, packed or padded."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(num_decoder_layers=3)).eval()
    src, tgt_in = padded_pair()
    tokens = TokenIndex.of(src, tgt_in, PAD) if packed else None
    plain = model(src, tgt_in, tokens=tokens)
    logits, weights = model(src, tgt_in, tokens=tokens, alignment_head=AlignedHead(1, 2, full_context=True))
    assert torch.equal(logits, plain)
    every = model.full_context_attention(tgt_in, model.encode(src), 1)  # (B, H, T, S)
    keep = tgt_in != PAD
    torch.testing.assert_close(weights[keep], every[:, 2][keep])
    _, causal = model(src, tgt_in, return_attention=True)
    assert not torch.allclose(every[:, 2][keep], causal.cross[1][:, 2][keep])  # it sees more than causal
    later = tgt_in.clone()
    later[0, -1] = (later[0, -1] + 1) % 11 + 3  # the first sentence's last word, another word
    seen = model.full_context_attention(later, model.encode(src), 1)
    assert not torch.allclose(seen[0, :, 0], every[0, :, 0])  # row 1 sees the last word
    _, causal_later = model(src, later, return_attention=True)
    torch.testing.assert_close(causal_later.cross[1][0, :, 0], causal.cross[1][0, :, 0])  # causal: it cannot
    with pytest.raises(ValueError, match=r"layer must be in \[0, 3\), got 3"):
        model.full_context_attention(tgt_in, model.encode(src), 3)


def test_a_cached_step_refuses_a_full_context_head_before_it_touches_the_cache():
    torch.manual_seed(0)
    model = Transformer(tiny_config(num_decoder_layers=2)).eval()
    src, tgt_in = padded_pair()
    cache = model.new_cache()
    request = DecoderRequest(alignment=AlignedHead(0, 1, full_context=True))
    with pytest.raises(ValueError, match="reads the whole target: not for cached steps"):
        model.decode(tgt_in[:, :1], model.encode(src), cache=cache, request=request)
    assert cache.length == 0


def test_a_full_context_head_trains_on_the_second_pass_and_is_saved_with_the_run():
    """alignment_full_context: the loss reads the head in the full-context pass; the translation loss is the
    causal pass's, unchanged; the setting is saved with the run."""
    torch.manual_seed(0)
    settings = {"num_heads": 2, "alignment_layer": 1, "alignment_head": 2}
    plain, full = module(**settings), module(**settings, alignment_full_context=True)
    full.load_state_dict(plain.state_dict())
    batch = aligned_batch()
    assert full.alignment_head == AlignedHead(0, 1, full_context=True)
    attention = full.model.full_context_attention(batch.tgt_in, full.model.encode(batch.src), 0, 1)  # (B,T,S)
    translation, alignment = full._training_losses(batch)
    torch.testing.assert_close(alignment, alignment_loss(attention, batch.alignment))
    plain_translation, plain_alignment = plain._training_losses(batch)
    assert torch.equal(translation, plain_translation)
    assert not torch.isclose(alignment, plain_alignment)
    assert full.hparams.alignment_full_context and not plain.hparams.alignment_full_context


# -- the loss ------------------------------------------------------------------------------------------------


def test_the_loss_is_the_cross_entropy_against_the_links_averaged_over_rows_with_links():
    attention = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]])  # (1, T=3, S=3)
    labels = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]])  # row 3 has no link
    # Row 1: -log 0.5; row 2: -(0.5 log 0.6 + 0.5 log 0.3); row 3 counts for nothing: the mean of two.
    expected = (-math.log(0.5) - 0.5 * (math.log(0.6) + math.log(0.3))) / 2
    assert alignment_loss(attention, labels).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.775273, abs=1e-6)


def test_a_masked_key_with_no_link_costs_nothing_and_a_batch_without_links_costs_zero():
    attention = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]], requires_grad=True)  # key 2 masked for row 1
    labels = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    loss = alignment_loss(attention, labels)
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(attention.grad).all()
    assert alignment_loss(attention, torch.zeros(1, 2, 2)).item() == 0.0


# -- the gradient reaches the model through the supervised head's attention only --------------------------


def aligned_batch():
    """A collated batch of two pairs and links: target token t linked to source token t (and to 0)."""
    items = [(0, [5, 6, 7, 8], [4, 5, 6], [0, 0, 1, 1, 2, 2, 2, 0]), (1, [9, 10], [7], [0, 1])]
    return collate_aligned(items)


def gradients(m: TranslationModule, loss_of) -> dict[str, torch.Tensor]:
    m.zero_grad()
    loss_of(m).backward()
    return {name: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for name, p in m.named_parameters()}


def test_the_alignment_gradient_reaches_the_model_only_through_the_supervised_heads_queries_and_keys():
    torch.manual_seed(0)
    m = module(num_heads=2, num_decoder_layers=3, alignment_layer=2, alignment_head=2, alignment_weight=0.5)
    batch = aligned_batch()
    tokens = token_index_of(batch, PAD)

    def only_alignment(m):
        _, attention = m.model(batch.src, batch.tgt_in, tokens=tokens, alignment_head=m.alignment_head)
        return alignment_loss(attention, batch.alignment)

    grads = gradients(m, only_alignment)
    d, dh = 16, 8  # d_model, head dim
    supervised = grads["model.decoder_layers.1.cross_attn.in_proj.weight"]  # (3D, D): query, key, value
    for block, name in ((0, "query"), (1, "key")):
        head_rows = supervised[block * d + dh : (block + 1) * d]  # head 2 of 2
        other_rows = supervised[block * d : block * d + dh]
        assert head_rows.abs().sum() > 0, name
        assert torch.all(other_rows == 0), name
    assert torch.all(supervised[2 * d :] == 0)  # values: what the head reads, not where it looks
    assert torch.all(grads["model.decoder_layers.1.cross_attn.out_proj.weight"] == 0)
    above = [name for name in grads if name.startswith("model.decoder_layers.2.")]
    assert above and all(torch.all(grads[name] == 0) for name in above)
    assert grads["model.decoder_layers.0.self_attn.in_proj.weight"].abs().sum() > 0  # the queries' inputs
    assert grads["model.encoder_layers.0.self_attn.in_proj.weight"].abs().sum() > 0  # the keys' inputs


def test_the_alignment_term_leaves_the_other_heads_and_the_values_gradients_as_translation_alone_makes_them():
    torch.manual_seed(0)
    m = module(num_heads=2, num_decoder_layers=3, alignment_layer=2, alignment_head=2, alignment_weight=0.5)
    batch = aligned_batch()
    translation_only = gradients(m, lambda m: m._training_losses(batch)[0])
    both = gradients(m, lambda m: m._training_loss(batch))
    d, dh = 16, 8
    for name, grad in both.items():
        if name == "model.decoder_layers.1.cross_attn.in_proj.weight":
            untouched = torch.cat([grad[:dh], grad[d : d + dh], grad[2 * d :]])  # head 1's q, k; all values
            expected = translation_only[name]
            assert torch.equal(untouched, torch.cat([expected[:dh], expected[d : d + dh], expected[2 * d :]]))
            assert not torch.equal(grad[dh:d], expected[dh:d])  # head 2's queries moved
        elif name.startswith(("model.decoder_layers.2.", "model.decoder_layers.1.cross_attn.out_proj",
                              "model.decoder_layers.1.feed_forward")):
            assert torch.equal(grad, translation_only[name]), name


# -- the training step ---------------------------------------------------------------------------------------


def test_the_objective_adds_lambda_times_the_alignment_loss_and_both_are_logged():
    torch.manual_seed(0)
    m = attach(module(num_heads=2, alignment_layer=1, alignment_head=1, alignment_weight=0.25),
               log_every_n_steps=1)
    batch = aligned_batch()
    translation, alignment = m._training_losses(batch)
    loss = m.training_step(batch, 0)
    torch.testing.assert_close(loss, translation + 0.25 * alignment)
    assert m.logged["train/loss"] == translation.item()  # the translation loss, comparable across runs
    assert m.logged["train/alignment_loss"] == alignment.item()
    assert m.hparams.alignment_layer == 1 and m.hparams.alignment_head == 1  # saved with the run


def shifted_loss_by_hand(attention, labels):
    """The shifted alignment loss written out: each row t of ``labels`` (B, T, S) with a link, the token
    tgt_in[t + 1] reads, against row t + 1 of ``attention``, averaged over those rows."""
    B, T, _ = labels.shape
    rows = [(b, t) for b in range(B) for t in range(T - 1) if labels[b, t].sum() > 0]
    log_attention = attention.clamp_min(1e-38).log()
    return -sum((labels[b, t] * log_attention[b, t + 1]).sum() for b, t in rows) / len(rows)


def test_a_shifted_head_learns_each_words_links_on_the_row_of_the_step_that_reads_the_word():
    """alignment_shift (Shift-Att's reading, Chen et al. 2020): row t + 1 of the head, whose input is the
    token row t produces, is scored against row t's links; the first row is never supervised, the
    translation loss and the logits are unchanged."""
    torch.manual_seed(0)
    settings = {"num_heads": 2, "alignment_layer": 1, "alignment_head": 2}
    plain, shifted = module(**settings), module(**settings, alignment_shift=True)
    shifted.load_state_dict(plain.state_dict())
    batch = aligned_batch()
    _, attention = plain.model(batch.src, batch.tgt_in, tokens=token_index_of(batch, PAD),
                               alignment_head=plain.alignment_head)  # (B, T, S)
    by_hand = shifted_loss_by_hand(attention, batch.alignment)
    translation, alignment = shifted._training_losses(batch)
    torch.testing.assert_close(alignment, by_hand)
    plain_translation, plain_alignment = plain._training_losses(batch)
    assert torch.equal(translation, plain_translation)
    assert not torch.isclose(alignment, plain_alignment)
    assert shifted.hparams.alignment_shift and not plain.hparams.alignment_shift  # saved with the run


def test_null_rows_point_at_the_sources_end_of_sentence_and_padding_rows_stay_free():
    # Pair 0: 4 source tokens + EOS, 3 target tokens + EOS, token 1 unlinked; pair 1: 2 + EOS and 1 + EOS.
    items = [(0, [5, 6, 7, 8], [4, 5, 6], [0, 0, 2, 2]), (1, [9, 10], [7], [0, 1])]
    batch = collate_aligned(items)
    labels = with_null(batch.alignment, batch.src, batch.tgt_out, PAD)
    eos = {0: 4, 1: 2}  # the last source token before the padding
    expected = batch.alignment.clone()
    for b, t in [(0, 1), (0, 3), (1, 1)]:  # the unlinked rows of real tokens, the targets' EOS among them
        expected[b, t, eos[b]] = 1.0
    torch.testing.assert_close(labels, expected)
    assert labels[1, 2:].sum() == 0 and labels[1, 3:].sum() == 0  # pair 1's padding rows
    assert torch.equal(labels[0, 0], batch.alignment[0, 0])  # a linked row is left as it was


def test_with_null_rows_the_head_is_trained_where_it_was_free_and_nothing_else_changes():
    """alignment_null: the loss counts the unlinked rows too (each toward the source's EOS), its gradient
    reaches the head through them, and the translation loss is the same."""
    torch.manual_seed(0)
    settings = {"num_heads": 2, "alignment_layer": 1, "alignment_head": 2, "alignment_shift": True}
    plain, null = module(**settings), module(**settings, alignment_null=True)
    null.load_state_dict(plain.state_dict())
    batch = aligned_batch()
    _, attention = plain.model(batch.src, batch.tgt_in, tokens=token_index_of(batch, PAD),
                               alignment_head=plain.alignment_head)  # (B, T, S)
    by_hand = shifted_loss_by_hand(attention, with_null(batch.alignment, batch.src, batch.tgt_out, PAD))
    translation, alignment = null._training_losses(batch)
    torch.testing.assert_close(alignment, by_hand)
    plain_translation, plain_alignment = plain._training_losses(batch)
    assert torch.equal(translation, plain_translation)
    assert not torch.isclose(alignment, plain_alignment)
    # A batch whose pairs have no link at all: free without the option, trained toward EOS with it.
    unlinked = collate_aligned([(0, [5, 6, 7], [4, 5], []), (1, [9], [7, 8], [])])
    assert plain._training_losses(unlinked)[1].item() == 0.0
    null.zero_grad()
    _, loss = null._training_losses(unlinked)
    loss.backward()
    queries = null.model.decoder_layers[0].cross_attn.in_proj.weight.grad[8:16]  # head 2 of 2's queries
    assert loss.item() > 0 and queries.abs().sum() > 0
    assert null.hparams.alignment_null and not plain.hparams.alignment_null  # saved with the run


@pytest.mark.parametrize(("full_context", "null"), [(False, False), (True, False), (False, True)])
def test_the_supervised_training_loss_compiles_without_a_graph_break(full_context, null):
    """The head's weights and the loss trace into the one graph of the training forward (packed here: a
    graph break would split the compiled step, and usually marks a host sync); the full-context pass and the
    null rows too."""
    torch.manual_seed(0)
    m = module(num_heads=2, num_decoder_layers=2, alignment_layer=1, alignment_head=2,
               alignment_full_context=full_context, alignment_null=null)
    batch = aligned_batch()
    tokens = batch.src_tokens.numel() + batch.tgt_tokens.numel()
    assert 1 - tokens / (batch.src.numel() + batch.tgt_in.numel()) >= PACK_FROM
    explained = torch._dynamo.explain(m._training_loss)(batch)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


FULL = {"alignment_layer": 1, "alignment_head": 1, "alignment_full_context": True}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alignment_layer": 1}, "alignment_layer and alignment_head name one head together"),
        ({"alignment_layer": 0, "alignment_head": 1}, "alignment_layer counts from 1 to num_decoder_layers"),
        ({"alignment_layer": 1, "alignment_head": 3}, "alignment_head counts from 1 to num_heads=2, got 3"),
        ({"alignment_weight": -0.1}, "alignment_weight must be a number >= 0"),
        ({**FULL, "positional": "alibi"}, "positional=alibi measures decoder distances one way only"),
        ({**FULL, "positional": "relative"}, "positional=relative measures decoder distances one way only"),
    ],
)
def test_bad_alignment_settings_name_the_setting(overrides, message):
    with pytest.raises(ValueError, match=message):
        module(**overrides)


def toy_task(**overrides) -> TranslationDataModule:
    settings = {"dataset": "toy", "toy": ToyOptions(train_size=40, val_size=4, test_size=2),
                "max_tokens": 192, "eval_max_tokens": 192}
    return TranslationDataModule(**{**settings, **overrides})


@pytest.fixture
def gold_links(tmp_path):
    """The toy training pairs' gold links as an aligner's file (0-based, one line a pair)."""
    path = tmp_path / "train.align"
    write_links_file(path, [set(pair.alignment) for pair in toy_task()._raw_splits()["train"]])
    return path


def toy_module(dm, **overrides):
    torch.manual_seed(0)
    return module(src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size, num_heads=2,
                  num_decoder_layers=2, lr=0.01, **overrides)


def train(m, dm, steps: int = 4):
    trainer = cpu_trainer(max_steps=steps, limit_val_batches=0, log_every_n_steps=2)
    trainer.fit(m, datamodule=dm)
    return trainer


class WithoutGuidedAlignment(TranslationModule):
    """The training step as it was before guided alignment: the label-smoothed loss of the plain forward."""

    def training_step(self, batch, batch_idx):
        tokens = token_index_of(batch, self.config.pad_id)
        logits = self.model(batch.src, batch.tgt_in, tokens=tokens)
        loss = self.loss(logits, tokens.labels(batch.tgt_out), self.hparams.label_smoothing)
        self._watch_loss(loss)
        if self._is_log_step():
            self.log("train/loss", loss.detach().cpu(), batch_size=batch.src.size(0))
        self._count_tokens(batch)
        return loss


def test_with_the_option_off_training_is_what_it_was_bit_for_bit(gold_links):
    """Four steps of the toy task (packed batches among them): the same losses and the same weights as the
    training step without the feature; and the same again with a supervised head whose weight is 0, so the
    head's own pass changes nothing the translation computes."""
    dm = toy_task()
    runs = []
    for make, data, overrides in (
        (WithoutGuidedAlignment, dm, {}),
        (TranslationModule, dm, {}),
        (TranslationModule, toy_task(alignment_labels=str(gold_links)),
         {"alignment_layer": 1, "alignment_head": 2, "alignment_weight": 0.0}),
    ):
        torch.manual_seed(0)
        m = make(src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size, d_model=16, num_heads=2,
                 num_encoder_layers=1, num_decoder_layers=2, d_ff=32, warmup_steps=2, lr=0.01, **overrides)
        trainer = train(m, data)
        runs.append((trainer.logged_metrics["train/loss"], [p.detach().clone() for p in m.parameters()]))
    (loss, weights), *others = runs
    for other_loss, other_weights in others:
        assert torch.equal(other_loss, loss)
        assert all(torch.equal(a, b) for a, b in zip(weights, other_weights, strict=True))


@pytest.mark.parametrize("null", [False, True])
def test_guided_training_logs_its_alignment_loss_and_never_waits_for_the_device(gold_links, null):
    dm = toy_task(alignment_labels=str(gold_links))
    m = toy_module(dm, alignment_layer=1, alignment_head=2, alignment_null=null)
    watch = WatchOrdinarySteps()
    trainer = cpu_trainer(max_steps=5, limit_val_batches=0, log_every_n_steps=4, callbacks=[watch])
    trainer.fit(m, datamodule=dm)
    assert watch.steps == [1, 2, 4]
    assert watch.found == [], "\n".join(watch.found)
    logged = trainer.logged_metrics
    assert logged["train/alignment_loss"] > 0 and torch.isfinite(logged["train/loss"])


def test_a_head_without_labels_or_labels_without_a_head_stop_the_run_before_it_starts(gold_links):
    dm = toy_task()
    with pytest.raises(ValueError, match="supervise a head with the links of --data.alignment_labels"):
        train(toy_module(dm, alignment_layer=1, alignment_head=1), dm)
    labelled = toy_task(alignment_labels=str(gold_links))
    with pytest.raises(ValueError, match="needs a head to supervise: give --model.alignment_layer"):
        train(toy_module(labelled), labelled)


@pytest.mark.parametrize("given", ["head", "labels", "bad labels"])
def test_train_py_stops_a_mismatched_or_badly_labelled_run_in_one_line(tmp_path, given):
    from tests.conftest import train_tiny

    bad = tmp_path / "train.align"
    bad.write_text("0-0\n" * 3 + "0-99\n" + "0-0\n" * 396, encoding="utf-8")  # tiny.yaml: 400 pairs
    head = ["--model.alignment_layer", "1", "--model.alignment_head", "1"]
    options, message = {
        "head": (head, "^error: --model.alignment_layer and --model.alignment_head supervise a head"),
        "labels": (["--data.alignment_labels", str(bad)], "^error: --data.alignment_labels .* needs a head"),
        "bad labels": ([*head, "--data.alignment_labels", str(bad)], f"^error: {bad}:4: link 0-99 is past"),
    }[given]
    with pytest.raises(SystemExit, match=message):
        train_tiny(tmp_path, "--trainer.max_steps", "1", *options)


# -- the labels: read, mapped to tokens, collated ------------------------------------------------------------


def test_collated_labels_spread_each_targets_links_evenly_and_leave_unlinked_rows_zero():
    labels = alignment_targets([[0, 0, 1, 1, 1, 2], []], target_length=3, source_length=4)
    expected = torch.zeros(2, 3, 4)
    expected[0, 0, 0] = 1.0
    expected[0, 1, 1] = expected[0, 1, 2] = 0.5
    torch.testing.assert_close(labels, expected)


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (["0-0", "0-0 1-x"], 2, "link '1-x' does not join two word positions"),
        (["0-0", "0-0 4-1"], 2, "link 4-1 is past the end of its pair, which has 2 source and 2 target"),
        (["0-0"], 2, "ends after 1 lines of links, but there are 2 training pairs"),
        (["0-0", "1-1", "0-0"], 3, "goes on after 2 lines of links, but there are 2 training pairs"),
    ],
)
def test_a_bad_labels_file_is_one_line_naming_its_file_and_line(tmp_path, lines, line, message):
    path = tmp_path / "train.align"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = [Pair("a b", "x y"), Pair("c d", "z w")]
    with pytest.raises(CorpusError, match=f"^{path}:{line}: ") as caught:
        read_alignment_labels(path, pairs)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_labels_file_stops_the_data_module_naming_its_line(tmp_path):
    path = tmp_path / "train.align"
    path.write_text("0-0\n" * 3 + "0-99\n" + "0-0\n" * 36, encoding="utf-8")
    with pytest.raises(CorpusError, match=f"^{path}:4: link 0-99 is past the end of its pair"):
        toy_task(alignment_labels=str(path)).train_dataloader()


def test_word_links_become_token_links_every_piece_of_a_target_word_taking_its_words_links():
    # Source words 0 (two tokens), 1; target words 0, 1 (three pieces), 2 (no link); a lone piece of no word.
    source_words, target_words = [0, 0, 1], [0, 1, 1, -1, 1, 2]
    assert token_links({(0, 1), (1, 0)}, source_words, target_words) == [
        (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (4, 0), (4, 1),
    ]


def labelled_rows(dm) -> list[tuple[list[str], list[str], torch.Tensor]]:
    """Each training pair's source and target tokens and its (T, S) labels, from one unshuffled batch."""
    batch = next(iter(dm.dataloader("train", shuffle=False)))
    rows = []
    for b, index in enumerate(batch.index.tolist()):
        _, source, target = dm._encoded_split("train")[index]
        labels = batch.alignment[b, : len(target), : len(source)]
        rows.append((dm.src_tokenizer.tokens(source), dm.tgt_tokenizer.tokens(target), labels))
    return rows


def test_english_pieces_of_a_word_share_its_links_spread_over_the_source_words_pieces(tmp_path):
    """A BPE too small for whole words: 'unbelievably' and 'unglaublich' are several pieces each; a lone
    Metaspace piece spells no word, and has no link."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    sources, targets = "that is unbelievably good", "das ist unglaublich gut"
    for split in ("train", "val", "test"):
        (folder / f"{split}.en").write_text(f"{sources}\n" * 3, encoding="utf-8")
        (folder / f"{split}.de").write_text(f"{targets}\n" * 3, encoding="utf-8")
    links = tmp_path / "train.align"
    links.write_text("0-0 1-1 2-2 3-3\n" * 3, encoding="utf-8")
    dm = TranslationDataModule(dataset="parallel", path=str(folder), source_lang="en", target_lang="de",
                               vocab_size=30, alignment_labels=str(links))
    source, target, labels = labelled_rows(dm)[0]
    word_of = {"source": words_of_pieces(source, sources), "target": words_of_pieces(target, targets)}
    assert word_of["target"].count(2) > 1 and word_of["source"].count(2) > 1  # the long words are pieces
    assert -1 in word_of["target"] and -1 in word_of["source"]  # lone ▁ pieces
    for t, word in enumerate(word_of["target"]):
        pieces = [s for s, w in enumerate(word_of["source"]) if w == word and word != -1]
        expected = torch.zeros(len(source))
        expected[pieces] = 1.0 / max(len(pieces), 1)
        torch.testing.assert_close(labels[t], expected)


def words_of_pieces(pieces: list[str], text: str) -> list[int]:
    """Per piece, the index of the word of ``text`` its letters spell, read off the pieces' own strings;
    -1 for a lone Metaspace ``▁``, which spells none."""
    words, owners, word, used = text.split(), [], 0, 0
    for piece in pieces:
        letters = piece.replace("▁", "")
        if not letters:
            owners.append(-1)
            continue
        if used == len(words[word]):
            word, used = word + 1, 0
        owners.append(word)
        used += len(letters)
    return owners


def test_japanese_characters_of_a_word_each_take_part_of_its_link(tmp_path):
    """Japanese written as MeCab's words, a piece per Han or Kana character (``pre_tokenize="cjk"``): 学生
    (student) is two pieces, and the English 'student' attends half to each; は and 'a' have no link, so
    their rows are empty."""
    folder = tmp_path
    for split in ("train", "val", "test"):
        (folder / f"{split}.ja").write_text("私 は 学生 です\n" * 3, encoding="utf-8")
        (folder / f"{split}.en").write_text("I am a student\n" * 3, encoding="utf-8")
    links = folder / "train.align"
    links.write_text("0-0 3-1 2-3\n" * 3, encoding="utf-8")
    dm = TranslationDataModule(dataset="parallel", path=str(folder), source_lang="ja", target_lang="en",
                               vocab_size=60, pre_tokenize="cjk", alignment_labels=str(links))
    source, target, labels = labelled_rows(dm)[0]
    column = {character: [s for s, token in enumerate(source) if character in token]
              for character in "私は学生です"}
    row = {word: next(t for t, token in enumerate(target) if token.strip("▁") == word)
           for word in ("I", "am", "a", "student")}
    assert len(column["学"]) == len(column["生"]) == 1 and column["学"] != column["生"]
    student = labels[row["student"]]
    assert student[column["学"][0]] == student[column["生"][0]] == 0.5
    assert labels[row["I"]][column["私"][0]] == 1.0
    assert labels[row["a"]].sum() == 0 and labels[:, column["は"][0]].sum() == 0
    assert labels[row["am"]][column["で"]].sum() + labels[row["am"]][column["す"]].sum() == pytest.approx(1.0)


# -- eflomal's labels: made on the training pairs, cached beside the tokenizers ---------------------------


def test_eflomal_labels_are_cached_beside_the_tokenizers_and_reused(tmp_path, monkeypatch):
    pytest.importorskip("eflomal")
    dm = toy_task(alignment_labels="eflomal")
    first = labelled_rows(dm)
    dm.save_tokenizers(tmp_path)
    cached = list(tmp_path.glob("alignment_eflomal_*.txt"))
    assert len(cached) == 1
    assert len(cached[0].read_text(encoding="utf-8").splitlines()) == len(dm.pairs("train"))

    def no_eflomal(pairs):
        raise AssertionError("eflomal ran again")

    monkeypatch.setattr("data.alignment_labels.eflomal_links", no_eflomal)
    again = labelled_rows(toy_task(alignment_labels="eflomal", tokenizer_dir=str(tmp_path)))
    assert all(torch.equal(a[2], b[2]) for a, b in zip(first, again, strict=True))
    assert sum(labels.sum() for _, _, labels in first) > 0


def test_eflomal_labels_without_eflomal_are_refused_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "eflomal" else real(name, *args))
    with pytest.raises(ValueError, match="alignment_labels=eflomal needs eflomal: pip install eflomal"):
        toy_task(alignment_labels="eflomal")
