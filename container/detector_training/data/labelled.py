"""Labelled images, the one form between a layout's reader and everything after it.

A reader of an exported layout (Pascal VOC XML in its several folder shapes, YOLO text labels,
the SageMaker built-in algorithm's JSON or RecordIO, COCO exports) turns the files into a
:class:`LabelledSet`: per image, its file, the size its header (or annotation) states, and its
boxes in pixels with class *names*. What a reader leaves out is counted in a :class:`Drops` tally
by reason, never lost silently. The data check reports on a LabelledSet, and a data format turns
one into the dataset the families train on (class names to indices, label rows).

Pure values: no MXNet, no image decoding.
"""

import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from detector_training.errors import DataError

EXAMPLES_PER_REASON = 5  # how many places a Drops tally keeps per reason, for the report


@dataclass
class Box:
    """One object: corners in pixels of the image (xmin, ymin, xmax, ymax), its class name, and
    where it was described (file, and line or object number) for messages."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    label: str
    difficult: bool = False
    where: str = ""


@dataclass
class LabelledImage:
    """An image file and its boxes. ``size`` is (width, height) as its header or annotation
    states it, or None when unknown; ``where`` names the annotation it came from.
    ``orientation`` is its EXIF orientation tag (1: none; None: not read, its size being the
    annotation's); ``oriented`` whether its boxes and size are in the upright frame (the tag
    applied when it is decoded) rather than the stored one (see ``readers/images.Frame``)."""

    path: str
    boxes: list = field(default_factory=list)
    size: tuple = None
    where: str = ""
    orientation: int = None
    oriented: bool = True

    def key(self):
        """What makes two entries the same image (a layout storing several images in one file
        adds where in the file)."""
        return os.path.normcase(os.path.normpath(self.path))


class Drops:
    """What a reader left out, counted by reason, with the first few places of each."""

    def __init__(self):
        self._counts = OrderedDict()
        self._examples = OrderedDict()

    def add(self, reason, where="", count=1):
        self._counts[reason] = self._counts.get(reason, 0) + count
        examples = self._examples.setdefault(reason, [])
        if where and len(examples) < EXAMPLES_PER_REASON:
            examples.append(where)

    def merge(self, other):
        for reason, count in other.counts().items():
            self._counts[reason] = self._counts.get(reason, 0) + count
            examples = self._examples.setdefault(reason, [])
            for where in other.examples(reason):
                if len(examples) < EXAMPLES_PER_REASON:
                    examples.append(where)
        return self

    def counts(self):
        return OrderedDict(self._counts)

    def examples(self, reason):
        return list(self._examples.get(reason, ()))

    def total(self):
        return sum(self._counts.values())

    def __bool__(self):
        return bool(self._counts)


@dataclass
class LabelledSet:
    """One split's labelled images. ``classes`` is the class order the export declares (YOLO's
    ``names``, CVAT's ``labelmap.txt``, the built-in algorithm's ``categories``), empty where the
    layout declares none (then the sorted names found are the classes). ``layout`` names what was
    read, for the log and the data report (e.g. "labelImg, XML beside each image"). ``adjusted``
    counts, by reason, what was changed but kept (a box clipped to its image)."""

    images: list = field(default_factory=list)
    classes: tuple = ()
    drops: Drops = field(default_factory=Drops)
    layout: str = ""
    adjusted: Drops = field(default_factory=Drops)  # what was changed but kept (a box clipped)

    def class_names(self):
        """The declared classes, else the sorted names of the boxes found."""
        if self.classes:
            return tuple(self.classes)
        return tuple(sorted({box.label for image in self.images for box in image.boxes}))

    def object_counts(self):
        counts = OrderedDict((name, 0) for name in self.class_names())
        for image in self.images:
            for box in image.boxes:
                counts[box.label] = counts.get(box.label, 0) + 1
        return counts


def merge_class_ids(found, id_word, ids_word, fix_two_names, fix_two_ids):
    """One {class id: name} from [(where, {id: name})] (every annotation file's or line's own
    map); an id with two names, or a name with two ids, is a DataError naming both places. The
    words name the ids as the layout does ("class_id", "class_ids")."""
    names, first = {}, {}
    for where, mapping in found:
        for class_id, name in mapping.items():
            if class_id in names and names[class_id] != name:
                raise DataError("%s %d is '%s' in %s but '%s' in %s." % (
                    id_word, class_id, names[class_id], first[class_id], name, where),
                    fix_two_names)
            names.setdefault(class_id, name)
            first.setdefault(class_id, where)
    by_name = {}
    for class_id in sorted(names):
        other = by_name.setdefault(names[class_id], class_id)
        if other != class_id:
            raise DataError("class '%s' has the %s %d (%s) and %d (%s)." % (
                names[class_id], ids_word, other, first[other], class_id, first[class_id]),
                fix_two_ids)
    return names


# Reasons, as the data report and the log name them.
REPEATED_IMAGE = "image referenced twice (kept once)"
REPEATED_BOX = "box given twice in one image (kept once)"
OUTSIDE = "box wholly outside its image"
NO_AREA = "box with no area"
CLIPPED = "box partly outside its image (clipped)"
# VOC's corners are 1-based pixel indices, read 0-based as GluonCV does: a box drawn to the
# image's edge may then sit one pixel out. Clipping that much is not worth reporting.
EDGE_SLACK = 1.0


NOT_TRAINED = "object of a class not trained (%s)"


def boxes_of(image, classes, drops):
    """The boxes of ``image`` whose class is one of ``classes`` (names, as trained); each other
    box is counted in ``drops`` as not trained. The one place of that rule: the job's datasets
    and the data check both keep and count boxes through it."""
    kept = []
    for box in image.boxes:
        if box.label in classes:
            kept.append(box)
        else:
            drops.add(NOT_TRAINED % box.label, box.where or image.where or image.path)
    return kept


def select(labelled, classes):
    """``labelled`` as the job asks for it: its classes declared as ``classes`` (names, in that
    order), each box's class matched without regard to case and given the asked spelling. The
    boxes of other classes stay: ``boxes_of`` leaves them out and counts them (the one rule)."""
    asked = {str(name).strip().lower(): str(name).strip() for name in classes}
    if not asked:
        return labelled
    images = [replace(image, boxes=[replace(box, label=asked.get(box.label.strip().lower(), box.label))
                                    for box in image.boxes]) for image in labelled.images]
    return replace(labelled, images=images, classes=tuple(asked.values()))


def clean(labelled):
    """A copy of ``labelled`` with the quirks of real exports settled, every change counted.

    An image file referenced twice (one split file listing it twice, two annotations naming it)
    is kept once, with its first annotation. A box partly outside its image (``size``) is clipped
    to it; one wholly outside, or with no area, is dropped; the same box given twice in an image
    is kept once. Images left without a box stay (negatives: the format decides with
    ``skip_empty``).
    """
    drops = Drops().merge(labelled.drops)
    adjusted = Drops().merge(labelled.adjusted)
    seen, images = set(), []
    for image in labelled.images:
        key = image.key()
        if key in seen:
            drops.add(REPEATED_IMAGE, image.where or image.path)
            continue
        seen.add(key)
        boxes, given = [], set()
        for box in image.boxes:
            same = (box.label, box.xmin, box.ymin, box.xmax, box.ymax)
            if same in given:
                drops.add(REPEATED_BOX, box.where)
                continue
            given.add(same)
            box = _fit_box(box, image.size, drops, adjusted)
            if box is None:
                continue
            boxes.append(box)
        images.append(replace(image, boxes=boxes))  # a layout's own fields (a record's offset) kept
    return LabelledSet(images, tuple(labelled.classes), drops, labelled.layout, adjusted)


def _fit_box(box, size, drops, adjusted):
    """The box clipped to an image of ``size`` (width, height; None: unknown), or None (dropped,
    counted)."""
    xmin, ymin, xmax, ymax = box.xmin, box.ymin, box.xmax, box.ymax
    if size:
        width, height = size
        if xmin >= width or ymin >= height or xmax <= 0 or ymax <= 0:
            drops.add(OUTSIDE, box.where)
            return None
        clipped = (max(0.0, xmin), max(0.0, ymin), min(float(width), xmax), min(float(height), ymax))
        if max(abs(a - b) for a, b in zip(clipped, (xmin, ymin, xmax, ymax))) > EDGE_SLACK:
            adjusted.add(CLIPPED, box.where)
        xmin, ymin, xmax, ymax = clipped
    if xmax <= xmin or ymax <= ymin:
        drops.add(NO_AREA, box.where)
        return None
    return Box(xmin, ymin, xmax, ymax, box.label, box.difficult, box.where)


class LabelledDetection:
    """Images and label rows as GluonCV's detection readers give them: ``dataset[i]`` is
    ``(image NDArray HxWx3 RGB, label float32 rows [x1, y1, x2, y2, class, difficult])`` (the
    columns of GluonCV's VOC reader: a difficult object is one no metric counts); an image without
    boxes (a negative) has the placeholder row of ``negatives.negative_label``. ``oriented``: per
    image, whether it is turned upright by its EXIF orientation tag (the frame its labels are
    in)."""

    def __init__(self, paths, labels, classes, oriented):
        self._paths = list(paths)
        self._labels = list(labels)
        self._classes = tuple(classes)
        self._oriented = list(oriented)

    @property
    def classes(self):
        return self._classes

    def __len__(self):
        return len(self._paths)

    def __getitem__(self, idx):
        from detector_training.data.readers.images import decode_nd

        return decode_nd(self._paths[idx], self._oriented[idx]), self._labels[idx].copy()
