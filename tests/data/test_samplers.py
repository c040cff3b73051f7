import itertools
import random

import pytest

from detector_training.data.samplers import (EqualStepsBatchSampler,
                                             split_sorted_bucket_sampler_class, steps_per_epoch)
from detector_training.errors import DataError


def rank_batches(n, world, batch, epoch=0, seed=3):
    steps = steps_per_epoch(n, world, batch)
    keys = [random.Random(i).uniform(0.5, 2.0) for i in range(n)]
    out = []
    for rank in range(world):
        sampler = EqualStepsBatchSampler(keys, batch, world, rank, steps, seed=seed)
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return steps, out


def test_gluoncv_sampler_alone_gives_unequal_counts():
    """Why the wrapper exists: GluonCV's own sampler leaves some ranks with fewer batches."""
    cls = split_sorted_bucket_sampler_class()
    counts = [len(list(cls([1.0] * 10, 1, num_parts=8, part_index=r, shuffle=True))) for r in range(8)]
    assert len(set(counts)) > 1


@pytest.mark.parametrize("n, world, batch", [
    (10, 4, 1), (20, 8, 1), (7, 2, 1), (5, 4, 1), (2, 4, 1), (10, 8, 1), (33, 4, 2), (7, 2, 3),
    (1, 8, 1), (100, 3, 4),
])
def test_every_rank_runs_the_same_number_of_nonempty_batches(n, world, batch):
    for epoch in (0, 1, 5):
        steps, per_rank = rank_batches(n, world, batch, epoch)
        assert all(len(batches) == steps for batches in per_rank)
        assert all(0 < len(b) <= batch for batches in per_rank for b in batches)
        assert all(0 <= i < n for batches in per_rank for b in batches for i in b)


@pytest.mark.parametrize("n, world, batch", [(10, 4, 1), (20, 8, 1), (7, 2, 1), (64, 4, 2)])
def test_an_epoch_covers_every_sample(n, world, batch):
    _, per_rank = rank_batches(n, world, batch)
    seen = {i for batches in per_rank for b in batches for i in b}
    assert seen == set(range(n))


def test_shards_are_disjoint_when_the_split_is_even():
    _, per_rank = rank_batches(16, 4, 1)
    shards = [set(itertools.chain.from_iterable(b)) for b in per_rank]
    for a, b in itertools.combinations(shards, 2):
        assert not a & b


def test_order_depends_on_epoch_and_is_reproducible():
    _, first = rank_batches(40, 2, 2, epoch=0)
    _, again = rank_batches(40, 2, 2, epoch=0)
    _, other = rank_batches(40, 2, 2, epoch=1)
    assert first == again
    assert first != other


def test_steps_per_epoch_formula():
    assert steps_per_epoch(10, 4, 1) == 3
    assert steps_per_epoch(7, 2, 1) == 4
    assert steps_per_epoch(20, 8, 1) == 3
    assert steps_per_epoch(8, 2, 4) == 1
    with pytest.raises(DataError):
        steps_per_epoch(0, 2, 1)
