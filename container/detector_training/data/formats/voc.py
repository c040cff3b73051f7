"""The official Pascal VOC 2007/2012 (dataset=voc: its 20 classes; the tars from the channel,
data_s3_uri or the mirrors), read with GluonCV's VOC reader. Your own classes in VOC XML, in a
VOCdevkit tree or a labelling tool's export, are dataset=custom (custom.py)."""

import os
from xml.etree import ElementTree as ET

from detector_training.values import is_voc_split, voc_splits
from detector_training.errors import DataError
from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.formats.data_format import DataFormat
from detector_training.data.layouts.images import Frame, decode_nd
from detector_training.data.negatives import log_empty
from detector_training.data.sources import FetchOptions
from detector_training.data.voc_fetch import DATA_CHANNELS, acquire_voc
from detector_training.data.voc_layout import VOC_TARS, find_devkit

VOC_SPLITS = ("2007_trainval", "2012_trainval")
VOC_VAL_SPLITS = ("2007_test",)
# GluonCV's train_faster_rcnn.py defaults for VOC. lr_base_batch_size is the global batch the
# published learning rate was tuned for (4 GPUs x 1 image).
VOC_PRESET = dict(epochs=20, lr=0.001, lr_decay_epoch=(14, 20), lr_warmup=-1, wd=5e-4,
                  lr_base_batch_size=4, train_splits=VOC_SPLITS, val_splits=VOC_VAL_SPLITS)


def check_voc_splits(config):
    """Problems of train_splits/val_splits for a VOCdevkit tree (YEAR_NAME each)."""
    problems = []
    for splits_key in ("train_splits", "val_splits"):
        bad = [s for s in getattr(config, splits_key) or () if not is_voc_split(s)]
        if bad:
            problems.append("%s=%s: expected YEAR_NAME such as 2007_trainval"
                            % (splits_key, ",".join(bad)))
    return problems


class VOC(DataFormat):
    """The official Pascal VOC 2007/2012: recognised by its tars in the channel."""

    name = "voc"
    title = "Pascal VOC 2007/2012 (20 classes)"
    channels = DATA_CHANNELS
    preset = VOC_PRESET
    fixed_classes = True  # GluonCV's VOCDetection: its 20 classes, in its order
    frame = Frame.STORED  # the official images carry no orientation tag

    def recognise(self, channel):
        tars = [name for name, _ in VOC_TARS if name in channel.names()]
        return "the VOC tars %s" % ", ".join(tars) if tars else None

    def check_config(self, config):
        problems = check_voc_splits(config)
        if config.classes:
            problems.insert(0, "classes is only used with dataset=custom or coco (dataset=voc has "
                               "its 20 classes)")
        if getattr(config, "num_classes", None) not in (None, 20):
            problems.append("num_classes=%d: dataset=voc has its 20 classes (dataset=custom trains "
                            "your own)" % config.num_classes)
        return problems

    def data_root(self, config, env, world):
        return acquire_voc(config, env, world, env.work_dir,
                           FetchOptions.from_environ(env.environ), self.channels)

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """A generated VOCdevkit (VOC2007, and VOC2012 with ``n_train_2012``) in the 'voc'
        channel, kept when one is there."""
        from detector_training.data.synthetic_voc import generate

        channel = os.path.join(channels_dir, "voc")
        if not os.path.isdir(os.path.join(channel, "VOCdevkit")):
            generate(channel, n_train, n_test, n_train_2012, seed=seed)

    def read(self, config, data_root, instances=False):
        from gluoncv.data import VOCDetection

        return _voc_datasets(config, data_root, tuple(VOCDetection.CLASSES),
                             bool(self.frame.oriented()))


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


def _voc_class(classes, oriented):
    """GluonCV's VOC reader for ``classes``, its images decoded by ``images.decode`` (turned
    upright by their EXIF tag when ``oriented``)."""
    from gluoncv.data import VOCDetection

    def __getitem__(self, idx):  # GluonCV's, but for the decoder
        img_id = self._items[idx]
        label = self._label_cache[idx] if self._label_cache else self._load_label(idx)
        img = decode_nd(self._image_path.format(*img_id), oriented)
        if self._transform is not None:
            return self._transform(img, label)
        return img, label.copy()

    return type("FramedVOCDetection", (VOCDetection,),
                {"CLASSES": tuple(classes), "__getitem__": __getitem__})


def _voc_dataset(devkit, splits, classes, what, skip_empty, oriented):
    """GluonCV's VOC reader for ``classes``; images without any object of those classes (GluonCV
    skips other class names) are left out with ``skip_empty``, else kept as negatives."""
    dataset = _voc_class(classes, oriented)(root=devkit, splits=splits)
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


def _voc_datasets(config, data_root, classes, oriented):
    """The VOCdevkit tree's splits; ``classes``: the fixed class list, else None (the configured
    classes, else those found in the training annotations); ``oriented``: images turned upright
    by their EXIF tag."""
    train_splits = voc_splits(config.train_splits)
    # A carved validation split (val_fraction) reads no validation split files.
    val_splits = voc_splits(config.val_splits) if config.val_fraction <= 0 else []
    years = sorted({y for y, _ in train_splits + val_splits})
    devkit = find_devkit(data_root, years)
    _check_split_files(devkit, train_splits + val_splits)
    if classes is None:
        classes = tuple(c.lower() for c in config.classes) or infer_voc_classes(devkit, train_splits)
    train, train_items = _voc_dataset(devkit, train_splits, classes, "training", config.skip_empty,
                                      oriented)
    if not val_splits:
        return Datasets(train=train, val=None, classes=classes,
                        aspect_ratios=voc_aspect_ratios(train_items))
    val, val_items = _voc_dataset(devkit, val_splits, classes, "validation", config.skip_empty,
                                  oriented)
    return Datasets(train=train, val=val, classes=classes, aspect_ratios=voc_aspect_ratios(train_items),
                    val_aspect_ratios=voc_aspect_ratios(val_items))
