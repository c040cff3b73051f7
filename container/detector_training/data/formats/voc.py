"""Pascal VOC XML in a VOCdevkit tree: the official VOC (dataset=voc) and a custom one
(dataset=custom), read with GluonCV's VOC reader."""

import os
from xml.etree import ElementTree as ET

from detector_training.values import voc_splits
from detector_training.errors import DataError
from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.negatives import log_empty
from detector_training.data.voc_layout import find_devkit


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
