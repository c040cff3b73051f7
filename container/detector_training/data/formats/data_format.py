"""What a data format is: :class:`DataFormat`, the seam between the job and one way labelled
images arrive (a VOCdevkit tree, COCO-format JSON, a Ground Truth manifest, an export of a
labelling tool), and :class:`LabelledFormat`, the base for a format whose reader gives a
:class:`~detector_training.data.labelled.LabelledSet`.

What the format is, as class attributes (plain values, read without MXNet by the configuration,
the recognition and the docs):

* ``name``: the ``dataset`` hyperparameter's value that selects it; ``title``: what it is, for the
  log and messages;
* ``channels``: the channels it reads, in the order it looks (the first existing one holds the
  data; ``validation`` beside it, where the format reads one);
* ``preset``: hyperparameter defaults for data in this format (its splits, its schedule; a
  family's preset for the format's ``style`` goes over them, the job's hyperparameters over both);
* ``style``: what kind of data it is, one of :data:`DATA_STYLES`: ``"voc"`` (a few to tens of
  classes, hundreds to tens of thousands of images: Pascal VOC and a labelling tool's project) or
  ``"coco"`` (COCO-style data and schedules); the families key their presets by it, so every
  format gets each family's preset, also a format registered later;
* ``options``: the hyperparameters of :data:`FORMAT_OPTIONS` that only this format takes (setting
  one with another format is a ConfigError);
* ``metric``: what scores a box detector on it, an object of core/evaluation.py: ``VOC07`` (VOC07
  mAP at IoU 0.5) or ``COCO`` (COCO's AP over the validation annotation file); ``masks``: whether
  its objects carry instance masks (a segmenting family trains only on such a format);
  ``fixed_classes``: its class list is fixed by the format (voc's 20), so the ``classes``
  hyperparameter does not apply and a model scored on it must have that list;
* ``frame``: which picture of a photo stored with an EXIF orientation tag its labelling tool
  showed, so the one its boxes are in (``readers/images.Frame``): ``ORIENTED`` (upright, as
  browsers, CVAT, Label Studio, Ground Truth, Ultralytics and Roboflow show it), ``STORED`` (the
  pixels as stored) or ``BY_SIZE`` (per image, the one its annotation's stated size matches).
  Training, validation, the data check and the evaluation decode and size each image in it;
* ``names_by_classes``: its data names classes by number and the ``classes`` hyperparameter names
  them (the built-in algorithm's ids without ``categories``), so its reading depends on that list;
  for every other format ``classes`` only selects among the names the data gives, after one read.

What it does, as methods:

* ``recognise(channel)``: from a channel's contents (cheap: folder and file names, no MXNet),
  where in it the format found itself (a short text for the log), or None;
* ``check_config(config)``: the problems (texts) of hyperparameters with this format, reported
  with every other problem at once;
* ``data_root(config, env, world)``: the folder ``read`` reads (fetching the data once per host
  where the format fetches: only ``voc`` fetches the official VOC tars). ``env`` is the job's
  snapshot (``job/sm_env.Environment``: ``paths.channels_dir``, ``data_channel(names)``,
  ``input_data_config``, ``work_dir``, ``environ``), passed in from above;
* ``generate(channels_dir, n_train, n_test, n_train_2012, seed)`` (optional): generated sample
  data in the format's channel, for ``detector-run`` and tests;
* ``read(config, data_root, instances=False)``: the training and validation data as
  :class:`~detector_training.data.common.Datasets` (``instances``: each object's mask too, which
  only a format with ``masks`` gives). Carving a validation split with ``val_fraction`` and the
  final fit are done after it, for every format (``formats.build_datasets``).

A new format is one module that subclasses DataFormat (or LabelledFormat), registered with
``formats.register`` (the built-in ones in ``data/formats/__init__.py``).
"""

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from detector_training.core.evaluation import VOC07
from detector_training.data.common import SubsetDataset, carve_validation, with_validation
from detector_training.data.labelled import Drops, LabelledDetection, boxes_of, select  # noqa: F401 (formats' seam)
from detector_training.data.readers.images import Frame
from detector_training.data.negatives import log_empty, negative_label
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")
# A label row: corners in the image's pixels, class index, difficult (1: no metric counts it).
LABEL_COLUMNS = 6

# Hyperparameters that only some formats take; each format lists those it takes in ``options``.
FORMAT_OPTIONS = ("label_attribute", "train_annotation_file", "val_annotation_file")
VALIDATION_CHANNEL = "validation"
# The kinds of data a format declares itself to be (``DataFormat.style``); families key presets by them.
DATA_STYLES = ("voc", "coco")
# The defaults of a format that declares none: GluonCV's VOC ones (a custom dataset's), its
# splits named after the channels.
# An empty validation split (Roboflow's valid/ with no image, a YOLO val: folder without images)
# is as none: a share of the training images is carved instead, and the log and the data check
# say so with this line.
EMPTY_VALIDATION = ("validation: %s has no image; %g of the training images are carved as the "
                    "validation split instead (seed %d)")
GENERIC_PRESET = dict(epochs=20, lr=0.001, lr_decay_epoch=(14, 20), lr_warmup=-1, wd=5e-4,
                      lr_base_batch_size=4, train_splits=("train",),
                      val_splits=(VALIDATION_CHANNEL,))


@dataclass(frozen=True)
class Channel:
    """One input channel of the job: its name, its folder (absent for a Pipe-mode channel, whose
    data arrives through FIFOs) and its entry of ``inputdataconfig.json`` ({} when none)."""

    name: str
    path: str
    config: dict = field(default_factory=dict)

    @property
    def pipe(self):
        return self.config.get("TrainingInputMode") == "Pipe"

    def names(self):
        """The names at the channel's top level, sorted ([] when it is not a folder)."""
        try:
            return sorted(os.listdir(self.path))
        except OSError:
            return []


def empty_training(layout):
    """The DataError of a training split that holds no image."""
    return DataError("the training data (%s) has no image." % layout,
                     "put the training images (and their labels) where the export says, or "
                     "send the split that holds them.")


class DataFormat:
    name = ""
    title = ""
    channels = ("train", "training")
    preset = GENERIC_PRESET
    style = "voc"
    options = ()
    metric = VOC07
    masks = False
    fixed_classes = False
    frame = Frame.ORIENTED
    names_by_classes = False

    def recognise(self, channel):
        """Where in ``channel`` (a :class:`Channel`) this format's data lies, or None."""
        return None

    def check_config(self, config):
        """The problems of ``config`` with this format, as texts (none: [])."""
        return []

    def data_root(self, config, env, world):
        """The first of ``channels`` the job has (the folder ``read`` reads)."""
        name, path = env.data_channel(self.channels)
        if path is None:
            raise DataError("no data channel for dataset=%s: none of %s exists under %s."
                            % (self.name, ", ".join(self.channels), env.paths.channels_dir),
                            "give the job a '%s' channel holding the %s." % (self.channels[0],
                                                                             self.title or self.name))
        LOG.info("data: dataset=%s (%s) in channel '%s'", self.name, self.title or self.name, name)
        return path

    def read(self, config, data_root, instances=False):
        raise NotImplementedError

    def labelled(self, channels_dir, split, config):
        """For the data check: ``split``'s ("train" or "validation") labelled images as a
        :class:`~detector_training.data.labelled.LabelledSet`, read from ``channels_dir`` (a
        folder laid out as the job's channels) without MXNet and without decoding an image; None
        when the data has no such split. A broken file is a DataError naming it. The base raises
        NotImplementedError: the format's data is described only when the job reads it."""
        raise NotImplementedError

    def labelled_root(self, data_root, channels_dir):
        """The folder ``labelled`` reads in a job whose ``data_root`` the format gave: the
        channels folder, or where the format's data_root lays the channels out (a Pipe-mode
        copy)."""
        return channels_dir

    def carve(self, datasets, fraction, seed):
        """``datasets`` with ``fraction`` of the training images carved as the validation split
        (``val_fraction``), by seeded positions. A format whose metric scores an annotation file
        (coco) carves while it reads, so that the metric's ground truth is the carved part, and
        returns ``datasets`` as they are."""
        return carve_validation(datasets, fraction, seed)

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """Generated sample data in this format under ``channels_dir`` (``make run``, tests)."""
        raise DataError("dataset=%s has no generated sample data." % self.name,
                        "run detector-run with dataset=custom or dataset=coco.")


class LabelledFormat(DataFormat):
    """A format whose reader gives a :class:`LabelledSet` per split; the base turns it into the
    Datasets the box families train on.

    A subclass declares ``name``, ``title``, ``channels`` (the training data's channels, and
    ``validation`` where it reads one) and implements:

    * ``recognise(channel)`` (see DataFormat);
    * ``read_labelled(data_root, split, config)`` -> LabelledSet or None. ``data_root`` is the
      job's channels folder (``/opt/ml/input/data``); ``split`` is ``"train"`` or
      ``"validation"``, and ``self.channel_path(data_root, split)`` is that split's channel
      folder (the first existing training channel; the ``validation`` channel), None when the job
      has none. Return None for "validation" when there is no validation data: then a seeded
      split is carved from the training images (``val_fraction``, else DEFAULT_VAL_FRACTION). Boxes are in pixels with class *names*; what the reader
      leaves out is counted in the set's ``drops``; ``size`` is the image's (width, height) as
      its header says (None: unknown, aspect ratio 1 assumed); ``layout`` names what it read.

    The base then: takes the classes in the order of the ``classes`` hyperparameter, else the
    training set's ``class_names()``; makes label rows ``[x1, y1, x2, y2, class index]``; drops
    (and counts) boxes of classes not asked for; leaves out images without boxes with
    ``skip_empty``, else keeps them as negatives (the placeholder row of ``negative_label``);
    takes the aspect ratios from ``size``; logs the layout found, images and objects per class,
    and the drop tally by reason. Images are decoded as RGB (``readers/images.decode``, turned
    upright where the image's ``oriented`` says) when a sample is read; a file that does not
    decode is a DataError naming it. A reader sizes and frames each image by the format's
    ``frame`` (passed to it).
    """

    DEFAULT_VAL_FRACTION = 0.1

    def read_labelled(self, data_root, split, config):
        raise NotImplementedError

    def labelled(self, channels_dir, split, config):
        return self.read_once(channels_dir, split, config)

    def read_once(self, data_root, split, config):
        """``read_labelled``, each (folder, split) read once by this format instance: the job's
        one instance gives the data report the sets its training read, and an evaluation its
        data's own classes and then the model's, so every annotation file is parsed once per job
        on a rank. The ``classes`` hyperparameter then declares the classes among those read, in
        its order and spelling (labelled.select; the boxes of the others are left out and counted
        where the datasets are made, boxes_of), unless it names the data (``names_by_classes``)."""
        read = vars(self).setdefault("_read", {})
        asked = tuple(config.classes)
        if not self.names_by_classes:
            config = replace(config, classes=())
        key = (data_root, split, config)
        if key not in read:
            read[key] = self.read_labelled(data_root, split, config)
        labelled = read[key]
        if labelled is None or self.names_by_classes or not asked:
            return labelled
        return select(labelled, asked)

    def labelled_root(self, data_root, channels_dir):
        return data_root

    def channel_path(self, data_root, split):
        """The folder of ``split`` ("train": the first existing of the training channels;
        "validation": the validation channel) under the channels folder, or None."""
        names = ((VALIDATION_CHANNEL,) if split == VALIDATION_CHANNEL
                 else tuple(c for c in self.channels if c != VALIDATION_CHANNEL))
        return next((os.path.join(data_root, n) for n in names
                     if os.path.isdir(os.path.join(data_root, n))), None)

    def data_root(self, config, env, world):
        """The channels folder (each split's reader finds its channel in it), once the first
        training channel is known to exist."""
        super().data_root(config, env, world)
        return env.paths.channels_dir

    def export_in(self, folder, find, holds_no, fix):
        """The export ``find`` recognises in ``folder`` (looked for once per real folder), or a
        DataError naming the folder: "channel folder <folder> holds no <holds_no>."."""
        exports = vars(self).setdefault("_exports", {})
        key = os.path.realpath(folder)  # an evaluation's staged channels link to one folder
        if key not in exports:
            export = find(folder)
            if export is None:
                raise DataError("channel folder %s holds no %s." % (folder, holds_no), fix)
            exports[key] = export
        return exports[key]

    def read(self, config, data_root, instances=False):
        train_set = self.read_once(data_root, "train", config)
        if train_set is None:
            raise DataError("no training data for dataset=%s under %s (none of the channels %s)."
                            % (self.name, data_root, ", ".join(self.channels)),
                            "give the job a '%s' channel holding the %s."
                            % (self.channels[0], self.title or self.name))
        if not train_set.images:
            raise empty_training(train_set.layout or self.title or self.name)
        val_set = (None if config.val_fraction > 0
                   else self.read_once(data_root, VALIDATION_CHANNEL, config))
        if val_set is not None and not val_set.images:
            LOG.warning("data: " + EMPTY_VALIDATION, val_set.layout or self.name,
                        self.DEFAULT_VAL_FRACTION, config.seed)
            val_set = None
        classes = tuple(config.classes) or train_set.class_names()
        if not classes:
            raise DataError("the training data (%s) has no labelled object." % train_set.layout,
                            "label at least one object, or name the classes with 'classes'.")
        train, ratios = self.labelled_dataset(train_set, classes, config.skip_empty, "training")
        val, val_ratios = (self.labelled_dataset(val_set, classes, config.skip_empty, "validation")
                           if val_set is not None else (None, None))
        return with_validation(train, ratios, classes, val, val_ratios, config.val_fraction,
                               self.DEFAULT_VAL_FRACTION, config.seed)

    def labelled_dataset(self, labelled, classes, skip_empty, what):
        """(a SubsetDataset of the set's images with label rows of ``classes``, aspect ratios)."""
        index = {name: i for i, name in enumerate(classes)}
        drops = Drops().merge(labelled.drops)  # the set itself is left as read (the report reads it)
        labels = []
        for image in labelled.images:
            rows = [[box.xmin, box.ymin, box.xmax, box.ymax, index[box.label], float(box.difficult)]
                    for box in boxes_of(image, index, drops)]
            labels.append(np.asarray(rows, dtype="float32") if rows else negative_label(LABEL_COLUMNS))
        empty = {i for i, rows in enumerate(labels) if rows[0, 4] < 0}
        log_empty(what, len(empty), len(labels), skip_empty)
        if len(empty) == len(labels):
            raise DataError("no %s image of %s has an object of the classes %s."
                            % (what, labelled.layout or self.name, ", ".join(classes)),
                            "check the labels, or name the classes with 'classes'.")
        keep = [i for i in range(len(labels)) if not (skip_empty and i in empty)]
        self.log_found(labelled, what, classes, drops)
        images = [labelled.images[i] for i in keep]
        reader = self.detection_reader(images, [labels[i] for i in keep], classes)
        described = ["image %s%s" % (im.path, " of %s" % im.where if im.where else "")
                     for im in images]
        ratios = [(im.size[0] / float(im.size[1])) if im.size and im.size[1] else 1.0
                  for im in images]
        return SubsetDataset(reader, range(len(keep)), described,
                             "replace the image, or remove it and its label."), ratios

    def detection_reader(self, images, labels, classes):
        """The dataset that reads these LabelledImages' pixels with their label rows: each image
        file decoded in its frame (a format whose images are not files, e.g. records, overrides
        it)."""
        return LabelledDetection([image.path for image in images], labels, classes,
                                 [image.oriented for image in images])

    def log_found(self, labelled, what, classes, drops):
        counts = OrderedDict((name, 0) for name in classes)
        for image in labelled.images:
            for box in image.boxes:
                if box.label in counts:
                    counts[box.label] += 1
        LOG.info("data: %s %s: %s, %d images, objects per class: %s", self.name, what,
                 labelled.layout or self.title, len(labelled.images),
                 ", ".join("%s %d" % item for item in counts.items()))
        for heading, tally in (("left out", drops), ("changed but kept", labelled.adjusted)):
            if tally:
                LOG.info("data: %s %s: %s: %s", self.name, what, heading, "; ".join(
                    "%s: %d (%s)" % (reason, count, ", ".join(tally.examples(reason)))
                    for reason, count in tally.counts().items()))
