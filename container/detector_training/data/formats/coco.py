"""COCO-format JSON (see coco_format.py), read with GluonCV's COCO readers."""

from detector_training.errors import DataError
from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.negatives import is_negative, log_empty


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
