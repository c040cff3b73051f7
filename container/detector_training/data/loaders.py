"""Loaders: this rank's shard of the training set through the equal-steps sampler (mixup and
multi-scale around it), and its slice of the validation set."""

from dataclasses import dataclass

from detector_training.data.samplers import (EqualStepsBatchSampler, IndexSampler,
                                             MultiScaleBatchSampler)


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


def shard_loader(config, datasets, world, per_rank_batch, steps, transform, batchify,
                 num_workers, scale_interval=10):
    """This rank's training loader: its shard of the training set through the equal-steps
    sampler, ``transform`` per sample (a family's train transform), ``batchify`` per batch; mixup
    around the dataset when configured. ``transform`` may be a list (one per input size, for
    multi-scale training): each batch then takes one of them, a new draw every
    ``scale_interval`` batches. Returns the handles the engine needs each epoch."""
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
    loader = mx.gluon.data.DataLoader(transformed, batch_sampler=sampler, batchify_fn=batchify,
                                      num_workers=num_workers)
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
