"""Ordinary training steps never make the host wait for the device; log steps read values back, and a loss
that stops being finite still stops the run.

On a GPU the host queues kernels ahead of the device, and every read of a device value (``item``, ``bool`` of
a tensor, ``nonzero``, ``torch.equal``, a boolean-mask index, ``tolist``, ``cpu``) or copy of a host value to
the device (``torch.tensor(3.0, device=...)``, which Lightning does for a Python number given to
``self.log``) makes it wait until the queue drains. A CPU never waits, so these tests watch for the operations
that would wait, at the aten level (a ``TorchDispatchMode``) and at the Python level. ``tests/test_gpu.py``
checks the same steps, and Lightning's bookkeeping between them, on a GPU with
``torch.cuda.set_sync_debug_mode("error")``.
"""

import pytest
import torch

from tests.helpers.host_syncs import HostSyncs, WatchOrdinarySteps
from tests.helpers.tiny_module import copy_module, copy_task, cpu_trainer
from training.module import NonFiniteLossError, TranslationModule


def test_the_detector_sees_what_would_wait_for_a_gpu():
    x = torch.tensor([1.0, 0.0, 2.0])
    with HostSyncs() as mode:
        x.sum().item()
        bool(x.any())
        x[x > 0]
        x.nonzero()
        torch.equal(x, x)
        x.tolist()
        torch.tensor(3.0)
        y = x * 2 + x.sum()  # stays on the device
        y.index_select(0, torch.arange(2))  # an index tensor, not a mask
    assert [line.split(":")[0].split(" with")[0] for line in mode.found] == [
        "aten._local_scalar_dense.default", "aten._local_scalar_dense.default", "aten.index.Tensor",
        "aten.nonzero.default", "aten.equal.default", "Tensor.tolist", "aten.lift_fresh.default",
    ]


def test_ordinary_training_steps_never_wait_for_the_device():
    """The LightningModule's training steps under a CPU Trainer, gradient clipping included; step 3 of every 4
    is a log step and may read values back."""
    dm = copy_task()
    m = copy_module(dm, lr=0.01)
    watch = WatchOrdinarySteps()
    trainer = cpu_trainer(max_steps=7, limit_val_batches=0, log_every_n_steps=4, gradient_clip_val=1.0,
                          callbacks=[watch])
    trainer.fit(m, datamodule=dm)
    assert watch.steps == [1, 2, 4, 5, 6]
    assert watch.found == [], "\n".join(watch.found)
    logged = trainer.logged_metrics  # from the log step, global step 3
    assert {"train/loss", "train/lr", "train/grad_norm"} <= logged.keys()
    assert torch.isfinite(logged["train/loss"]) and logged["train/grad_norm"] > 0


def poison_loss_at(monkeypatch, step: int) -> None:
    original = TranslationModule.loss

    def poisoned(self, logits, tgt_out, label_smoothing=0.0, reduction="mean"):
        loss = original(self, logits, tgt_out, label_smoothing, reduction)
        return loss * float("nan") if self.training and self.global_step == step else loss

    monkeypatch.setattr(TranslationModule, "loss", poisoned)


def test_a_nan_loss_on_an_ordinary_step_stops_the_run_at_the_next_log_step(monkeypatch):
    poison_loss_at(monkeypatch, 1)
    dm = copy_task()
    trainer = cpu_trainer(max_steps=20, limit_val_batches=0, log_every_n_steps=4)
    with pytest.raises(NonFiniteLossError, match="training loss is nan at step 1; stopping"):
        trainer.fit(copy_module(dm), datamodule=dm)
    assert trainer.global_step == 3  # steps 1 and 2 ran; step 3, a log step, found it before its update


def test_a_nan_loss_after_the_last_log_step_stops_the_run_before_anything_is_saved(monkeypatch, tmp_path):
    poison_loss_at(monkeypatch, 5)
    dm = copy_task()
    trainer = cpu_trainer(max_steps=6, limit_val_batches=0, log_every_n_steps=4, enable_checkpointing=True,
                          default_root_dir=tmp_path)
    with pytest.raises(NonFiniteLossError, match="training loss is nan at step 5"):
        trainer.fit(copy_module(dm), datamodule=dm)
    assert list(tmp_path.rglob("*.ckpt")) == []  # the checkpoint of the finished run would hold NaN weights


def test_beam_search_reads_back_one_value_per_generated_token():
    """Which sentences go on is the one host decision of a beam-search step (the batch's shape depends on it);
    nothing else reads a value back. torch.equal is the cache's invariant check, made on the CPU only."""
    from model import Transformer
    from model.decoding import beam_search
    from tests.conftest import PAD, random_ids, tiny_config

    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src = random_ids(4, 7, 13, generator=torch.Generator().manual_seed(3))
    src[1, 4:] = PAD
    with HostSyncs() as mode:
        out = beam_search(model, src, 9, beam_size=3)
    reads = [f for f in mode.found if not f.startswith(("aten.lift_fresh", "aten.equal"))]
    assert out.size(1) == 9  # the untrained model never ends early: nine steps
    assert [f.split(":")[0] for f in reads] == ["aten.nonzero.default"] * 9, "\n".join(reads)


def test_a_batch_without_token_positions_trains_alike():
    """Another data module's batches may lack ``src_tokens`` and ``tgt_tokens``: the step finds them itself
    (on a GPU, waiting for the device), with the same loss."""
    from tests.helpers.tiny_module import attach, module, padded_batch

    torch.manual_seed(0)
    m = attach(module())
    batch = padded_batch()
    bare = batch._replace(src_tokens=None, tgt_tokens=None)
    torch.testing.assert_close(m.training_step(bare, 0), m.training_step(batch, 0))
