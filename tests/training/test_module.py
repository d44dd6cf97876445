"""The training system: learning-rate schedules, loss, optimiser, translation scores, validation, seeding.

Most tests need no Trainer; the few that do run a CPU Trainer for a handful of batches of a tiny copy task.
"""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from analysis.metrics import score_translations
from data.special import SPECIALS
from tests.conftest import BOS, EOS, PAD
from tests.helpers.tiny_module import (
    OneProcess,
    attach,
    copy_module,
    copy_task,
    cpu_trainer,
    module,
    padded_batch,
)
from training.module import NonFiniteLossError, TranslationModule, dropout_seed


def test_inverse_sqrt_schedule_warms_up_linearly_then_decays():
    m = module(schedule="inverse_sqrt")
    factors = [m.lr_schedule.factor(step) for step in range(8)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4:] == pytest.approx(
        [math.sqrt(4 / 5), math.sqrt(4 / 6), math.sqrt(4 / 7), math.sqrt(4 / 8)]
    )


def test_cosine_schedule_reaches_zero_at_the_last_step():
    m = module(schedule="cosine")
    m._trainer = SimpleNamespace(estimated_stepping_batches=12)  # the Trainer's estimate during fit
    assert m.lr_schedule.factor(3) == 1.0
    assert m.lr_schedule.factor(7) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert m.lr_schedule.factor(11) == pytest.approx(0.0)


def test_cosine_schedule_needs_a_last_step():
    m = module(schedule="cosine")
    m._trainer = SimpleNamespace(estimated_stepping_batches=math.inf)  # no max_epochs, no max_steps
    assert m.lr_schedule.factor(3) == 1.0  # warm-up needs no end
    with pytest.raises(ValueError, match="bound the run with --trainer.max_epochs or --trainer.max_steps"):
        m.lr_schedule.factor(4)


def test_constant_schedule_after_warm_up():
    m = module(schedule="constant")
    assert [m.lr_schedule.factor(s) for s in (0, 3, 100)] == [0.25, 1.0, 1.0]


def test_loss_ignores_padding_and_accepts_packed_logits():
    m = module()
    logits = torch.randn(2, 3, 11)
    targets = torch.tensor([[5, 6, 0], [7, 0, 0]])
    keep = targets != PAD
    full = m.loss(logits, targets)
    packed = m.loss(logits[keep], targets[keep])
    torch.testing.assert_close(full, packed)
    torch.testing.assert_close(full, torch.nn.functional.cross_entropy(logits[keep], targets[keep]))


@pytest.mark.parametrize(
    "overrides, message", [({"label_smoothing": 1.0}, "label_smoothing"), ({"lr": 0.0}, "lr")]
)
def test_bad_settings_name_the_setting(overrides, message):
    with pytest.raises(ValueError, match=message):
        module(**overrides)


def test_optimizer_decays_matrices_only_and_uses_adam_beta2():
    m = module(weight_decay=0.05, adam_beta2=0.97)
    optimizer = m.configure_optimizers()["optimizer"]
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))
    assert optimizer.defaults["betas"] == (0.9, 0.97)


def test_training_loss_is_the_label_smoothed_mean_over_real_target_tokens():
    torch.manual_seed(0)
    m = attach(module(label_smoothing=0.1))
    batch = padded_batch()
    loss = m.training_step(batch, 0)
    logits = m.model(batch.src, batch.tgt_in)  # (B, T, V)
    expected = F.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD, label_smoothing=0.1
    )  # mean over the 6 non-pad targets
    torch.testing.assert_close(loss, expected)
    unsmoothed = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)
    assert not torch.allclose(loss, unsmoothed)


def test_tokens_per_second_counts_source_and_target_tokens_without_padding(monkeypatch):
    clock = iter([10.0, 12.0])
    monkeypatch.setattr("training.module.time", SimpleNamespace(perf_counter=lambda: next(clock)))
    m = attach(module(), log_every_n_steps=1)
    batch = padded_batch()
    m._count_tokens(batch)  # starts the clock
    m._count_tokens(batch)
    # src: 5 + 3 tokens with EOS, tgt_out: 4 + 2; the padded batch holds 10 + 8 positions. Over 2 seconds:
    assert m.logged["train/tokens_per_s"] == (8 + 6) / 2


class TwinRank(OneProcess):
    """The collectives as rank 0 of two sees them when rank 1 contributes ``other`` to every sum."""

    def __init__(self, other):
        self.other, self.ops = other, []

    def reduce(self, tensor, reduce_op="mean"):
        self.ops.append(reduce_op)
        assert reduce_op == "sum"
        return tensor + self.other(tensor)


def test_tokens_per_second_is_the_total_over_ranks(monkeypatch):
    clock = iter([10.0, 12.0])
    monkeypatch.setattr("training.module.time", SimpleNamespace(perf_counter=lambda: next(clock)))
    twin = TwinRank(lambda tensor: torch.full_like(tensor, 100.0))  # rank 1 counted 100 tokens
    m = attach(module(), log_every_n_steps=1, strategy=twin, world_size=2)
    m._count_tokens(padded_batch())  # starts the clock
    m._count_tokens(padded_batch())
    assert m.logged["train/tokens_per_s"] == (8 + 6 + 100) / 2


def test_a_non_finite_loss_on_another_rank_stops_this_one_with_its_step_and_rank():
    def rank1_went_bad_at_step_7(tensor):  # (2 ranks, (first bad step or -1, loss))
        other = torch.zeros_like(tensor)
        other[1] = torch.tensor([7.0, float("nan")])
        return other

    m = attach(module(), global_step=9, strategy=TwinRank(rank1_went_bad_at_step_7), world_size=2)
    m._watch_loss(torch.tensor(2.5))  # this rank's losses are fine
    with pytest.raises(NonFiniteLossError, match=r"training loss is nan at step 7 on rank 1; stopping"):
        m._stop_if_loss_was_not_finite()
    for hook in (m.on_validation_start, m.on_train_end, lambda: m.on_save_checkpoint({})):
        with pytest.raises(NonFiniteLossError):
            hook()
    healthy = attach(module(), strategy=TwinRank(lambda tensor: torch.tensor([[0.0, 0.0], [-1.0, 0.0]])),
                     world_size=2)
    healthy._watch_loss(torch.tensor(2.5))
    healthy._stop_if_loss_was_not_finite()  # every rank fine: nothing raised


def test_the_loss_is_watched_without_a_sync_and_checked_on_log_steps(monkeypatch):
    torch.manual_seed(0)
    m = attach(module(), global_step=2, log_every_n_steps=5)
    batch = padded_batch()
    m.loss = lambda *args, **kwargs: torch.tensor(float("inf"), requires_grad=True)
    m.training_step(batch, 0)  # step 3 of every 5th: remembered, not raised
    assert int(m._bad_loss_step) == 2
    attach(m, global_step=3, log_every_n_steps=5).training_step(batch, 0)  # later: the first one is kept
    with pytest.raises(NonFiniteLossError, match=r"training loss is inf at step 2; stopping"):
        attach(m, global_step=4, log_every_n_steps=5).training_step(batch, 0)  # a log step


def test_grad_norm_is_the_norm_of_every_gradient_as_one_vector_logged_every_nth_step():
    torch.manual_seed(0)
    m = attach(module(tie_output_embedding=True), global_step=3, log_every_n_steps=4)
    batch = padded_batch()
    m.loss(m.model(batch.src, batch.tgt_in), batch.tgt_out).backward()
    m.on_before_optimizer_step(None)
    gradients = torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])  # tied: once
    torch.testing.assert_close(m.logged["train/grad_norm"], gradients.norm())
    attach(m, global_step=4, log_every_n_steps=4).on_before_optimizer_step(None)  # step 5 of every 4th
    assert "train/grad_norm" not in m.logged


def test_dropout_seed_follows_the_training_step():
    m = module()
    m._base_seed = 100
    draws = []
    for step in (3, 4):
        attach(m, global_step=step).on_train_batch_start(None, 0)
        draws.append(torch.rand(3))
    for step, drawn in zip((3, 4), draws):
        torch.manual_seed(100 + step)
        assert torch.equal(drawn, torch.rand(3))


def dropout_mask(m, *, step, rank):
    """The dropout mask the model draws at training step ``step`` on process ``rank`` (simulated, no DDP)."""
    attach(m, global_step=step, global_rank=rank).on_train_batch_start(None, 0)
    m.model.embed_dropout.train()
    return m.model.embed_dropout(torch.ones(4, 64)) != 0


def test_each_process_draws_its_own_dropout_masks_and_each_draws_them_again_on_resume():
    m = module(dropout=0.5)
    for base_seed in (100, 2**40 + 100):  # the CPU generator reads the low 32 bits of a seed only
        m._base_seed = base_seed
        masks = {rank: dropout_mask(m, step=7, rank=rank) for rank in range(4)}
        for rank in range(1, 4):
            assert not torch.equal(masks[rank], masks[0]), f"rank {rank} repeats rank 0's mask"
        assert not torch.equal(masks[1], masks[2])
        for rank in range(4):  # a resumed run draws the same masks at the same step
            assert torch.equal(dropout_mask(m, step=7, rank=rank), masks[rank])
        assert not torch.equal(dropout_mask(m, step=8, rank=0), masks[0])
        seeds = [dropout_seed(base_seed, step, rank) % 2**32 for step in (0, 7) for rank in range(256)]
        assert len(set(seeds[:256])) == len(set(seeds[256:])) == 256  # ranks never share a step's seed


def test_decoding_runs_at_the_first_validation_then_every_nth_epoch_and_never_in_the_sanity_check():
    def due(m, epoch, **kwargs):
        attach(m, current_epoch=epoch, **kwargs)._trainer.__dict__.update(should_stop=False, max_steps=-1,
                                                                           max_epochs=-1)
        return m._decoding_this_validation()

    m = module(decode_every_n_epochs=2)
    assert not due(m, 0, sanity_checking=True)
    assert due(m, 0)  # the first validation, whatever the period
    m._decoded_step = 6  # once it has decoded
    assert [due(m, e) for e in range(4)] == [False, True, False, True]
    assert not due(m, 1, sanity_checking=True)
    assert not due(module(decode_every_n_epochs=0), 0)


# -- with a Trainer, on the copy task ------------------------------------------------------------------------


def test_learning_rate_follows_the_schedule_at_every_optimizer_step():
    dm = copy_task()
    m = copy_module(dm, lr=0.01, warmup_steps=10)
    trainer = cpu_trainer(max_steps=3, limit_val_batches=0)
    trainer.fit(m, datamodule=dm)
    assert trainer.global_step == 3
    # The schedule at optimiser step 3: warm-up, 4 / 10 of the peak.
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01 * 4 / 10)


def test_validation_loss_is_the_unsmoothed_nll_per_target_token():
    dm = copy_task()
    m = copy_module(dm, label_smoothing=0.1, decode_every_n_epochs=0)
    metrics = cpu_trainer().validate(m, datamodule=dm, verbose=False)[0]
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in dm.val_dataloader():
            logits = m.model(batch.src, batch.tgt_in)  # (B, T, V)
            flat = logits.flatten(0, 1), batch.tgt_out.flatten()
            total += F.cross_entropy(*flat, ignore_index=PAD, reduction="sum")
            tokens += int((batch.tgt_out != PAD).sum())
    assert metrics["val/loss"] == pytest.approx(total.item() / tokens, rel=1e-5)
    assert metrics["val/ppl"] == pytest.approx(math.exp(total.item() / tokens), rel=1e-5)


def test_a_batch_repeated_by_the_sampler_counts_once_in_the_validation_loss():
    """A distributed sampler repeats a few batches so that every rank gets as many; a sentence scored twice
    counts once, and the loss equals that of each sentence scored once."""
    dm = copy_task()
    m = copy_module(dm, decode_every_n_epochs=0)
    metrics = cpu_trainer().validate(m, datamodule=dm, verbose=False)[0]
    batches = list(dm.val_dataloader())
    assert len(batches) >= 2 and len(batches[0].index) != len(batches[-1].index)
    attach(m, sanity_checking=True)
    m.on_validation_epoch_start()
    with torch.no_grad():
        for batch in [*batches, batches[0], batches[0]]:  # the first batch wrapped around, twice
            m.validation_step(batch, 0)
    m.on_validation_epoch_end()
    assert m.logged["val/loss"] == pytest.approx(metrics["val/loss"], rel=1e-7)  # logged as float32
    assert m.logged["val/ppl"] == pytest.approx(metrics["val/ppl"], rel=1e-6)


def test_validation_scores_every_sentence_against_its_own_reference_in_corpus_order():
    dm = copy_task()
    m = copy_module(dm, decode_max_sentences=None)
    m.model.generate = lambda src, **kwargs: src  # echo the source: a perfect copy, EOS and padding included
    metrics = cpu_trainer().validate(m, datamodule=dm, verbose=False)[0]
    pairs = dm.pairs("val")
    assert [len(b.index) for b in dm.val_dataloader()] != [len(pairs)]  # several batches, sorted by length
    assert m.last_decoded == [(i, pair.target) for i, pair in enumerate(pairs)]
    assert (metrics["val/bleu"], metrics["val/chrf"], metrics["val/exact_match"]) == (100.0, 100.0, 1.0)


def test_validation_decodes_the_first_decode_max_sentences_of_the_split_whatever_the_batch_order():
    dm = copy_task()
    m = copy_module(dm, decode_max_sentences=5)
    m.model.generate = lambda src, **kwargs: src
    metrics = cpu_trainer().validate(m, datamodule=dm, verbose=False)[0]
    first_batches = [i for b in list(dm.val_dataloader())[:2] for i in b.index.tolist()]
    assert sorted(first_batches)[:5] != [0, 1, 2, 3, 4]  # batches sorted by length do not start with them
    assert [i for i, _ in m.last_decoded] == [0, 1, 2, 3, 4]
    assert (metrics["val/bleu"], metrics["val/exact_match"]) == (100.0, 1.0)


# -- translation scores --------------------------------------------------------------------------------------


HYPOTHESES = ["the cat sat on the mat", "a dog", "every  queen walked "]
REFERENCES = ["the cat sat on a mat", "the dog barked", "every queen walked"]


def test_bleu_and_chrf_are_corpus_scores_not_sentence_averages():
    import sacrebleu

    scores = score_translations(HYPOTHESES, REFERENCES, tokenize="13a")
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)  # not chrF++
    sentence_bleu = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(HYPOTHESES, REFERENCES)]
    assert scores.bleu != pytest.approx(sum(sentence_bleu) / 3)
    assert scores.num_sentences == 3


def test_exact_match_ignores_spacing_only():
    scores = score_translations(HYPOTHESES, REFERENCES, tokenize="13a")
    assert scores.exact_match == pytest.approx(1 / 3)  # the third one


def test_bleu_tokenizes_detokenized_text_with_13a():
    scores = score_translations(
        ["the cat sat on the big mat."], ["the cat sat on the big mat ."], tokenize="13a"
    )
    assert scores.bleu == pytest.approx(100.0)
    assert "tok:13a" in scores.signature


def test_architecture_arguments_are_the_config_fields_with_the_config_defaults():
    import inspect
    from dataclasses import MISSING, fields

    from model import TransformerConfig

    parameters = inspect.signature(TranslationModule.__init__).parameters
    for field in fields(TransformerConfig):
        assert field.name in parameters, field.name
        if field.default is not MISSING:  # the vocabulary sizes and special ids come from the data
            assert parameters[field.name].default == field.default, field.name
    settings = {f.name: getattr(TransformerConfig, f.name) for f in fields(TransformerConfig)
                if f.default is not MISSING}
    module = TranslationModule(src_vocab_size=13, tgt_vocab_size=11, d_model=32, positional="alibi")
    ids = {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS}  # the data's, which the module defaults to
    changed = {"src_vocab_size": 13, "tgt_vocab_size": 11, "d_model": 32, "positional": "alibi"}
    assert module.config == TransformerConfig(**{**settings, **ids, **changed})


def test_the_special_ids_are_spelled_once_in_data_special():
    """The model has no ids of its own: a config must be given them, and the training module's defaults (for
    a module built by hand, or a checkpoint saved without them) are the tokenizers' ids of data/special.py."""
    import inspect

    from model import TransformerConfig

    with pytest.raises(TypeError, match="pad_id"):
        TransformerConfig(src_vocab_size=13, tgt_vocab_size=11)  # type: ignore[call-arg]
    parameters = inspect.signature(TranslationModule.__init__).parameters
    defaults = tuple(parameters[name].default for name in ("pad_id", "bos_id", "eos_id"))
    assert defaults == (SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id)
    config = TranslationModule(src_vocab_size=13, tgt_vocab_size=11).config
    assert (config.pad_id, config.bos_id, config.eos_id) == defaults


def test_validation_sums_keep_the_token_losses_float32_would_round_away():
    """Summed over a whole split, the NLL reaches magnitudes where float32 rounds away whole token losses
    (2**24 + 1 == 2**24 in float32): the per-sentence and split sums are float64."""
    m = attach(module(decode_every_n_epochs=0))
    batch = padded_batch()
    keep = batch.tgt_out != PAD
    assert keep.sum(dim=1).tolist() == [4, 2]  # the targets and their EOS
    big = float(2**24)
    token_nll = torch.tensor([big, 1.0, 1.0, 1.0, 1.0, 1.0])  # float32, exact; row 0 first, then row 1
    m.loss = lambda logits, targets, reduction: token_nll
    m.on_validation_epoch_start()
    with torch.no_grad():
        m.validation_step(batch, 0)
    m.on_validation_epoch_end()
    assert m._validation_totals().tolist() == [big + 5, 6]
    assert m.logged["val/loss"] == (big + 5) / 6
    assert torch.tensor([big, 1.0]).sum().item() == big  # what float32 sums would have kept
