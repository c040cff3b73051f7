"""Loaders: a rank's training shard runs the equal number of steps, its validation slice is every
size-th image."""

from types import SimpleNamespace

import numpy as np

from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.loaders import shard_loader, val_shard_loader


class Numbers:
    """A reader of ``n`` samples: (its index as an array, one label row)."""

    classes = ("one",)

    def __init__(self, n):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, idx):
        return np.full((2,), idx, dtype="float32"), np.array([[0, 0, 1, 1, 0]], dtype="float32")


def numbers(n):
    return SubsetDataset(Numbers(n), range(n), ["n%d" % i for i in range(n)])


def stack(samples):
    return np.stack([s[0] for s in samples])


def test_each_rank_gets_the_same_steps_and_together_every_sample():
    data = Datasets(train=numbers(7), val=numbers(5), classes=("one",), aspect_ratios=[1.0] * 7)
    config = SimpleNamespace(mixup=False, seed=1)
    seen, lengths = set(), []
    for rank in range(2):
        world = SimpleNamespace(rank=rank, size=2)
        train = shard_loader(config, data, world, 2, 2, lambda x, y: (x, y), stack, 0)
        train.sampler.set_epoch(0)
        batches = [b for b in train.loader]
        lengths.append(len(batches))
        seen.update(int(v) for b in batches for v in b[:, 0])
        assert train.first_batch().shape == (2, 2)
    assert lengths == [2, 2]
    assert seen == set(range(7))


def test_a_validation_slice_is_every_size_th_image():
    data = Datasets(train=numbers(3), val=numbers(5), classes=("one",), aspect_ratios=[1.0] * 3)
    loader, indices = val_shard_loader(data, SimpleNamespace(rank=1, size=2),
                                       lambda x, y: (x, y), stack, 0)
    assert indices == [1, 3]
    assert [int(b[0, 0]) for b in loader] == [1, 3]
