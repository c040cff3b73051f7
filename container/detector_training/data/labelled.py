"""Labelled images, the one form between a layout's reader and everything after it.

A reader of an exported layout (Pascal VOC XML in its several folder shapes, YOLO text labels,
the SageMaker built-in algorithm's JSON or RecordIO, COCO exports) turns the files into a
:class:`LabelledSet`: per image, its file, the size its header (or annotation) states, and its
boxes in pixels with class *names*. What a reader leaves out is counted in a :class:`Drops` tally
by reason, never lost silently. The data check reports on a LabelledSet, and a data format turns
one into the dataset the families train on (class names to indices, label rows).

Pure values: no MXNet, no image decoding.
"""

from collections import OrderedDict
from dataclasses import dataclass, field

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
    states it, or None when unknown; ``where`` names the annotation it came from."""

    path: str
    boxes: list = field(default_factory=list)
    size: tuple = None
    where: str = ""


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
    read, for the log and the data report (e.g. "labelImg, XML beside each image")."""

    images: list = field(default_factory=list)
    classes: tuple = ()
    drops: Drops = field(default_factory=Drops)
    layout: str = ""

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
