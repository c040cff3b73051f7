"""COCO-format exports as labelling tools write them, found in a channel without hyperparameters
naming paths.

- CVAT "COCO 1.0": ``annotations/instances_<subset>.json`` and the images under
  ``images/<subset>/`` (CVAT 2.x) or ``images/`` (older releases); the subset is ``default``
  unless the task has subsets (``Train``, ``Validation``, ``Test``, ...).
- Roboflow "COCO": ``train/``, ``valid/``, ``test/``, each with ``_annotations.coco.json`` beside
  its images; category 0 is a placeholder named after the project (supercategory "none") that the
  classes name as their supercategory and no box uses.
- Label Studio "COCO": ``result.json`` and ``images/``; ``file_name`` is ``images/<name>`` (with
  backslashes when exported on Windows; some releases write the labeller's absolute path), so an
  image is also looked up by its base name under ``images/``.

What each tool's exporter writes is declared by its :class:`Tool`: CVAT's writes every mask and
brush object as RLE with ``iscrowd: 1``, so in its exports those are objects (trained, scored),
while a crowd annotation of any other COCO file is one of COCO's crowd regions (left out).

Each export found is an :class:`CocoExport`: the tool, the annotation file, the folder its
``file_name`` paths start from, and its role (train, validation, test) from the subset or folder
name (``default`` and unknown names train). :func:`locate` picks the training export from the
``train`` channel and the validation export from the ``validation`` channel, else from the
training channel's validation subset. :func:`read_labelled` gives an export's LabelledSet (for the
data check); training reads the same files with :mod:`data.readers.coco_format` (boxes, or masks for Mask
R-CNN), given :func:`export_classes` so that a placeholder category is not a class.
"""

import os
from dataclasses import dataclass

from detector_training.core.files import path_inside
from detector_training.data.readers.coco_format import category_names, read_document
from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet, clean
from detector_training.data.readers.builtin_json import NO_IMAGE
from detector_training.data.readers.images import Frame, read_header
from detector_training.errors import DataError


@dataclass(frozen=True)
class Tool:
    """A labelling tool's COCO export, as its own exporter writes it. ``annotations_folder``: its
    annotation files lie in an ``annotations/`` folder under the export's top folder;
    ``crowd_is_mask``: it writes every mask or brush object as RLE with ``iscrowd: 1`` (an
    object, not one of COCO's crowd regions), so its crowd annotations train as objects."""

    name: str
    annotations_folder: bool = False
    crowd_is_mask: bool = False

    def __str__(self):
        return self.name


# CVAT's COCO 1.0 is datumaro's exporter: ``iscrowd = int(mask is not None)``, masks as
# uncompressed RLE, polygons with iscrowd 0 (datumaro/plugins/data_formats/coco/exporter.py).
CVAT = Tool("CVAT COCO 1.0", annotations_folder=True, crowd_is_mask=True)
ROBOFLOW, LABEL_STUDIO = Tool("Roboflow COCO"), Tool("Label Studio COCO")
TRAIN, VALIDATION, TEST = "train", "validation", "test"
ROLES = {"train": TRAIN, "training": TRAIN, "default": TRAIN, "val": VALIDATION,
         "valid": VALIDATION, "validation": VALIDATION, "test": TEST, "testing": TEST}
ROBOFLOW_FILE = "_annotations.coco.json"
LABEL_STUDIO_FILE = "result.json"
CVAT_PREFIX = "instances_"
CROWD = "crowd region (not a box to train)"
MASK_OBJECT = ("mask or brush object (RLE with iscrowd 1, as the tool writes them) trained as an "
               "object")
PLACEHOLDER = "placeholder category (a supercategory with no box) left out of the classes"


@dataclass(frozen=True)
class CocoExport:
    tool: Tool
    subset: str  # CVAT's subset, Roboflow's folder, Label Studio's "result"
    annotation_file: str
    image_root: str  # where the file_name paths start
    role: str

    @property
    def root(self):
        """The export's top folder (CVAT's holds annotations/ and images/)."""
        folder = os.path.dirname(self.annotation_file)
        return os.path.dirname(folder) if self.tool.annotations_folder else folder

    @property
    def split(self):
        """The split name coco_format's readers take for it (the annotation file's stem)."""
        return os.path.splitext(os.path.basename(self.annotation_file))[0]

    def as_trained(self, document):
        """The annotation file's document as training and its metric read it: where the tool
        writes masks and brushes as crowd annotations, those are objects (``iscrowd`` 0);
        otherwise the document as it is (COCO's crowd regions left out of training)."""
        if not self.tool.crowd_is_mask:
            return document
        return dict(document, annotations=[dict(a, iscrowd=0) if a.get("iscrowd", 0) == 1 else a
                                           for a in document["annotations"]])

    def documents(self, read=read_document):
        """A reader of this export's annotation files (``read``: the job's Documents) giving
        each as :meth:`as_trained` makes it, made once per file."""
        made = {}

        def documents(path):
            if path not in made:
                made[path] = self.as_trained(read(path))
            return made[path]

        return documents

    def describe(self, channels_dir):
        return "%s (%s)" % (self.tool, os.path.relpath(self.annotation_file, channels_dir))


def _role(name):
    return ROLES.get(name.lower(), TRAIN)


def _candidates(channel_dir, depth=2):
    """The channel folder and the folders up to ``depth`` levels under it."""
    folders, level = [channel_dir], [channel_dir]
    for _ in range(depth):
        level = sorted(os.path.join(parent, name) for parent in level for name in os.listdir(parent)
                       if os.path.isdir(os.path.join(parent, name)))
        folders.extend(level)
    return folders


def find_exports(channel_dir):
    """Every CVAT, Roboflow and Label Studio COCO export in ``channel_dir`` (itself, or folders
    up to two levels under it: a zip extracted with or without its top folder)."""
    if not os.path.isdir(channel_dir):
        return []
    exports = []
    for folder in _candidates(channel_dir):
        annotations = os.path.join(folder, "annotations")
        images = os.path.join(folder, "images")
        if os.path.isdir(annotations) and os.path.isdir(images):  # GluonCV's has <split>/
            for name in sorted(os.listdir(annotations)):
                if name.startswith(CVAT_PREFIX) and name.endswith(".json"):
                    subset = name[len(CVAT_PREFIX):-len(".json")]
                    nested = os.path.join(images, subset)
                    exports.append(CocoExport(CVAT, subset, os.path.join(annotations, name),
                                              nested if os.path.isdir(nested) else images,
                                              _role(subset)))
        roboflow = os.path.join(folder, ROBOFLOW_FILE)
        if os.path.isfile(roboflow) and folder != channel_dir:
            subset = os.path.basename(folder)
            exports.append(CocoExport(ROBOFLOW, subset, roboflow, folder, _role(subset)))
        elif os.path.isfile(roboflow):  # one split's folder sent as the channel itself
            exports.append(CocoExport(ROBOFLOW, "", roboflow, folder, TRAIN))
        studio = os.path.join(folder, LABEL_STUDIO_FILE)
        if os.path.isfile(studio) and os.path.isdir(images):
            exports.append(CocoExport(LABEL_STUDIO, "result", studio, folder, TRAIN))
    return exports


def recognise(channels_dir):
    """{channel: [exports]} of the ``train`` and ``validation`` channels; empty when none."""
    found = {}
    for channel in (TRAIN, VALIDATION):
        exports = find_exports(os.path.join(channels_dir, channel))
        if exports:
            found[channel] = exports
    return found


def _one(exports, role, channels_dir):
    chosen = [e for e in exports if e.role == role]
    if len(chosen) > 1:
        raise DataError("several %s exports: %s." % (role, "; ".join(e.describe(channels_dir)
                                                                    for e in chosen)),
                        "send one export per channel (its validation subset may be beside it).")
    return chosen[0] if chosen else None


def training_channel(channels_dir, names=(TRAIN,)):
    """The first of the channels ``names`` under ``channels_dir`` that holds an export, or None."""
    return next((os.path.join(channels_dir, n) for n in names
                 if find_exports(os.path.join(channels_dir, n))), None)


def locate(channels_dir, train_channels=(TRAIN,)):
    """(training export, validation export or None): the training export of the first of
    ``train_channels`` holding one; the ``validation`` channel's export (any role but test),
    else the training channel's validation subset or ``valid/`` folder. Test subsets are not
    read."""
    channel = training_channel(channels_dir, train_channels) or os.path.join(
        channels_dir, train_channels[0])
    exports = find_exports(channel)
    train = _one(exports, TRAIN, channels_dir)
    if train is None:
        seen = ", ".join(sorted(os.listdir(channel)))[:300] if os.path.isdir(channel) \
            else "no '%s' channel" % os.path.basename(channel)
        raise DataError("no COCO export with training data in the '%s' channel (it holds: %s)."
                        % (os.path.basename(channel), seen),
                        "send the export as the tool wrote it: CVAT's annotations/ and images/, "
                        "Roboflow's train/ (and valid/), or Label Studio's result.json and "
                        "images/.")
    validation = [e for e in find_exports(os.path.join(channels_dir, VALIDATION)) if e.role != TEST]
    if len(validation) > 1:
        validation = [e for e in validation if e.role == VALIDATION] or validation
    if len(validation) > 1:
        raise DataError("several exports in the 'validation' channel: %s." % "; ".join(
            e.describe(channels_dir) for e in validation), "send one export there.")
    if validation:
        return train, validation[0]
    return train, _one(exports, VALIDATION, channels_dir)


# ------------------------------------------------------------------------------------ reading

def placeholder_categories(document):
    """Names of categories that others name as their supercategory and no annotation uses
    (Roboflow's category 0)."""
    parents = {c.get("supercategory") for c in document["categories"]}
    used = {a["category_id"] for a in document["annotations"]}
    return {c["name"] for c in document["categories"]
            if c["name"] in parents and c["id"] not in used}


def export_classes(export, document=None):
    """The class names of an export in category id order, placeholders left out."""
    document = document or read_document(export.annotation_file)
    placeholders = placeholder_categories(document)
    return tuple(n for n in category_names(document, export.annotation_file) if n not in placeholders)


def image_candidates(export, file_name):
    """Where an image of the export may be, in the order tried: ``file_name`` under the image
    root (also with Windows separators turned), then its base name under ``images/``."""
    portable = file_name.replace("\\", "/")
    base = portable.rsplit("/", 1)[-1]
    candidates = [os.path.join(export.image_root, portable.lstrip("/")),
                  os.path.join(export.image_root, base),
                  os.path.join(export.root, "images", base)]
    inside = (path_inside(export.root, c) for c in candidates)  # never outside the export
    return [c for c in inside if c]


def read_labelled(export, channels_dir, frame=Frame.ORIENTED, documents=None):
    """The LabelledSet of one export: boxes in pixels of the ``frame`` (a crowd region, an image
    not found: counted in Drops; a mask the tool writes as a crowd annotation: kept, counted in
    ``adjusted``), with :func:`labelled.clean`'s quirks settled (a box partly outside its
    image clipped, one with no area dropped, each counted)."""
    document = (documents or read_document)(export.annotation_file)
    placeholders = placeholder_categories(document)
    names = {c["id"]: c["name"] for c in document["categories"]}
    classes = export_classes(export, document)
    drops, adjusted = Drops(), Drops()
    for name in sorted(placeholders):
        drops.add(PLACEHOLDER, "%s category '%s'" % (os.path.relpath(export.annotation_file,
                                                                      channels_dir), name))
    by_image = {}
    for number, ann in enumerate(document["annotations"]):
        by_image.setdefault(ann["image_id"], []).append((number, ann))
    where_file = os.path.relpath(export.annotation_file, channels_dir)
    images = []
    for entry in document["images"]:
        file_name = entry.get("file_name") or ""
        path = next((c for c in image_candidates(export, file_name) if os.path.isfile(c)), None)
        where = "%s image %s" % (where_file, entry["id"])
        if path is None:
            drops.add(NO_IMAGE, "%s (file_name %s)" % (where, file_name))
            continue
        header = read_header(path, "%s (%s)" % (path, where))  # its own size wins over the JSON's
        oriented = bool(frame.oriented(header))
        boxes = []
        for number, ann in by_image.get(entry["id"], []):
            box_where = "%s annotations[%d]" % (where_file, number)
            if ann.get("iscrowd", 0) == 1 and export.tool.crowd_is_mask:
                adjusted.add(MASK_OBJECT, box_where)
            elif ann.get("iscrowd", 0) == 1:
                drops.add(CROWD, box_where)
                continue
            x, y, w, h = ann["bbox"]
            boxes.append(Box(x, y, x + w, y + h, names[ann["category_id"]], where=box_where))
        images.append(LabelledImage(path, boxes, header.size(oriented), where, header.orientation,
                                    oriented))
    return clean(LabelledSet(images, classes, drops, "%s, %s" % (export.tool, where_file),
                             adjusted))

