"""COCO-format JSON (see readers/coco_format.py), read with GluonCV's COCO readers: its own categories,
boxes and instance masks, scored by COCO's AP over the validation annotation file. The data is
GluonCV's layout (annotations/<split>.json), files named by path, or a labelling tool's export as
the tool wrote it (CVAT, Roboflow, Label Studio: see readers/coco_exports.py)."""

import logging
import os

from detector_training.core.evaluation import COCO
from detector_training.errors import DataError
from detector_training.data.readers.coco_format import ANNOTATIONS, find_coco_root
from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.formats.data_format import EMPTY_VALIDATION, DataFormat, empty_training
from detector_training.data.readers import coco_exports
from detector_training.data.readers.images import Frame
from detector_training.data.negatives import is_negative, log_empty

LOG = logging.getLogger("detector_training")

# The share of an export's training images carved as validation when it has no validation split
# (val_fraction is refused for COCO; as the other formats' default).
DEFAULT_VAL_FRACTION = 0.1
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
    # CVAT, Label Studio and Roboflow show photos upright; a COCO file's sizes are that picture's.
    frame = Frame.ORIENTED
    options = ("train_annotation_file", "val_annotation_file")
    style = "coco"
    metric = COCO
    masks = True

    def recognise(self, channel):
        """A labelling tool's COCO export, else annotations/<split>.json in the channel or a
        folder directly under it."""
        exports = coco_exports.find_exports(channel.path)
        if exports:
            return "; ".join(e.describe(channel.path) for e in exports[:4])
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
        if config.val_fraction > 0 and len(config.train_splits or ()) > 1 \
                and not config.train_annotation_file:
            problems.append("val_fraction=%g carves the validation images from one COCO annotation "
                            "file; train_splits=%s names %d: name one"
                            % (config.val_fraction, ",".join(config.train_splits),
                               len(config.train_splits)))
        return problems

    def carve(self, datasets, fraction, seed):
        """``read`` carved the validation images by image id already (COCO's metric scores an
        annotation file: its ground truth is the carved part of the training file)."""
        return datasets

    def data_root(self, config, env, world):
        """The channels' folder when annotation files are named by path or a tool's export is
        sent (its validation may be in another channel), else the COCO channel."""
        if config.train_annotation_file:
            return env.paths.channels_dir
        name, path = env.data_channel(self.channels)
        if path is None:
            raise DataError("no data channel: none of %s exists under %s."
                            % (", ".join(self.channels), env.paths.channels_dir),
                            "give the job a 'coco' channel holding annotations/<split>.json and "
                            "the split's image folders.")
        if _holds_export(path, config):
            return env.paths.channels_dir
        return path

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """A generated COCO-format dataset (own categories, masks) in the 'coco' channel."""
        from detector_training.data.generated.synthetic_coco import generate

        channel = os.path.join(channels_dir, "coco")
        if not os.path.isdir(os.path.join(channel, ANNOTATIONS)):
            generate(channel, n_train + n_train_2012, n_test, seed=seed)

    @property
    def documents(self):
        """The annotation files this instance (the job's one) has read, each read once."""
        from detector_training.data.readers.coco_format import Documents

        return vars(self).setdefault("_documents", Documents())

    def read(self, config, data_root, instances=False):
        if not config.train_annotation_file:
            channel = coco_exports.training_channel(data_root, self.channels)
            if channel and _holds_export(channel, config):
                return _export_datasets(config, data_root, self.channels, instances, self.frame,
                                        self.documents)
        return _coco_datasets(config, data_root, instances, self.frame, self.documents)

    def labelled(self, channels_dir, split, config):
        """The annotation file that ``read`` reads for ``split``, as a LabelledSet: sizes from
        the image entries, crowd boxes left out as in training."""
        from detector_training.data.readers.coco_format import (annotation_file, category_names,
                                                        find_coco_root, image_paths,
                                                        named_annotation_file)

        kind = "train" if split == "train" else "val"
        if not config.train_annotation_file:
            channel = coco_exports.training_channel(channels_dir, self.channels)
            if channel and _holds_export(channel, config):
                exports = coco_exports.locate(channels_dir, self.channels)
                export = exports[0] if kind == "train" else exports[1]
                return (None if export is None
                        else coco_exports.read_labelled(export, channels_dir, self.frame,
                                                        self.documents))
        if config.train_annotation_file:
            root, name, path = named_annotation_file(
                channels_dir, kind, getattr(config, kind + "_annotation_file"),
                getattr(config, kind + "_image_dir"))
        else:
            channel = next((os.path.join(channels_dir, c) for c in self.channels
                            if os.path.isdir(os.path.join(channels_dir, c))), None)
            if channel is None:
                return None
            name = (config.train_splits if kind == "train" else config.val_splits)[0]
            root = find_coco_root(channel, name)
            path = annotation_file(root, name)
        document = self.documents(path)
        return _labelled_document(document, category_names(document, path), path,
                                  lambda entry: image_paths(root, name, entry), self.frame)


def _labelled_document(document, names, path, candidates, frame):
    """A COCO document's images and boxes ([x, y, width, height] in pixels, of the ``frame``) as
    a LabelledSet; an image file found at none of its ``candidates`` is a DataError naming it.
    No image file is opened (a COCO file may list a hundred thousand): sizes are the document's
    and EXIF orientation tags are not read (not counted)."""
    from detector_training.data.labelled import Box, LabelledImage, LabelledSet

    by_id = {c["id"]: c["name"] for c in document["categories"]}
    labelled = LabelledSet(classes=names, layout="COCO-format JSON %s" % path)
    images, listed = {}, {}

    def exists(candidate):  # one listing per folder, not a stat per image
        folder, name = os.path.split(candidate)
        if folder not in listed:
            try:
                listed[folder] = set(os.listdir(folder))
            except OSError:
                listed[folder] = set()
        return name in listed[folder]

    for entry in document["images"]:
        options = candidates(entry)
        found = next((p for p in options if exists(p)), None)
        if found is None:
            raise DataError("%s: image %s (%s) is at none of %s." % (
                path, entry["id"], entry.get("file_name") or entry.get("coco_url"),
                ", ".join(options)), "put the image where file_name says, or remove its entry.")
        image = LabelledImage(found, size=(entry["width"], entry["height"]),
                              where="%s image %s" % (path, entry["id"]),
                              oriented=bool(frame.oriented()))
        images[entry["id"]] = image
        labelled.images.append(image)
    for number, ann in enumerate(document["annotations"]):
        where = "%s annotation %s" % (path, ann.get("id", number))
        image = images.get(ann["image_id"])
        x, y, w, h = (list(ann["bbox"]) + [0, 0, 0, 0])[:4]
        if image is None:
            labelled.drops.add("annotation of an image not listed", where)
        elif ann.get("iscrowd"):
            labelled.drops.add("crowd box (left out of training)", where)
        elif w <= 0 or h <= 0:
            labelled.drops.add("box with no area", where)
        else:
            image.boxes.append(Box(x, y, x + w, y + h, by_id.get(ann["category_id"],
                                                                 str(ann["category_id"])),
                                   where=where))
    return labelled


def _holds_export(channel, config):
    """Whether ``channel`` holds a tool's export and not GluonCV's layout of ``train_splits``."""
    if not coco_exports.find_exports(channel):
        return False
    try:
        find_coco_root(channel, config.train_splits[0])
    except DataError:
        return True
    return False


def _export_datasets(config, channels_dir, channels, instances, frame, documents):
    """A labelling tool's COCO export (see readers/coco_exports.py): its classes (placeholder
    categories left out, or those asked for), the training file's images with objects;
    validation from the validation export, else a seeded tenth of the training file's images by
    id, so that COCO's metric scores exactly those. Images are decoded in the ``frame``."""
    from detector_training.data.readers.coco_format import (carve_image_ids, coco_dataset_class,
                                                    coco_instance_class)

    train_export, val_export = coco_exports.locate(channels_dir, channels)
    if not documents(train_export.annotation_file)["images"]:
        raise empty_training(train_export.describe(channels_dir))
    if val_export is not None and not config.val_fraction \
            and not documents(val_export.annotation_file)["images"]:
        LOG.warning("data: " + EMPTY_VALIDATION, val_export.describe(channels_dir),
                    DEFAULT_VAL_FRACTION, config.seed)
        val_export = None
    cls = coco_instance_class() if instances else coco_dataset_class()
    classes = tuple(config.classes) or coco_exports.export_classes(
        train_export, documents(train_export.annotation_file))
    train_ids = val_ids = None
    if val_export is None or config.val_fraction > 0:
        train_ids, val_ids = carve_image_ids(documents(train_export.annotation_file),
                                             config.val_fraction or DEFAULT_VAL_FRACTION, config.seed)
        val_export = train_export
    for what, export, ids in (("training", train_export, train_ids),
                              ("validation", val_export, val_ids)):
        LOG.info("data: coco %s: %s%s", what, export.describe(channels_dir), "" if ids is None
                 else ", %d images carved by id (seed %d)" % (len(ids), config.seed))
    # Each export's documents as its tool means them (CVAT's masks, crowd-flagged, are objects).
    extra = dict({} if instances else {"use_crowd": False}, oriented=bool(frame.oriented()))
    train = cls(train_export.image_root, [train_export.split], classes,
                annotation_files={train_export.split: train_export.annotation_file},
                image_ids=train_ids, skip_empty=config.skip_empty,
                documents=train_export.documents(documents), **extra)
    val = cls(val_export.image_root, [val_export.split], train.classes,
              annotation_files={val_export.split: val_export.annotation_file},
              image_ids=val_ids, skip_empty=False, oriented=extra["oriented"],
              documents=val_export.documents(documents))
    return _datasets(train, val, [train_export.split], config.skip_empty)


def _coco_datasets(config, data_root, instances, frame, documents):
    """COCO-format data (see readers/coco_format.py): the training images that have objects of the chosen
    categories; every validation image, in id order, as GluonCV's COCO metrics expect. With
    ``instances``, objects carry their masks (GluonCV's COCOInstance layout). Images are decoded
    in the ``frame``."""
    from detector_training.data.readers.coco_format import (annotation_file, carve_image_ids,
                                                    coco_dataset_class, coco_instance_class,
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
    train_ids = val_ids = None
    train_file = files["train"].get(train_splits[0]) or annotation_file(train_root, train_splits[0])
    if not documents(train_file)["images"]:
        raise empty_training(train_file)
    fraction = config.val_fraction
    val_file = files["val"].get(val_splits[0]) or annotation_file(val_root, val_splits[0])
    if not fraction and os.path.isfile(val_file) and not documents(val_file)["images"]:
        LOG.warning("data: " + EMPTY_VALIDATION, val_file, DEFAULT_VAL_FRACTION, config.seed)
        fraction = DEFAULT_VAL_FRACTION
    if fraction > 0:  # the validation images carved from the training file, by id
        train_ids, val_ids = carve_image_ids(documents(train_file), fraction, config.seed)
        val_root, val_splits, files["val"] = train_root, train_splits, files["train"]
        LOG.info("data: coco validation: %d images of %s carved by id (val_fraction=%g, seed %d)",
                 len(val_ids), os.path.basename(train_file), fraction, config.seed)
    # Crowd boxes are left out of training (the instance reader always leaves them out).
    oriented = bool(frame.oriented())
    train = cls(train_root, train_splits, config.classes, annotation_files=files["train"],
                image_ids=train_ids, skip_empty=config.skip_empty, oriented=oriented,
                documents=documents, **({} if instances else {"use_crowd": False}))
    val = cls(val_root, val_splits, train.classes, annotation_files=files["val"],
              image_ids=val_ids, skip_empty=False, oriented=oriented, documents=documents)
    return _datasets(train, val, train_splits, config.skip_empty)


def _datasets(train, val, train_splits, skip_empty):
    """The Datasets of a training and a validation reader; no training object is an error."""
    total = sum(len(coco.getImgIds()) for coco in train._coco)  # pylint: disable=protected-access
    negatives = sum(1 for label in train._labels if is_negative(label))  # pylint: disable=protected-access
    if len(train) == negatives:
        raise DataError("no training image in %s has an object of the classes %s."
                        % (",".join(train_splits), ", ".join(train.classes)),
                        "check the annotations, or choose other classes.")
    log_empty("training", total - len(train) + negatives, total, skip_empty)
    fix = "replace the file, or remove its entry from the split's JSON."
    return Datasets(train=SubsetDataset(train, range(len(train)), train._items, fix),  # pylint: disable=protected-access
                    val=SubsetDataset(val, range(len(val)), val._items, fix),  # pylint: disable=protected-access
                    classes=tuple(train.classes), aspect_ratios=list(train.get_im_aspect_ratio()),
                    val_aspect_ratios=list(val.get_im_aspect_ratio()))
