"""Batching: padding and the target shift (in :func:`collate`), and token-budget length bucketing.

Shape legend: ``B`` batch size, ``S`` source length (tokens + EOS), ``T`` target length (tokens + 1).
All id tensors are int64 and right-padded with ``pad_id``.
"""

import math
import os
import random
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Sampler

from data.corpora import CorpusError
from data.special import SPECIALS

Item = tuple[int, Sequence[int], Sequence[int]]  # (index in its split, source ids, target ids), no specials


class Batch(NamedTuple):
    """One padded batch. At every non-pad position ``t > 0``: ``tgt_in[:, t] == tgt_out[:, t - 1]``.

    ``src_tokens`` and ``tgt_tokens`` say where the tokens sit, found here on the CPU so that a training step
    on a GPU need not ask the device (``nonzero`` makes the host wait). ``tgt_in`` and ``tgt_out`` have their
    tokens at the same positions.
    """

    src: Tensor  # (B, S) source ids + EOS
    tgt_in: Tensor  # (B, T) BOS + target ids: the decoder's input
    tgt_out: Tensor  # (B, T) target ids + EOS: the labels
    index: Tensor  # (B,) position of each example in its split's pair list
    src_tokens: Tensor | None = None  # (Ns,) int64: flat positions b * S + s of src's non-padding entries
    tgt_tokens: Tensor | None = None  # (Nt,) int64: flat positions b * T + t of tgt_out's non-padding entries
    # (B, T, S) float32: guided alignment's labels, each row a distribution over the source tokens linked to
    # tgt_out's token there, or zeros (``data.alignment_labels``); None without them.
    alignment: Tensor | None = None


def token_positions(ids: Tensor, pad_id: int) -> Tensor:
    """(B, L) ids → (N,) int64: the flat positions ``b * L + l`` of the entries that are not padding, in
    row-major order."""
    return (ids != pad_id).flatten().nonzero().squeeze(1)  # (N,)


def collate(
    items: Sequence[Item],
    *,
    pad_id: int = SPECIALS.pad_id,
    bos_id: int = SPECIALS.bos_id,
    eos_id: int = SPECIALS.eos_id,
) -> Batch:
    """Pad a list of ``(index, src_ids, tgt_ids)`` into a :class:`Batch`; the only place specials are added.

    ``src = src_ids + [EOS]``, ``tgt_in = [BOS] + tgt_ids``, ``tgt_out = tgt_ids + [EOS]``, so the decoder
    reads ``tgt_in[:, :t + 1]`` to predict ``tgt_out[:, t]``. Where the tokens sit is found here too.
    """
    if not items:
        raise ValueError("cannot collate an empty list of examples")

    def padded(rows: list[list[int]]) -> Tensor:
        return pad_sequence(
            [torch.tensor(r, dtype=torch.int64) for r in rows], batch_first=True, padding_value=pad_id
        )

    src = padded([[*s, eos_id] for _, s, _ in items])  # (B, S)
    tgt_in = padded([[bos_id, *t] for _, _, t in items])  # (B, T)
    tgt_out = padded([[*t, eos_id] for _, _, t in items])  # (B, T)
    index = torch.tensor([i for i, _, _ in items], dtype=torch.int64)  # (B,)
    return Batch(src, tgt_in, tgt_out, index, token_positions(src, pad_id), token_positions(tgt_out, pad_id))


def check_fits(
    items: Sequence[Item], max_len: int, locate: Callable[[int, str], tuple[str, int | None]], hint: str = ""
) -> None:
    """Stop at the first item a model of ``max_len`` positions cannot read, with a one-line ``CorpusError``.

    The encoder reads the source and EOS, the teacher-forced decoder BOS and the target (see :func:`collate`),
    so each side needs one position more than it has tokens. Give an empty target to check a source alone.

    Args:
        locate: ``(item index, "source" or "target")`` → ``(file or description, line or None)`` for the
            message, e.g. ``("test.tsv", 17)``.
        hint: appended to the message, e.g. what to change.
    """
    for index, src, tgt in items:
        for side, ids, special in (("source", src, "EOS"), ("target", tgt, "BOS")):
            if len(ids) + 1 > max_len:
                reason = (
                    f"{side} has {len(ids)} tokens, {len(ids) + 1} with {special}, longer than the model's "
                    f"max_len {max_len}{hint}"
                )
                raise CorpusError(*locate(index, side), reason)


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """The (num_replicas, rank) given, else those of the initialised process group, else (1, 0)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if num_replicas is None:
        num_replicas = torch.distributed.get_world_size() if distributed else 1
    if rank is None:
        rank = torch.distributed.get_rank() if distributed else 0
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas}), got rank={rank}")
    return num_replicas, rank


class TokenBucketBatchSampler(Sampler[list[int]]):
    """Batches of example indices that fill a token budget, grouping examples of similar length.

    A batch costs ``len(batch) * max(lengths[i] for i in batch)``, the number of positions of its largest
    padded tensor, and holds as many examples as fit in ``max_tokens`` (an example longer than ``max_tokens``
    gets a batch of its own). To keep padding low while staying random, each epoch with ``shuffle=True``:

    1. shuffles the indices, 2. cuts them into chunks of ``chunk_size``, 3. sorts each chunk by length and
    cuts it into batches, 4. shuffles the order of all batches.

    The order is a deterministic function of ``(seed, epoch)``; call :meth:`set_epoch` before each epoch
    (Lightning does). With ``shuffle=False`` all examples are sorted by length (ties keep their order), the
    least padding for evaluation; callers restore the original order from the batch's ``index``.

    Distributed: each of ``num_replicas`` ranks gets every ``num_replicas``-th batch, and all ranks get the
    same number: the batch list is cut short (``drop_last=True``) or wrapped around, repeating a few of the
    first batches (``drop_last=False``). ``num_replicas`` and ``rank`` default to the initialised
    ``torch.distributed`` group, read when iterating. So under Lightning's DDP use
    ``Trainer(use_distributed_sampler=False)``: this sampler already shares the data out.

    :meth:`state_dict` / :meth:`load_state_dict` hold the epoch and how many batches of it were already
    handed out, so a resumed run skips them. (With loader workers, batches are handed out a few ahead of
    training: :class:`ResumableDataLoader` counts the batches it delivered instead.)
    """

    def __init__(
        self,
        lengths: Sequence[int],
        *,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        chunk_size: int = 16384,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
    ) -> None:
        """
        Args:
            lengths: per example, the longer of its two padded sequence lengths (source + EOS, target + 1).
            max_tokens: the token budget of one batch (see above).
            shuffle: shuffle examples and batches each epoch; otherwise sort everything by length.
            seed: base seed of the shuffle.
            chunk_size: number of examples sorted together; larger means less padding, less randomness.
            num_replicas: number of distributed ranks; ``None``: read from ``torch.distributed``.
            rank: this process's rank; ``None``: read from ``torch.distributed``.
            drop_last: with several ranks, drop the batches that do not divide evenly, not repeat some.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if any(n < 1 for n in lengths):
            raise ValueError(f"every length must be >= 1, got min {min(lengths)}")
        self.lengths = list(lengths)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.chunk_size = chunk_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self._yielded = 0  # batches of this epoch handed out so far
        self._resume_at = 0  # batches the next iteration skips (set by load_state_dict)
        self._cache: tuple[tuple[int, int, int], list[list[int]]] | None = None

    @property
    def sampler(self) -> "TokenBucketBatchSampler":
        """This sampler itself. Lightning calls ``set_epoch`` on ``batch_sampler.sampler``; this lets it."""
        return self

    @property
    def next_start(self) -> int:
        """The batch of the current epoch that the next iteration starts at: 0, or after load_state_dict, the
        first batch the saved run had not yet handed out."""
        return self._resume_at

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields."""
        if epoch != self.epoch:
            self._yielded = self._resume_at = 0
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        """The batches of the current epoch, before they are shared out to the ranks."""
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng = random.Random(f"token-bucket/{self.seed}/{self.epoch}")
            rng.shuffle(order)
            chunks = [order[i : i + self.chunk_size] for i in range(0, len(order), self.chunk_size)]
        else:
            chunks = [order]
        batches: list[list[int]] = []
        for chunk in chunks:
            chunk.sort(key=self.lengths.__getitem__)  # stable: ties keep their shuffled order
            batch: list[int] = []
            for i in chunk:  # ascending lengths, so lengths[i] is the longest of batch + [i]
                if batch and (len(batch) + 1) * self.lengths[i] > self.max_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(i)
            if batch:
                batches.append(batch)
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def _batches(self) -> list[list[int]]:
        """This rank's batches of the current epoch (cached)."""
        num_replicas, rank = _world(self.num_replicas, self.rank)
        key = (self.epoch, num_replicas, rank)
        if self._cache is None or self._cache[0] != key:
            batches = self._all_batches()
            if num_replicas > 1 and batches:
                if self.drop_last:
                    batches = batches[: len(batches) // num_replicas * num_replicas]
                else:
                    total = math.ceil(len(batches) / num_replicas) * num_replicas
                    batches = (batches * math.ceil(total / len(batches)))[:total]
                batches = batches[rank::num_replicas]
            self._cache = (key, batches)
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        # Every iteration starts the epoch afresh, except the first after load_state_dict, which skips the
        # batches the saved run had already yielded.
        self._yielded, self._resume_at = self._resume_at, 0
        for batch in batches[self._yielded :]:
            self._yielded += 1
            yield batch

    def __len__(self) -> int:
        """Number of batches this rank yields in the current epoch."""
        return len(self._batches())

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch": ..., "yielded": ...}``: where in which epoch the sampler stands."""
        return {"epoch": self.epoch, "yielded": self._yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next iteration skips the batches that epoch already yielded."""
        self.epoch = int(state["epoch"])
        self._yielded = self._resume_at = int(state["yielded"])


class ResumableDataLoader(DataLoader):
    """A DataLoader over :class:`TokenBucketBatchSampler` that knows where in its epoch it stands.

    :meth:`state_dict` is the sampler's ``{"epoch": ..., "yielded": ...}``, but counting the batches this
    loader *delivered*: with worker processes the sampler runs a few batches ahead of them. Lightning saves it
    in every checkpoint and hands it to :meth:`load_state_dict` before the first batch of a resumed run, so
    that a run resumed in the middle of an epoch goes on with the very batch the saved run would have taken
    next.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.batch_sampler, TokenBucketBatchSampler):
            raise TypeError(f"needs a TokenBucketBatchSampler, got {type(self.batch_sampler).__name__}")
        self._sampler: TokenBucketBatchSampler = self.batch_sampler
        self._position: dict[str, int] | None = None  # of the current iteration; None before the first

    def __iter__(self) -> Iterator[Any]:
        # Read when the first batch is asked for, after Lightning has set the epoch, as the sampler reads it.
        self._position = {"epoch": self._sampler.epoch, "yielded": self._sampler.next_start}
        for batch in super().__iter__():
            self._position["yielded"] += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """``{"epoch": ..., "yielded": ...}``: the epoch and how many of its batches this loader delivered."""
        return self._sampler.state_dict() if self._position is None else dict(self._position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iteration start in epoch ``state["epoch"]``, after its first ``state["yielded"]``
        batches."""
        self._sampler.load_state_dict(state)
        self._position = None


# --- Loaders: workers and pinned memory as the device wants them ------------------------------------------

MAX_AUTO_WORKERS = 4


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def choose_num_workers(device_type: str, cores: int, processes: int = 1) -> int:
    """Data loader workers per training process when ``num_workers="auto"``.

    On the CPU, none: the model's own threads use every core, and a worker would take one from them for work
    the main process does in a small share of a step. On a GPU, workers prepare the next batches while the GPU
    computes: up to 4 per process, leaving one core per process for the process itself.
    """
    if device_type != "cuda":
        return 0
    per_process = max(cores // max(processes, 1), 1)
    return max(0, min(MAX_AUTO_WORKERS, per_process - 1))


def choose_pin_memory(device_type: str) -> bool:
    """Page-locked batches, for faster and asynchronous copies, only when they go to a CUDA GPU."""
    return device_type == "cuda"


def check_batching(max_train_len: int, max_tokens: int, eval_max_tokens: int | None,
                   num_workers: int | Literal["auto"]) -> None:
    """Refuse (ValueError, naming the values) the data module's batch budgets where a batch could not hold one
    pair, and a negative ``num_workers``."""
    if max_train_len < 2:
        raise ValueError(f"max_train_len must be >= 2 (a token plus BOS/EOS), got {max_train_len}")
    if max_tokens < max_train_len or (eval_max_tokens is not None and eval_max_tokens < max_train_len):
        raise ValueError(
            f"max_tokens={max_tokens} and eval_max_tokens={eval_max_tokens} must be >= "
            f"max_train_len={max_train_len}, so that a batch holds at least one pair"
        )
    if num_workers != "auto" and (not isinstance(num_workers, int) or num_workers < 0):
        raise ValueError(f"num_workers must be 'auto' or an integer >= 0, got {num_workers!r}")


def training_device(trainer: Any) -> tuple[str, int]:
    """The device type a Lightning ``trainer`` computes on and its processes per machine; ("cpu", 1) without
    one (evaluation loads batches itself)."""
    if trainer is None:
        return "cpu", 1
    strategy = trainer.strategy
    processes = getattr(strategy, "num_processes", 1) or 1
    return strategy.root_device.type, processes


def bucketed_loader(
    items: Sequence, collate_fn: Callable, *, shuffle: bool, max_tokens: int, seed: int, device_type: str,
    processes: int, num_workers: int | Literal["auto"],
) -> DataLoader:
    """Batches of ``items`` (each with ``lengths()``) of at most ``max_tokens`` tokens, collated by
    ``collate_fn`` with the special ids: shuffled and bucketed, or sorted by length. ``num_workers="auto"``:
    :func:`choose_num_workers` for ``processes`` processes on ``device_type``."""
    sampler = TokenBucketBatchSampler(
        items.lengths().tolist(), max_tokens=max_tokens, shuffle=shuffle, seed=seed  # type: ignore[attr-defined]
    )
    auto = num_workers == "auto"
    workers = choose_num_workers(device_type, available_cores(), processes) if auto else int(num_workers)
    if workers > 0:
        # Workers are forked after the tokenizers used their thread pool; say so explicitly, which also
        # silences the library's warning about it.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Resumable: Lightning keeps the training loader's place in its epoch in every checkpoint.
    return ResumableDataLoader(
        items,  # type: ignore[arg-type]  # a sequence is a map-style dataset
        batch_sampler=sampler,
        collate_fn=partial(collate_fn, pad_id=SPECIALS.pad_id, bos_id=SPECIALS.bos_id,
                           eos_id=SPECIALS.eos_id),
        num_workers=workers,
        pin_memory=choose_pin_memory(device_type),
        persistent_workers=workers > 0,
    )
