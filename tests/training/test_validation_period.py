"""Attention maps and validation BLEU, logged every N epochs, come also at the first validation and at the
end of training, whatever N: a run shorter than N epochs shows in the ATTENTION tab from its first validation,
and its last weights are drawn and scored however training stopped."""

import json
from types import SimpleNamespace

import pytest
from tensorboard.util import tensor_util

from tests.conftest import read_events, train_tiny
from training.module import due_at_validation, last_validation
from viz.tab.metadata import RUN_TAG, sentence_tag

# configs/tiny.yaml cut to 2 batches an epoch: one validation at each epoch's end (steps 2, 4, 6). Lightning
# logs a validation's scalars at the count of batches stepped before its epoch's last: the maps' step less 1.
QUIET = ("--trainer.limit_train_batches", "2", "--attention.every_n_epochs", "5",
         "--model.decode_every_n_epochs", "5", "--attention.stats_sentences", "0",
         "--attention.explanation_sentences", "0", "--attention.explain_probes", "false",
         "--attention.per_head", "false")


def logged_steps(run_dir) -> tuple[list[int], list[int]]:
    """(steps of the first probe's cross maps, steps of val/bleu), each step as often as it was logged."""
    events = read_events(run_dir)
    maps = [event.step for event in events.Tensors(sentence_tag(0, "cross"))]
    return sorted(maps), sorted(event.step for event in events.Scalars("val/bleu"))


def test_a_run_shorter_than_the_period_logs_at_its_first_and_last_validation_only(tmp_path):
    run = train_tiny(tmp_path, "--trainer.max_epochs", "3", *QUIET)
    maps, bleu = logged_steps(run)
    assert maps == [2, 6]  # epochs 1 and 3; not epoch 2, and the last once
    assert bleu == [1, 5]
    # As training starts, a summary that shows the tab and lists the run before its first maps.
    (start,) = read_events(run).Tensors(RUN_TAG)
    assert start.step == 0
    assert json.loads(tensor_util.make_ndarray(start.tensor_proto).item()) == {"every_n_epochs": 5}


def test_a_run_stopped_between_validations_logs_its_last_weights_at_the_end(tmp_path):
    # max_steps ends the run in its second epoch, where no validation comes (an early stop decided after a
    # validation that did not log ends the same way): the end of training logs once more.
    run = train_tiny(tmp_path, "--trainer.max_epochs", "3", "--trainer.max_steps", "3", *QUIET)
    maps, bleu = logged_steps(run)
    assert maps == [2, 3]
    assert bleu == [1, 3]  # the end's own, at the final step
    events = read_events(run)
    (final,) = events.Scalars("final/bleu")  # the HPARAMS tab's final BLEU is that of the last weights
    assert final.value == pytest.approx(events.Scalars("val/bleu")[-1].value)


def trainer(epoch=0, *, step=6, should_stop=False, max_epochs=10, max_steps=-1, epoch_ends=True,
            sanity=False):
    """The Trainer attributes the rule reads, at a validation of epoch ``epoch`` (0-based)."""
    batches = 6
    ready = SimpleNamespace(ready=batches if epoch_ends else 2)
    progress = SimpleNamespace(is_last_batch=epoch_ends, current=ready)
    return SimpleNamespace(
        current_epoch=epoch, global_step=step, should_stop=should_stop, max_epochs=max_epochs,
        max_steps=max_steps, sanity_checking=sanity, num_training_batches=batches,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)),
    )


def test_the_last_validation_is_known_when_the_run_was_asked_to_stop_or_reaches_its_limits():
    assert not last_validation(trainer(3))
    assert last_validation(trainer(3, should_stop=True))  # max_time's timer, or a callback, asked to stop
    assert last_validation(trainer(3, step=30, max_steps=30))
    assert not last_validation(trainer(3, step=29, max_steps=30))
    assert last_validation(trainer(9))  # the end of the last epoch of max_epochs
    assert not last_validation(trainer(9, epoch_ends=False))  # a validation inside it (val_check_interval)
    assert not last_validation(trainer(9, max_epochs=-1))


def test_periodic_work_is_due_at_the_first_every_nth_and_last_validation_never_in_the_sanity_check():
    done = [due_at_validation(trainer(epoch), 3, done_before=epoch > 0) for epoch in range(7)]
    assert done == [True, False, True, False, False, True, False]  # the first, epochs 3 and 6
    assert due_at_validation(trainer(4, should_stop=True), 3, done_before=True)
    assert not due_at_validation(trainer(0, sanity=True), 3, done_before=False)
    assert not due_at_validation(trainer(0), 0, done_before=False)  # 0: never
