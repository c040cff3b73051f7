"""dataset=yolo: YOLO text labels as Ultralytics and Roboflow export them
(``data/readers/yolo_labels.py``): a dataset YAML with the class names and the splits' image
folders, ``images/<split>`` beside ``labels/<split>``. The YAML's ``train`` trains; its ``val``,
or the ``validation`` channel's dataset, validates, else a seeded share is carved
(``val_fraction``)."""

import logging
import os

from detector_training.data.formats.data_format import (GENERIC_PRESET, VALIDATION_CHANNEL,
                                                        LabelledFormat)
from detector_training.data.readers import split_names, yolo_labels
from detector_training.data.readers.images import Frame
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")


class Yolo(LabelledFormat):
    """YOLO labels: recognised by a dataset YAML with ``names`` (or ``nc``) in the channel."""

    name = "yolo"
    title = "YOLO text labels (Ultralytics, Roboflow)"
    channels = ("train", "training", VALIDATION_CHANNEL)
    preset = GENERIC_PRESET
    frame = Frame.ORIENTED  # Ultralytics sizes and trains on the upright picture (exif_size)

    def recognise(self, channel):
        if not os.path.isdir(channel.path):
            return None
        export = yolo_labels.find_export(channel.path)
        if export is None:
            return None
        return "%s (%s)" % (export.layout, os.path.relpath(export.yaml_path, channel.path))

    def read_labelled(self, data_root, split, config):
        train_dir = self.channel_path(data_root, "train")
        if train_dir is None:
            return None
        export = self._export(train_dir)
        if split == "train":
            names = split_names(export, "train")
            if not names:
                raise DataError("dataset YAML %s names no 'train' split (it has %s)."
                                % (export.yaml_path, ", ".join(sorted(export.splits))),
                                "add 'train: <folder of training images>'.")
            return export.read(names[0], frame=self.frame)
        val_dir = self.channel_path(data_root, VALIDATION_CHANNEL)
        if val_dir is not None:
            export = self._export(val_dir)
            names = split_names(export, "validation") or split_names(export, "train")
            return export.read(names[0], frame=self.frame)
        names = split_names(export, "validation")
        return export.read(names[0], frame=self.frame) if names else None

    def _export(self, folder):
        return self.export_in(folder, yolo_labels.find_export,
                              "YOLO dataset YAML (with 'names')",
                              "put the dataset as Ultralytics or Roboflow exports it, data.yaml "
                              "included, in the channel.")
