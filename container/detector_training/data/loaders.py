"""Loaders: this rank's shard of the training set through the equal-steps sampler (mixup and
multi-scale around it), and its slice of the validation set."""

import logging
import random
import threading
from dataclasses import dataclass

import numpy as np

from detector_training.data.samplers import (EqualStepsBatchSampler, IndexSampler,
                                             MultiScaleBatchSampler, SeededDrawBatchSampler)


@dataclass
class TrainData:
    loader: object
    sampler: EqualStepsBatchSampler
    mixup: object  # the MixupDetection wrapper when mixup is on, else None
    first_batch: object  # () -> one batch (the first samples), in the loader's format


class PerSampleTransformDataset:
    """``dataset[(index, k)]`` is ``transforms[k](*dataset[index])`` (the multi-scale sampler's
    keys); a plain index uses the first transform."""

    def __init__(self, dataset, transforms):
        self._dataset = dataset
        self._transforms = list(transforms)

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, key):
        index, choice = key if isinstance(key, tuple) else (key, 0)
        return self._transforms[choice](*self._dataset[index])


class SeededDrawDataset:
    """``dataset[(key, draw)]`` is ``dataset[key]`` with numpy's and Python's global generators
    (those GluonCV's augmentations and mixup draw from) seeded with ``draw`` first, in whichever
    process reads it."""

    def __init__(self, dataset):
        self._dataset = dataset

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, key_and_draw):
        key, draw = key_and_draw
        random.seed(draw)
        np.random.seed(draw)
        return self._dataset[key]


def shard_loader(config, datasets, world, per_rank_batch, steps, transform, batchify,
                 num_workers, scale_interval=10):
    """This rank's training loader: its shard of the training set through the equal-steps
    sampler, ``transform`` per sample (a family's train transform), ``batchify`` per batch; mixup
    around the dataset when configured. ``transform`` may be a list (one per input size, for
    multi-scale training): each batch then takes one of them, a new draw every
    ``scale_interval`` batches. Each sample's augmentation is seeded by its place in the run
    (:class:`SeededDrawBatchSampler`). Returns the handles the engine needs each epoch."""
    import mxnet as mx

    dataset = datasets.train
    mixup = None
    if config.mixup:
        from gluoncv.data.mixup.detection import MixupDetection

        dataset = mixup = MixupDetection(dataset)
    sampler = EqualStepsBatchSampler(datasets.aspect_ratios, per_rank_batch, world.size,
                                     world.rank, steps, seed=config.seed)
    if isinstance(transform, (list, tuple)):
        transformed = PerSampleTransformDataset(dataset, transform)
        sampler = MultiScaleBatchSampler(sampler, len(transform), scale_interval, config.seed,
                                         world.rank)
    else:
        transformed = dataset.transform(transform)
    sampler = SeededDrawBatchSampler(sampler, config.seed, world.rank)
    loader = mx.gluon.data.DataLoader(SeededDrawDataset(transformed), batch_sampler=sampler,
                                      batchify_fn=batchify, num_workers=num_workers)
    return TrainData(loader, sampler, mixup, lambda: batchify(
        [transformed[i % len(transformed)] for i in range(per_rank_batch)]))


def val_shard_loader(datasets, world, transform, batchify, num_workers):
    """This rank's slice of the validation set (every size-th image), one image per batch, and
    the dataset indices of that slice."""
    import mxnet as mx

    indices = list(range(world.rank, len(datasets.val), world.size))
    return mx.gluon.data.DataLoader(
        datasets.val.transform(transform),
        batch_sampler=mx.gluon.data.BatchSampler(IndexSampler(indices), 1, "keep"),
        batchify_fn=batchify, num_workers=num_workers), indices


LOADER_CLOSE_S = 10  # for a loader's workers to finish what was sent and leave


def close_loader(loader, timeout_s=LOADER_CLOSE_S):
    """End a DataLoader's worker processes now, the orderly way: the pool is closed, so each
    worker takes its end-of-work sentinel from the task queue and leaves by itself. Left to the
    loader's ``__del__`` or to interpreter exit, the pool is ``terminate()``d instead, which waits
    on a lock an idle or killed worker may hold: a finished job then never exits. Workers still
    alive after ``timeout_s`` are killed. Loaders without worker processes are left as they are;
    a closed loader cannot be iterated again."""
    pool = getattr(loader, "_worker_pool", None)
    if pool is None:
        return
    loader._worker_pool = None  # its __del__ then has nothing to terminate
    loader._iter = None  # a prefetching iterator holds the pool too
    pool.close()
    joiner = threading.Thread(target=pool.join, name="loader-close", daemon=True)
    joiner.start()
    joiner.join(timeout_s)
    if joiner.is_alive():
        # Pool has no public handle on its worker processes; _pool is the list it joins.
        left = [worker for worker in pool._pool if worker.exitcode is None]  # pylint: disable=protected-access
        logging.getLogger("detector_training").warning(
            "data loader: %d worker process(es) still running %d s after the loader was closed; "
            "killing them", len(left), timeout_s)
        for worker in left:
            worker.kill()
            worker.join(timeout_s)
        # Now no worker is left to respawn or wait for: end the pool's threads, bounded too.
        ender = threading.Thread(target=pool.terminate, name="loader-terminate", daemon=True)
        ender.start()
        ender.join(timeout_s)
