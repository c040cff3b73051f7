"""Samplers: every rank reads its own shard through GluonCV's SplitSortedBucketSampler.

GluonCV's sampler gives ranks different batch counts in some cases (tiny datasets, many ranks: a
shard can even be empty), and Horovod then hangs at epoch end. :class:`EqualStepsBatchSampler`
wraps it so that every rank yields exactly :func:`steps_per_epoch` batches, for any dataset size
and world size.
"""

import math
import random

import numpy as np

from detector_training.errors import DataError


def split_sorted_bucket_sampler_class():
    """GluonCV moved the sampler from gluoncv.nn.sampler (<= 0.8) to gluoncv.data.sampler."""
    try:
        from gluoncv.data.sampler import SplitSortedBucketSampler
    except ImportError:  # pragma: no cover - older gluoncv
        from gluoncv.nn.sampler import SplitSortedBucketSampler
    return SplitSortedBucketSampler


def steps_per_epoch(num_samples, world_size, per_rank_batch):
    """Steps every rank runs per epoch: enough for each rank to see its ceil(N / size) share."""
    if num_samples <= 0:
        raise DataError("the training split has no images.", "check train_splits and the dataset.")
    share = int(math.ceil(num_samples / float(world_size)))
    return max(1, int(math.ceil(share / float(per_rank_batch))))


class EqualStepsBatchSampler:
    """Yields exactly ``steps`` non-empty batches per epoch from this rank's GluonCV shard.

    Short shards are padded by cycling their own batches (a rank whose shard is empty borrows a
    deterministic slice of the whole dataset); long ones are truncated. The partition permutation
    depends only on (seed, epoch), so shards stay disjoint across ranks; the order inside a shard
    depends on (seed, epoch, rank), so a resumed job sees the same order again.
    """

    def __init__(self, aspect_ratios, batch_size, num_parts, part_index, steps, seed=0,
                 shuffle=True):
        self._keys = list(aspect_ratios)
        self._batch_size = batch_size
        self._num_parts = num_parts
        self._part_index = part_index
        self._steps = steps
        self._seed = seed
        self._shuffle = shuffle
        self._epoch = 0
        self._skip = 0

    def set_epoch(self, epoch, skip=0):
        """Select the epoch's batches; ``skip`` drops the first ones (resuming a stopped epoch)."""
        self._epoch = epoch
        self._skip = skip

    def __len__(self):
        return self._steps - self._skip

    def batches(self, epoch):
        sampler_cls = split_sorted_bucket_sampler_class()
        # GluonCV's sampler draws from numpy's and Python's global generators.
        np.random.seed((self._seed * 1000003 + epoch * 7919 + self._part_index) % (2 ** 32))
        random.seed("%d-%d-%d" % (self._seed, epoch, self._part_index))
        inner = sampler_cls(self._keys, self._batch_size, num_parts=self._num_parts,
                            part_index=self._part_index, shuffle=self._shuffle,
                            seed=self._seed + epoch)
        batches = [list(map(int, b)) for b in inner if len(b)]
        if not batches:
            n = len(self._keys)
            start = self._part_index * self._batch_size
            batches = [[(start + j) % n for j in range(self._batch_size)]]
        while len(batches) < self._steps:
            batches.extend(batches[: self._steps - len(batches)])
        return batches[: self._steps]

    def __iter__(self):
        return iter(self.batches(self._epoch)[self._skip:])


class IndexSampler:
    """Yields the given indices in order (a rank's slice of the validation set)."""

    def __init__(self, indices):
        self._indices = list(indices)

    def __iter__(self):
        return iter(self._indices)

    def __len__(self):
        return len(self._indices)


class TaggedBatchSampler:
    """An inner sampler's batches with each sample tagged as ``(key, tag)``, the tag a function of
    (epoch, batch number, place in the batch, key) alone (:meth:`tag`), so a resumed epoch sees the
    tags the stopped one saw. ``set_epoch`` passes on to the inner sampler."""

    def __init__(self, inner, seed, rank):
        self._inner = inner
        self._seed = seed
        self._rank = rank
        self._epoch = 0
        self._skip = 0

    def set_epoch(self, epoch, skip=0):
        self._epoch, self._skip = epoch, skip
        self._inner.set_epoch(epoch, skip)

    def __len__(self):
        return len(self._inner)

    def tag(self, epoch, batch_number, place, key):
        raise NotImplementedError

    def batches(self, epoch):
        return [[(key, self.tag(epoch, n, place, key)) for place, key in enumerate(batch)]
                for n, batch in enumerate(self._inner.batches(epoch))]

    def __iter__(self):
        return iter(self.batches(self._epoch)[self._skip:])


class MultiScaleBatchSampler(TaggedBatchSampler):
    """Multi-scale training: the equal-steps batches, each sample tagged with the input size to
    use, as ``(index, size choice)``. A new size is drawn every ``interval`` batches from a
    generator seeded by (seed, epoch, rank, batch group), so a resumed epoch sees the same sizes
    and ranks draw their own. Every sample of a batch has the same size (they are stacked)."""

    def __init__(self, inner, choices, interval, seed, rank):
        super().__init__(inner, seed, rank)
        self._choices = choices
        self._interval = max(1, int(interval))

    def choice(self, epoch, batch_number):
        group = batch_number // self._interval
        rng = random.Random("%d-%d-%d-%d" % (self._seed, epoch, self._rank, group))
        return rng.randrange(self._choices)

    def tag(self, epoch, batch_number, place, key):
        return self.choice(epoch, batch_number)


def sample_draw(seed, epoch, rank, batch_number, place):
    """The seed of one sample's augmentation draws: a function of where it lies in the run alone
    (seed, epoch, rank, batch, place in the batch)."""
    return random.Random("draw-%d-%d-%d-%d-%d" % (seed, epoch, rank, batch_number, place)).getrandbits(32)


class SeededDrawBatchSampler(TaggedBatchSampler):
    """The inner sampler's batches, each sample tagged with its own draw as ``(key, draw)``
    (:func:`sample_draw`): the loader seeds its augmentation with it, so a sample draws the same
    whichever worker process runs it and in whatever order the workers finish, no two samples
    draw alike, and a resumed epoch draws what the stopped one drew."""

    def tag(self, epoch, batch_number, place, key):
        return sample_draw(self._seed, epoch, self._rank, batch_number, place)
