"""Datasets, samplers and loaders.

Each rank reads its own shard through GluonCV's SplitSortedBucketSampler. GluonCV's sampler gives
ranks different batch counts in some cases (tiny datasets, many ranks: a shard can even be empty),
and Horovod then hangs at epoch end. :class:`EqualStepsBatchSampler` wraps it so that every rank
yields exactly :func:`steps_per_epoch` batches, for any dataset size and world size.
"""

import logging
import math
import os
import random
from dataclasses import dataclass
from xml.etree import ElementTree as ET

import numpy as np

from detector_training.values import voc_splits
from detector_training.errors import DataError
from detector_training.data import manifest
from detector_training.data.negatives import is_negative, log_empty, negative_label
from detector_training.data.voc_layout import find_devkit


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


@dataclass
class TrainData:
    loader: object
    sampler: EqualStepsBatchSampler
    mixup: object  # the MixupDetection wrapper when mixup is on, else None
    first_batch: object  # () -> one batch (the first samples), in the loader's format


@dataclass
class Datasets:
    train: object
    val: object
    classes: tuple
    aspect_ratios: list  # width / height of each training image
    val_aspect_ratios: list = None  # the same for validation (None: assume the training ones)


def _check_split_files(devkit, splits):
    for year, name in splits:
        path = os.path.join(devkit, "VOC%d" % year, "ImageSets", "Main", name + ".txt")
        if not os.path.isfile(path):
            raise DataError("split file %s is missing." % path,
                            "add it, or choose existing splits with train_splits/val_splits.")


def _split_ids(devkit, splits):
    for year, name in splits:
        path = os.path.join(devkit, "VOC%d" % year, "ImageSets", "Main", name + ".txt")
        with open(path) as handle:
            for line in handle:
                if line.strip():
                    yield os.path.join(devkit, "VOC%d" % year), line.strip().split()[0]


def infer_voc_classes(devkit, splits):
    """Sorted object names found in the annotations of the given splits."""
    names = set()
    for base, image_id in _split_ids(devkit, splits):
        tree = ET.parse(os.path.join(base, "Annotations", image_id + ".xml"))
        names.update(obj.find("name").text.strip().lower() for obj in tree.iter("object"))
    if not names:
        raise DataError("no objects found in the annotations of the training splits.",
                        "check the Annotations folder, or name the classes with 'classes'.")
    return tuple(sorted(names))


def voc_aspect_ratios(items):
    """width / height per (VOC folder, image id), read from the annotation's <size> (GluonCV's VOC
    reader has no get_im_aspect_ratio); 1.0 where the size is missing."""
    ratios = []
    for base, image_id in items:
        try:
            size = ET.parse(os.path.join(base, "Annotations", image_id + ".xml")).find("size")
            ratios.append(float(size.find("width").text) / float(size.find("height").text))
        except (AttributeError, ValueError, ZeroDivisionError, OSError, ET.ParseError):
            ratios.append(1.0)
    return ratios


class SubsetDataset:
    """The items of ``base`` at ``indices``.

    A sample that cannot be read becomes a DataError naming the image file, instead of a bare
    decoder error from deep inside a data-loader worker. An image without boxes (GluonCV's VOC
    reader gives it an empty label) gets the placeholder row of :func:`negative_label`."""

    def __init__(self, base, indices, image_paths,
                 fix="replace or remove the file and its entry in ImageSets/Main."):
        self._base = base
        self._indices = list(indices)
        self._paths = list(image_paths)
        self._fix = fix

    def __len__(self):
        return len(self._indices)

    def __getitem__(self, idx):
        try:
            item = self._base[self._indices[idx]]
        except Exception as exc:  # any reader failure: say which file
            raise DataError("cannot read training/validation image %s (%s: %s)."
                            % (self._paths[idx], type(exc).__name__, str(exc).splitlines()[0][:200]),
                            self._fix) from exc
        if isinstance(item[1], np.ndarray) and not item[1].size:
            item = (item[0], negative_label()) + tuple(item[2:])
        return item

    @property
    def classes(self):
        return self._base.classes

    @property
    def base(self):
        """The reader underneath (GluonCV's COCO metric reads its annotations)."""
        return self._base

    def subset(self, positions):
        """The items at these positions of this subset (a carved split)."""
        return SubsetDataset(self._base, [self._indices[p] for p in positions],
                             [self._paths[p] for p in positions], self._fix)

    def transform(self, fn, lazy=True):
        import mxnet as mx

        return mx.gluon.data.SimpleDataset(self).transform(fn, lazy)


class ConcatDataset:
    """Two datasets end to end (the final fit: training and validation images together)."""

    def __init__(self, first, second):
        self._parts = (first, second)

    def __len__(self):
        return len(self._parts[0]) + len(self._parts[1])

    def __getitem__(self, idx):
        first = len(self._parts[0])
        return self._parts[0][idx] if idx < first else self._parts[1][idx - first]

    @property
    def classes(self):
        return self._parts[0].classes

    def transform(self, fn, lazy=True):
        import mxnet as mx

        return mx.gluon.data.SimpleDataset(self).transform(fn, lazy)


def _voc_dataset(devkit, splits, classes, what, skip_empty):
    """GluonCV's VOC reader for ``classes``; images without any object of those classes (GluonCV
    skips other class names) are left out with ``skip_empty``, else kept as negatives."""
    from gluoncv.data import VOCDetection

    cls = VOCDetection
    if tuple(classes) != tuple(VOCDetection.CLASSES):
        cls = type("CustomVOCDetection", (VOCDetection,), {"CLASSES": tuple(classes)})
    dataset = cls(root=devkit, splits=splits)
    with_objects = [i for i in range(len(dataset)) if len(dataset._label_cache[i])]  # pylint: disable=protected-access
    if not with_objects:
        raise DataError("no %s image has an object of the classes %s (GluonCV reads names in "
                        "lower case)." % (what, ", ".join(classes)),
                        "name classes as they appear in the annotations, or leave 'classes' "
                        "empty to read them from the annotations.")
    log_empty(what, len(dataset) - len(with_objects), len(dataset), skip_empty)
    keep = with_objects if skip_empty else list(range(len(dataset)))
    items = [dataset._items[i] for i in keep]  # pylint: disable=protected-access
    paths = [os.path.join(base, "JPEGImages", image_id + ".jpg") for base, image_id in items]
    return SubsetDataset(dataset, keep, paths), items


def build_datasets(config, data_root, instances=False):
    """Training and validation datasets for the configured dataset kind; with ``val_fraction`` the
    validation images are carved from the training ones, with ``final_fit`` the training set is
    training plus validation images (shared by every family). ``instances``: COCO-format data with
    each object's mask (a family that segments asks for them)."""
    if config.dataset == "coco":
        datasets = _coco_datasets(config, data_root, instances)
    elif config.dataset == "manifest":
        datasets = _manifest_datasets(config, data_root)
    else:
        datasets = _voc_datasets(config, data_root)
    if config.val_fraction > 0:
        datasets = carve_validation(datasets, config.val_fraction, config.seed)
    if config.final_fit:
        datasets = final_fit(datasets)
    return datasets


def carve_validation(datasets, fraction, seed):
    """A validation split carved from the training images: ``round(fraction * N)`` of them (at
    least 1, leaving at least 1 to train), chosen by a generator seeded with ``seed``, so every
    rank and every resumed run carves the same split."""
    total = len(datasets.train)
    if total < 2:
        raise DataError("val_fraction=%g needs at least 2 training images to carve a validation "
                        "split from; there are %d." % (fraction, total),
                        "add training images, or set val_fraction=0 and name val_splits.")
    count = min(total - 1, max(1, int(round(fraction * total))))
    order = list(range(total))
    random.Random("carve-%d" % seed).shuffle(order)
    val_positions, train_positions = sorted(order[:count]), sorted(order[count:])
    logging.getLogger("detector_training").info(
        "validation split: carved %d of %d training images (val_fraction=%g, seed=%d); "
        "val_splits not used", count, total, fraction, seed)
    ratios = datasets.aspect_ratios
    return Datasets(train=datasets.train.subset(train_positions),
                    val=datasets.train.subset(val_positions), classes=datasets.classes,
                    aspect_ratios=[ratios[p] for p in train_positions],
                    val_aspect_ratios=[ratios[p] for p in val_positions])


def final_fit(datasets):
    """Train on the training and the validation images together (AutoGluon's final fit, once the
    hyperparameters are chosen). Validation still runs, on images the model has now seen."""
    logging.getLogger("detector_training").info(
        "final fit: training on %d training + %d validation images; validation scores are on "
        "images the model trains on", len(datasets.train), len(datasets.val))
    return Datasets(train=ConcatDataset(datasets.train, datasets.val), val=datasets.val,
                    classes=datasets.classes,
                    aspect_ratios=list(datasets.aspect_ratios) + list(
                        datasets.val_aspect_ratios or [1.0] * len(datasets.val)),
                    val_aspect_ratios=datasets.val_aspect_ratios)


def _voc_datasets(config, data_root):
    train_splits = voc_splits(config.train_splits)
    # A carved validation split (val_fraction) reads no validation split files.
    val_splits = voc_splits(config.val_splits) if config.val_fraction <= 0 else []
    years = sorted({y for y, _ in train_splits + val_splits})
    devkit = find_devkit(data_root, years)
    _check_split_files(devkit, train_splits + val_splits)
    if config.dataset == "voc":
        from gluoncv.data import VOCDetection

        classes = tuple(VOCDetection.CLASSES)
    else:
        classes = tuple(c.lower() for c in config.classes) or infer_voc_classes(devkit, train_splits)
    train, train_items = _voc_dataset(devkit, train_splits, classes, "training", config.skip_empty)
    if not val_splits:
        return Datasets(train=train, val=None, classes=classes,
                        aspect_ratios=voc_aspect_ratios(train_items))
    val, val_items = _voc_dataset(devkit, val_splits, classes, "validation", config.skip_empty)
    return Datasets(train=train, val=val, classes=classes, aspect_ratios=voc_aspect_ratios(train_items),
                    val_aspect_ratios=voc_aspect_ratios(val_items))


def _coco_datasets(config, data_root, instances=False):
    """COCO-format data (see coco_format.py): the training images that have objects of the chosen
    categories; every validation image, in id order, as GluonCV's COCO metrics expect. With
    ``instances``, objects carry their masks (GluonCV's COCOInstance layout)."""
    from detector_training.data.coco_format import (coco_dataset_class, coco_instance_class,
                                                    find_coco_root, named_annotation_file)

    cls = coco_instance_class() if instances else coco_dataset_class()
    if config.train_annotation_file:  # files at any path inside the channels (data_root)
        train_root, train_split, train_file = named_annotation_file(
            data_root, "train", config.train_annotation_file, config.train_image_dir)
        val_root, val_split, val_file = named_annotation_file(
            data_root, "val", config.val_annotation_file, config.val_image_dir)
        train_splits, val_splits = [train_split], [val_split]
        files = {"train": {train_split: train_file}, "val": {val_split: val_file}}
    else:
        train_splits, val_splits = list(config.train_splits), list(config.val_splits)
        train_root = val_root = find_coco_root(data_root, train_splits[0])
        files = {"train": {}, "val": {}}
    # Crowd boxes are left out of training (the instance reader always leaves them out).
    train = cls(train_root, train_splits, config.classes, annotation_files=files["train"],
                skip_empty=config.skip_empty, **({} if instances else {"use_crowd": False}))
    total = sum(len(coco.getImgIds()) for coco in train._coco)  # pylint: disable=protected-access
    negatives = sum(1 for label in train._labels if is_negative(label))  # pylint: disable=protected-access
    if len(train) == negatives:
        raise DataError("no training image in %s has an object of the classes %s."
                        % (",".join(train_splits), ", ".join(train.classes)),
                        "check the annotations, or choose other classes.")
    log_empty("training", total - len(train) + negatives, total, config.skip_empty)
    val = cls(val_root, val_splits, train.classes, annotation_files=files["val"], skip_empty=False)
    fix = "replace the file, or remove its entry from the split's JSON."
    return Datasets(train=SubsetDataset(train, range(len(train)), train._items, fix),  # pylint: disable=protected-access
                    val=SubsetDataset(val, range(len(val)), val._items, fix),  # pylint: disable=protected-access
                    classes=tuple(train.classes), aspect_ratios=list(train.get_im_aspect_ratio()),
                    val_aspect_ratios=list(val.get_im_aspect_ratio()))


def _manifest_datasets(config, root):
    """A Ground Truth manifest's data (see manifest.py) under ``root``: the ``train`` (or
    ``training``) channel's manifests, the ``validation`` channel's when there is one (not read
    when ``val_fraction`` carves the validation split), images in the ``images`` channel. Without
    a validation manifest (and val_fraction 0), DEFAULT_VAL_FRACTION of the training lines are
    carved, seeded by ``seed``. Classes come from the merged class maps (or ``classes``)."""
    train_dir = manifest.channel_in(root, manifest.MANIFEST_CHANNELS)
    if train_dir is None:
        raise DataError("no manifest channel: none of %s exists under %s."
                        % (", ".join(manifest.MANIFEST_CHANNELS), root),
                        "give the job a 'train' channel holding the Ground Truth manifest.")
    images = os.path.join(root, manifest.IMAGES_CHANNEL)
    if not os.path.isdir(images):
        raise DataError("no '%s' channel under %s: the manifest's source-refs are looked up there."
                        % (manifest.IMAGES_CHANNEL, root),
                        "give the job an 'images' channel on the S3 prefix the source-refs point "
                        "into (or use Pipe mode, which sends the images with the manifest).")
    train_entries = manifest.read_entries(train_dir, config.label_attribute)
    val_dir = None if config.val_fraction > 0 else manifest.channel_in(
        root, (manifest.VALIDATION_CHANNEL,))
    val_entries = manifest.read_entries(val_dir, config.label_attribute) if val_dir else []
    classes, index = manifest.class_list(train_entries + val_entries, config.classes)
    train, ratios = _manifest_dataset(train_entries, images, index, classes, config.skip_empty,
                                      "training")
    if val_entries:
        val, val_ratios = _manifest_dataset(val_entries, images, index, classes,
                                            config.skip_empty, "validation")
        return Datasets(train=train, val=val, classes=classes, aspect_ratios=ratios,
                        val_aspect_ratios=val_ratios)
    datasets = Datasets(train=train, val=None, classes=classes, aspect_ratios=ratios)
    if config.val_fraction > 0:
        return datasets  # build_datasets carves it
    return carve_validation(datasets, manifest.DEFAULT_VAL_FRACTION, config.seed)


def _manifest_dataset(entries, images, index, classes, skip_empty, what):
    """A SubsetDataset of the entries with boxes of the trained classes (``index``: class id ->
    class), and those without when ``skip_empty`` is off (kept as negatives), their images found
    under ``images``; the count of images without boxes is logged. Returns (dataset, aspect
    ratios)."""
    paths = manifest.match_images(entries, images)
    labels = [manifest.entry_label(entry, index) for entry in entries]
    empty = {i for i, label in enumerate(labels) if is_negative(label)}
    log_empty(what, len(empty), len(entries), skip_empty)
    if len(empty) == len(entries):
        raise DataError("no %s image of the manifest has a box of the classes %s."
                        % (what, ", ".join(classes)),
                        "check the manifest's class ids and the 'classes' hyperparameter.")
    keep = [i for i in range(len(entries)) if not (skip_empty and i in empty)]
    reader = manifest.ManifestDetection([paths[i] for i in keep], [labels[i] for i in keep], classes)
    described = ["image %s of %s" % (entries[i].source_ref, entries[i].where) for i in keep]
    dataset = SubsetDataset(reader, range(len(keep)), described,
                            "replace the image, or remove its line from the manifest.")
    return dataset, [entries[i].width / float(entries[i].height) for i in keep]


class MultiScaleBatchSampler:
    """Multi-scale training: the equal-steps batches, each sample tagged with the input size to
    use, as ``(index, size choice)``. A new size is drawn every ``interval`` batches from a
    generator seeded by (seed, epoch, rank, batch group), so a resumed epoch sees the same sizes
    and ranks draw their own. Every sample of a batch has the same size (they are stacked)."""

    def __init__(self, inner, choices, interval, seed, rank):
        self._inner = inner
        self._choices = choices
        self._interval = max(1, int(interval))
        self._seed = seed
        self._rank = rank
        self._epoch = 0
        self._skip = 0

    def set_epoch(self, epoch, skip=0):
        self._epoch, self._skip = epoch, skip
        self._inner.set_epoch(epoch, skip)

    def __len__(self):
        return len(self._inner)

    def choice(self, epoch, batch_number):
        group = batch_number // self._interval
        rng = random.Random("%d-%d-%d-%d" % (self._seed, epoch, self._rank, group))
        return rng.randrange(self._choices)

    def batches(self, epoch):
        return [[(i, self.choice(epoch, n)) for i in batch]
                for n, batch in enumerate(self._inner.batches(epoch))]

    def __iter__(self):
        return iter(self.batches(self._epoch)[self._skip:])


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


LOADER_CLOSE_S = 10  # for a loader's workers to finish what was sent and leave


def close_loader(loader, timeout_s=LOADER_CLOSE_S):
    """End a DataLoader's worker processes now, the orderly way: the pool is closed, so each
    worker takes its end-of-work sentinel from the task queue and leaves by itself. Left to the
    loader's ``__del__`` or to interpreter exit, the pool is ``terminate()``d instead, which waits
    on a lock an idle or killed worker may hold: a finished job then never exits. Workers still
    alive after ``timeout_s`` are killed. Loaders without worker processes are left as they are;
    a closed loader cannot be iterated again."""
    import threading

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
