"""What would make the host wait for a GPU, watched on a CPU: ``HostSyncs`` records every such operation (at
the aten level, with a ``TorchDispatchMode``, and the copies to the host seen only in Python), and
``WatchOrdinarySteps`` runs a Trainer's ordinary training steps under it. Shared by the tests of the training
step (tests/training/test_host_sync.py, tests/training/test_guided_alignment.py).
"""

import traceback

import lightning as L
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
