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

import traceback

import lightning as L
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.test_module import copy_module, copy_task, cpu_trainer
from training.module import NonFiniteLossError, TranslationModule

aten = torch.ops.aten
# Ops whose result the host must read from the device, or which copy host data to it.
SYNCING = {
    aten._local_scalar_dense: "reads a value back (item, bool, float, int of a tensor)",
    aten.is_nonzero: "reads a value back (bool of a tensor)",
    aten.nonzero: "nonzero: the host waits to learn how many",
    aten.equal: "torch.equal reads its answer back",
    aten.masked_select: "masked_select: the host waits to learn how many",
    aten.lift_fresh: "a tensor made from host data (torch.tensor): a blocking copy to the device",
}
INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}
PYTHON_LEVEL = ("tolist", "cpu", "numpy")  # copies to the host, seen only in Python


def where_in_project() -> str:
    """The innermost frames of this project's code, or of any code if none: where the sync was asked for."""
    frames = traceback.extract_stack()[:-2]
    ours = [f for f in frames
            if "/site-packages/" not in f.filename and "host_sync" not in f.filename and f.filename[0] != "<"]
    return " <- ".join(
        f"{'/'.join(f.filename.rsplit('/', 2)[-2:])}:{f.lineno} {f.line}" for f in (ours or frames)[-3:]
    )


class HostSyncs(TorchDispatchMode):
    """Records every operation that would make the host wait for a GPU, with where it came from.

    ``exempt``: tensors the host may read, e.g. the optimiser's step counters, which torch keeps on the CPU
    for parameters on any device (non-capturable optimisers), so reading them makes nobody wait.
    """

    def __init__(self, exempt=lambda: ()) -> None:
        super().__init__()
        self.exempt = exempt
        self.found: list[str] = []
        self._saved = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in SYNCING and not (args and any(args[0] is t for t in self.exempt())):
            self.found.append(f"{func}: {SYNCING[packet]} at {where_in_project()}")
        masks = packet in INDEXING and any(i is not None and i.dtype == torch.bool for i in args[1])
        if masks:
            self.found.append(f"{func} with a boolean mask: the host waits to learn how many, at "
                              f"{where_in_project()}")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for name in PYTHON_LEVEL:
            self._saved[name] = torch.Tensor.__dict__.get(name)  # None: inherited from torch._C.TensorBase
            original = getattr(torch.Tensor, name)

            def recorded(tensor, *args, _name=name, _original=original, **kwargs):
                self.found.append(f"Tensor.{_name}: a copy to the host at {where_in_project()}")
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, recorded)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)


class WatchOrdinarySteps(L.Callback):
    """Runs every ordinary training step after the first (whose optimiser makes its state) under
    ``HostSyncs``: the forward pass, the loss, the backward pass, gradient clipping and the optimiser step."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.found: list[str] = []
        self.mode: HostSyncs | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        log_step = (trainer.global_step + 1) % trainer.log_every_n_steps == 0
        if trainer.global_step == 0 or log_step:
            return
        optimizer = trainer.optimizers[0]
        self.mode = HostSyncs(exempt=lambda: [s["step"] for s in optimizer.state.values()])
        self.mode.__enter__()
        self.steps.append(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.found += self.mode.found
            self.mode = None


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
    from tests.test_module import attach, module, padded_batch

    torch.manual_seed(0)
    m = attach(module())
    batch = padded_batch()
    bare = batch._replace(src_tokens=None, tgt_tokens=None)
    torch.testing.assert_close(m.training_step(bare, 0), m.training_step(batch, 0))
