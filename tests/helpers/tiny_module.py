"""The tiny training system the tests of the training step share: a ``TranslationModule`` of a few thousand
parameters (``module``), the Trainer attributes its hooks read without a Trainer (``attach``), a padded batch,
and the copy task with a one-device CPU Trainer for the tests that fit.
"""

from types import SimpleNamespace

import lightning as L
import torch

from data.batching import collate
from data.datamodule import TranslationDataModule
from data.reader import ToyOptions
from training.module import TranslationModule


def module(**overrides):
    settings = {"src_vocab_size": 13, "tgt_vocab_size": 11, "d_model": 16, "num_heads": 2,
                "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 32, "warmup_steps": 4, "lr": 1.0}
    settings.update(overrides)
    return TranslationModule(**settings)


class OneProcess:
    """The collectives of a Strategy in a run of one process: the tensor or object as it is."""

    def reduce(self, tensor, reduce_op="mean"):
        return tensor

    def broadcast(self, obj, src=0):
        return obj


def attach(
    m, *, global_step=0, log_every_n_steps=1000, current_epoch=0, sanity_checking=False, global_rank=0,
    strategy=None, world_size=1,
):
    """Give ``m`` the few Trainer attributes its hooks read, and record what it logs."""
    m._trainer = SimpleNamespace(
        global_step=global_step, log_every_n_steps=log_every_n_steps, current_epoch=current_epoch,
        sanity_checking=sanity_checking, global_rank=global_rank, strategy=strategy or OneProcess(),
        world_size=world_size,
    )
    m.logged = {}
    m.log = lambda name, value, **kwargs: m.logged.__setitem__(name, value)
    m.optimizers = lambda: SimpleNamespace(param_groups=[{"lr": 0.5}])
    return m


def padded_batch():
    return collate([(0, [5, 6, 7, 8], [4, 5, 6]), (1, [9, 10], [7])])  # padding on both sides of row 1


def copy_task():
    """Copy data with one vocabulary for both sides, so that echoing the source is a perfect translation."""
    return TranslationDataModule(
        dataset="copy", shared_vocab=True, toy=ToyOptions(train_size=40, val_size=12, test_size=2),
        max_train_len=32, max_tokens=128, eval_max_tokens=64,
    )


def copy_module(dm, **overrides):
    torch.manual_seed(0)
    return module(src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size, **overrides)


def cpu_trainer(**overrides):
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
                "enable_progress_bar": False, "enable_model_summary": False}
    return L.Trainer(**{**settings, **overrides})
