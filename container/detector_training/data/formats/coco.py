"""COCO-format JSON (see coco_format.py), read with GluonCV's COCO readers: its own categories,
boxes and instance masks, scored by COCO's AP over the validation annotation file."""

import os

from detector_training.errors import DataError
from detector_training.data.coco_format import ANNOTATIONS
from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.formats.data_format import DataFormat
from detector_training.data.negatives import is_negative, log_empty

COCO_SPLITS = ("instances_train2017",)
COCO_VAL_SPLITS = ("instances_val2017",)
# GluonCV's train_faster_rcnn.py defaults for COCO (lr given for a global batch of 8 x 1).
COCO_PRESET = dict(epochs=26, lr=0.01, lr_decay_epoch=(17, 23), lr_warmup=1000, wd=1e-4,
                   lr_base_batch_size=8, train_splits=COCO_SPLITS, val_splits=COCO_VAL_SPLITS)


class COCO(DataFormat):
    name = "coco"
    title = "COCO-format JSON"
    channels = ("coco", "train", "training")
    preset = COCO_PRESET
    options = ("train_annotation_file", "val_annotation_file")
    metric = "coco"
    masks = True

    def recognise(self, channel):
        """annotations/<split>.json in the channel or a folder directly under it."""
        for folder in [""] + [n for n in channel.names()
                              if os.path.isdir(os.path.join(channel.path, n))]:
            notes = os.path.join(channel.path, folder, ANNOTATIONS)
            try:
                found = sorted(n for n in os.listdir(notes) if n.endswith(".json"))
            except OSError:
                continue
            if found:
                return ", ".join(os.path.join(folder, ANNOTATIONS, n) for n in found[:4])
        return None

    def check_config(self, config):
        problems = []
        if len(config.val_splits or ()) > 1:
            problems.append("val_splits=%s: COCO validation reads one annotation file; name one "
                            "split" % ",".join(config.val_splits))
        if config.val_fraction > 0:
            problems.append("val_fraction=%g: COCO's metric scores a whole annotation file, so a "
                            "validation split cannot be carved from coco training data; name one "
                            "with val_splits" % config.val_fraction)
        return problems

    def data_root(self, config, env, world):
        """The channels' folder when annotation files are named by path, else the COCO channel."""
        if config.train_annotation_file:
            return env.paths.channels_dir
        name, path = env.data_channel(self.channels)
        if path is None:
            raise DataError("no data channel: none of %s exists under %s."
                            % (", ".join(self.channels), env.paths.channels_dir),
                            "give the job a 'coco' channel holding annotations/<split>.json and "
                            "the split's image folders.")
        return path

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """A generated COCO-format dataset (own categories, masks) in the 'coco' channel."""
        from detector_training.data.synthetic_coco import generate

        channel = os.path.join(channels_dir, "coco")
        if not os.path.isdir(os.path.join(channel, ANNOTATIONS)):
            generate(channel, n_train + n_train_2012, n_test, seed=seed)

    def read(self, config, data_root, instances=False):
        return _coco_datasets(config, data_root, instances)


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
