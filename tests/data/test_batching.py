"""Collation (padding and the target shift) and the token-bucket batch sampler."""

import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from data.batching import Batch, ResumableDataLoader, TokenBucketBatchSampler, collate
from data.special import SPECIALS

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id


# --- collate ------------------------------------------------------------------------------------------------


def test_collate_pads_and_shifts_on_a_literal_example():
    batch = collate([(5, [10, 11, 12], [20]), (2, [13], [21, 22, 23])])
    assert isinstance(batch, Batch)
    # fmt: off
    assert batch.src.tolist() ==     [[10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch.tgt_in.tolist() ==  [[BOS, 20, PAD, PAD], [BOS, 21, 22, 23]]
    assert batch.tgt_out.tolist() == [[20, EOS, PAD, PAD], [21, 22, 23, EOS]]
    # fmt: on
    assert batch.index.tolist() == [5, 2]
    assert all(t.dtype == torch.int64 for t in batch[:-1])
    assert batch.alignment is None  # guided alignment's labels: only for a data module that has them


def test_collate_shapes_and_the_shift_identity_on_random_batches():
    rng = random.Random(0)
    items = [
        (
            i,
            [rng.randrange(4, 50) for _ in range(rng.randint(1, 9))],
            [rng.randrange(4, 50) for _ in range(rng.randint(1, 9))],
        )
        for i in range(16)
    ]
    batch = collate(items)
    assert batch.src.shape == (16, max(len(s) for _, s, _ in items) + 1)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (16, max(len(t) for _, _, t in items) + 1)
    assert batch.index.shape == (16,)
    # tgt_in is tgt_out shifted right by one, wherever tgt_in is not padding ...
    keep = batch.tgt_in[:, 1:] != PAD
    assert torch.equal(batch.tgt_in[:, 1:][keep], batch.tgt_out[:, :-1][keep])
    # ... and every row has exactly one BOS (first), one EOS in each of src and tgt_out (last non-pad).
    for row, (_, s, t) in enumerate(items):
        assert batch.tgt_in[row, 0] == BOS and (batch.tgt_in[row] == BOS).sum() == 1
        assert batch.src[row, len(s)] == EOS and (batch.src[row, len(s) + 1 :] == PAD).all()
        assert batch.tgt_out[row, len(t)] == EOS and (batch.tgt_out[row, len(t) + 1 :] == PAD).all()


def test_collate_takes_its_defaults_from_specials():
    items = [(0, [7, 8], [9]), (1, [7], [9, 9, 9])]
    default = collate(items)
    explicit = collate(items, pad_id=SPECIALS.pad_id, bos_id=SPECIALS.bos_id, eos_id=SPECIALS.eos_id)
    assert all(torch.equal(a, b) for a, b in zip(default[:-1], explicit[:-1]))  # the ids; no labels
    other = collate(items, pad_id=99, bos_id=98, eos_id=97)
    assert other.src.tolist() == [[7, 8, 97], [7, 97, 99]]
    assert other.tgt_in.tolist()[0] == [98, 9, 99, 99]


def test_collate_refuses_an_empty_batch():
    with pytest.raises(ValueError, match="cannot collate an empty list"):
        collate([])


# --- TokenBucketBatchSampler --------------------------------------------------------------------------------

_rng = random.Random(1)
LENGTHS = [_rng.randint(2, 40) for _ in range(1000)]


def epoch_batches(sampler: TokenBucketBatchSampler, epoch: int = 0) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_every_example_once_per_epoch_and_within_the_budget():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0, chunk_size=256)
    batches = epoch_batches(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    for b in batches:
        assert len(b) * max(LENGTHS[i] for i in b) <= 200


def test_bucketing_wastes_little_padding_compared_to_random_batches_of_the_same_sizes():
    def waste(batches):
        return sum(len(b) * max(LENGTHS[i] for i in b) - sum(LENGTHS[i] for i in b) for b in batches)

    bucketed = epoch_batches(TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0, chunk_size=256))
    order = random.Random(0).sample(range(len(LENGTHS)), len(LENGTHS))
    starts = [0, *itertools.accumulate(len(b) for b in bucketed)]
    unsorted = [order[a:b] for a, b in itertools.pairwise(starts)]
    assert waste(bucketed) < 0.1 * sum(LENGTHS) < waste(unsorted)


def test_order_is_a_function_of_seed_and_epoch():
    a = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    b = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    assert epoch_batches(a, 3) == epoch_batches(b, 3)
    assert epoch_batches(a, 3) != epoch_batches(a, 4)
    assert epoch_batches(a, 3) != epoch_batches(TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=1), 3)
    assert list(a) == list(a)  # iterating again without set_epoch repeats the epoch


def test_without_shuffle_batches_are_sorted_by_length():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, shuffle=False)
    flat = [i for b in sampler for i in b]
    assert [LENGTHS[i] for i in flat] == sorted(LENGTHS)
    assert epoch_batches(sampler, 0) == epoch_batches(sampler, 5)


def test_an_example_over_the_budget_gets_a_batch_of_its_own():
    batches = list(TokenBucketBatchSampler([3, 50, 3, 3], max_tokens=10, shuffle=False))
    assert batches == [[0, 2, 3], [1]]


def test_a_batch_that_exactly_fills_the_budget_is_kept_whole():
    assert list(TokenBucketBatchSampler([5, 5, 5], max_tokens=10, shuffle=False)) == [[0, 1], [2]]


def test_examples_all_over_the_budget_get_one_batch_each_and_no_empty_batch():
    assert list(TokenBucketBatchSampler([20, 30], max_tokens=10, shuffle=False)) == [[0], [1]]


def test_examples_are_shuffled_before_they_are_cut_into_chunks():
    # Equal lengths and a budget of 4: each chunk of 4 becomes one batch, so a batch shows its chunk.
    batches = epoch_batches(TokenBucketBatchSampler([1] * 16, max_tokens=4, chunk_size=4, seed=0))
    assert sorted(len(b) for b in batches) == [4, 4, 4, 4]
    assert sorted(map(sorted, batches)) != [list(range(i, i + 4)) for i in range(0, 16, 4)]


def test_a_batch_never_mixes_chunks():
    batches = epoch_batches(TokenBucketBatchSampler([1] * 8, max_tokens=100, chunk_size=1, seed=0))
    assert sorted(batches) == [[i] for i in range(8)]


def test_batches_of_one_sorted_chunk_come_in_shuffled_order():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0, chunk_size=len(LENGTHS))
    longest = [max(LENGTHS[i] for i in b) for b in epoch_batches(sampler)]
    assert longest != sorted(longest)


def test_lightning_finds_set_epoch_on_batch_sampler_sampler():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200)
    sampler.sampler.set_epoch(7)
    assert sampler.epoch == 7


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_ranks_get_equal_shares(drop_last):
    n_batches = len(TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0))
    ranks = [
        epoch_batches(
            TokenBucketBatchSampler(
                LENGTHS, max_tokens=200, seed=0, num_replicas=3, rank=r, drop_last=drop_last
            )
        )
        for r in range(3)
    ]
    assert len({len(r) for r in ranks}) == 1
    assert len(ranks[0]) == (n_batches // 3 if drop_last else -(-n_batches // 3))
    seen = [i for r in ranks for b in r for i in b]
    if drop_last:
        assert len(seen) == len(set(seen))  # disjoint
    else:
        assert set(seen) == set(range(len(LENGTHS)))  # complete


@pytest.mark.parametrize(
    ("drop_last", "expected"),
    [
        # Four batches over three ranks: wrap around to the first batches, or drop the fourth.
        (False, [[[0], [3]], [[1], [0]], [[2], [1]]]),
        (True, [[[0]], [[1]], [[2]]]),
    ],
)
def test_distributed_shares_on_a_literal_example(drop_last, expected):
    ranks = [
        list(
            TokenBucketBatchSampler(
                [1, 1, 1, 1], max_tokens=1, shuffle=False, num_replicas=3, rank=r, drop_last=drop_last
            )
        )
        for r in range(3)
    ]
    assert ranks == expected


def test_fewer_batches_than_ranks_still_give_every_rank_a_batch():
    ranks = [
        list(TokenBucketBatchSampler([1, 1], max_tokens=2, shuffle=False, num_replicas=3, rank=r))
        for r in range(3)
    ]
    assert ranks == [[[0, 1]], [[0, 1]], [[0, 1]]]


def test_rank_outside_the_world_is_an_error():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got rank=2"):
        len(TokenBucketBatchSampler(LENGTHS, max_tokens=200, num_replicas=2, rank=2))


def test_resume_mid_epoch_skips_the_batches_already_yielded():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    sampler.set_epoch(2)
    full = list(sampler)
    it = iter(sampler)
    head = [next(it) for _ in range(3)]
    state = sampler.state_dict()
    assert state == {"epoch": 2, "yielded": 3}

    resumed = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # Lightning sets the epoch again on resume: the skip must survive it
    assert head + list(resumed) == full
    assert list(resumed) == full  # the next iteration is a whole epoch again


def test_resuming_then_moving_to_the_next_epoch_yields_that_whole_epoch():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    resumed = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    resumed.load_state_dict({"epoch": 2, "yielded": 3})
    assert epoch_batches(resumed, 3) == epoch_batches(sampler, 3)


def test_an_abandoned_iteration_does_not_shorten_the_next():
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    full = list(sampler)
    next(iter(sampler))
    assert list(sampler) == full


def resumable_loader(num_workers: int = 0) -> ResumableDataLoader:
    """Batches of example indices (the dataset is ``range``), as lists, from a fresh sampler."""
    sampler = TokenBucketBatchSampler(LENGTHS, max_tokens=200, seed=0)
    return ResumableDataLoader(
        range(len(LENGTHS)), batch_sampler=sampler, collate_fn=list, num_workers=num_workers
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resumable_loader_counts_the_batches_it_delivered_not_those_handed_to_its_workers(num_workers):
    loader = resumable_loader(num_workers)
    loader.batch_sampler.set_epoch(3)
    full = list(loader)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(4)]
    state = loader.state_dict()
    assert state == {"epoch": 3, "yielded": 4}
    # The sampler itself handed its workers batches ahead of those delivered.
    assert loader.batch_sampler.state_dict()["yielded"] >= 4 + num_workers

    resumed = resumable_loader(num_workers)
    resumed.load_state_dict(state)
    resumed.batch_sampler.set_epoch(3)  # as Lightning does, between loading and the first batch
    assert resumed.state_dict() == state  # before its first batch it stands where the saved run stood
    rest = list(resumed)
    assert head + rest == full
    assert resumed.state_dict() == {"epoch": 3, "yielded": len(full)}
    assert list(resumed) == full  # the next iteration is the whole epoch again


def test_resumable_loader_refuses_another_batch_sampler():
    with pytest.raises(TypeError, match="needs a TokenBucketBatchSampler, got BatchSampler"):
        ResumableDataLoader(range(4), batch_size=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ({"max_tokens": 10, "chunk_size": 0}, "chunk_size must be >= 1, got 0"),
        ({"max_tokens": 10, "lengths": [3, 0, 2]}, "every length must be >= 1, got min 0"),
    ],
)
def test_bad_sampler_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenBucketBatchSampler(**{"lengths": LENGTHS, **kwargs})


# --- the package --------------------------------------------------------------------------------------------


def test_importing_the_batching_module_does_not_load_lightning():
    """Model-side code (translation, attention export, benchmarks) collates without the training framework."""
    code = (
        "import sys, data.batching\n"
        "assert 'lightning' not in sys.modules, 'lightning loaded'\n"
        "from data import TranslationDataModule\n"  # still exported, loaded on first use
        "from data.datamodule import TranslationDataModule as direct\n"
        "assert TranslationDataModule is direct and 'lightning' in sys.modules\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
