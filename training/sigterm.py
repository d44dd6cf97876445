"""SIGTERM in a distributed run: a flag set by the signal handler, shared by the training loop.

Lightning's own handler broadcasts a tensor from inside the signal handler. A handler runs wherever the main
thread happens to be, so that broadcast can pair with another collective (the gradient all-reduce of the other
rank, say) and every process waits forever. Here the handler only forwards the signal to the worker
processes and sets ``trainer.received_sigterm``; Lightning's training loop broadcasts rank 0's flag at the
start of every step, so that every process stops at the same step with ``SIGTERMException`` (and the
interrupt checkpoint, a collective save, is reached by all of them).
"""

import logging
from types import FrameType

import lightning as L
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector

log = logging.getLogger(__name__)


class FlagOnlySignalConnector(_SignalConnector):
    """Lightning's signal connector with a SIGTERM handler that makes no collective call."""

    def _sigterm_notifier_fn(self, signum: int, _: FrameType | None) -> None:
        log.info(f"[rank: {self.trainer.global_rank}] Received SIGTERM: {signum}")
        if not self.received_sigterm:
            launcher = self.trainer.strategy.launcher
            if launcher is not None:
                launcher.kill(signum)  # the worker processes this one started, if any
        self.received_sigterm = True


def install_sigterm_handling(trainer: L.Trainer) -> None:
    """Give ``trainer`` the SIGTERM handling above; it takes effect when ``fit`` registers its handlers."""
    trainer._signal_connector = FlagOnlySignalConnector(trainer)
