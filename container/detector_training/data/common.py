"""What every data format's datasets share: the pair the families train on (:class:`Datasets`),
the wrappers around a format's reader (a subset that names the file it cannot read, two datasets end
to end), a validation split carved from the training images, and the final fit.
"""

import logging
import random
from dataclasses import dataclass

import numpy as np

from detector_training.core.evaluation import VOC07, Metric
from detector_training.data.negatives import negative_label
from detector_training.errors import DataError


@dataclass
class Datasets:
    train: object
    val: object
    classes: tuple
    aspect_ratios: list  # width / height of each training image
    val_aspect_ratios: list = None  # the same for validation (None: assume the training ones)
    metric: Metric = VOC07  # what scores it: the format's (core/evaluation.py's VOC07 or COCO)


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


def with_validation(train, ratios, classes, val, val_ratios, val_fraction, default_fraction,
                    seed):
    """The Datasets of a training set and its validation set: ``val`` when given; else none when
    ``val_fraction`` > 0 (``build_datasets`` carves that share); else ``default_fraction`` of the
    training images carved, for a format whose data may bring no validation set."""
    if val is not None:
        return Datasets(train=train, val=val, classes=classes, aspect_ratios=ratios,
                        val_aspect_ratios=val_ratios)
    datasets = Datasets(train=train, val=None, classes=classes, aspect_ratios=ratios)
    if val_fraction > 0:
        return datasets
    return carve_validation(datasets, default_fraction, seed)


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
