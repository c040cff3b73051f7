"""One Pascal VOC annotation file, read as untrusted bytes.

defusedxml's parser refuses a DTD (and so every entity declaration: no expansion bombs, no
external references); the file is read only up to ``MAX_BYTES``. Coordinates may have decimals
(CVAT writes them). Boxes are returned in 0-based pixels: the official VOC's corners (and
labelImg's) are 1-based pixel indices, less 1 as GluonCV's VOC reader does; CVAT's are the box's
0-based edges already (``one_based=False``: datumaro's VOC exporter writes ``xmin = x``, ``xmax =
x + w``). ``<path>`` (a path on the labeller's machine) is never used, and
``<size>`` only as the annotation's claim (the image's header wins; it may be wrong or 0). A file
that cannot be read is a DataError naming the file, the line and the fix.
"""

import math
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError, TreeBuilder

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from detector_training.data.labelled import Box
from detector_training.errors import DataError

MAX_BYTES = 4 << 20  # a dense annotation of 5,000 objects is about 1.5 MB
FIX = "re-export it from the labelling tool, or remove it (and its image) from the data."
CORNERS = ("xmin", "ymin", "xmax", "ymax")


@dataclass
class Annotation:
    """What one annotation file says: its image's ``filename`` and ``folder`` as written,
    ``size`` (width, height) as stated (None when missing, 0 or not a number), and its objects as
    Boxes in 0-based pixels whose ``where`` is "<file> object <n>"."""

    path: str
    filename: str = ""
    folder: str = ""
    size: tuple = None
    depth: int = None
    objects: list = field(default_factory=list)


class _LineTarget:
    """A tree builder that remembers the line each element starts on (expat's position); used
    only to say where a file is wrong (it slows the parse by a third)."""

    def __init__(self):
        self._builder = TreeBuilder()
        self.lines = {}
        self.expat = None

    def start(self, tag, attrs):
        element = self._builder.start(tag, attrs)
        self.lines[id(element)] = self.expat.CurrentLineNumber
        return element

    def end(self, tag):
        return self._builder.end(tag)

    def data(self, data):
        self._builder.data(data)

    def close(self):
        return self._builder.close()


def read_annotation(path, one_based=True):
    """The Annotation in the file at ``path`` (at most MAX_BYTES); ``one_based``: its corners are
    1-based pixel indices (the official VOC's), else 0-based edges (CVAT's)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise DataError("annotation %s cannot be read (%s)." % (path, exc.strerror or exc), FIX) from exc
    if len(data) > MAX_BYTES:
        raise DataError("annotation %s is larger than the %d MiB an annotation may be."
                        % (path, MAX_BYTES >> 20), "split it, or remove it from the data.")
    return parse_annotation(data, path, one_based)


def _parse(data, path, with_lines=False):
    """(root element, {id(element): line} or None)."""
    # The C tree builder as the target: defusedxml's parser is pure Python, its default builder too.
    target = _LineTarget() if with_lines else TreeBuilder()
    parser = DefusedXMLParser(target=target, forbid_dtd=True, forbid_entities=True,
                              forbid_external=True)
    if with_lines:
        target.expat = parser.parser
    try:
        parser.feed(data)
        return parser.close(), (target.lines if with_lines else None)
    except ParseError as exc:
        line, column = exc.position
        reason = str(exc).split(":")[0]
        raise DataError("annotation %s line %d column %d is not well-formed XML (%s)."
                        % (path, line, column + 1, reason), FIX) from exc
    except DefusedXmlException as exc:
        raise DataError("annotation %s line %d declares a DTD or entities (%s), which are refused: "
                        "a VOC annotation needs none, and entities can expand without bound."
                        % (path, parser.parser.CurrentLineNumber, type(exc).__name__),
                        "remove the <!DOCTYPE ...> declaration, or re-export the file from the "
                        "labelling tool.") from exc


def _child_text(element, tag):
    child = element.find(tag)
    return (child.text or "").strip() if child is not None else ""


def _positive(element, tag):
    try:
        value = float(_child_text(element, tag))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def parse_annotation(data, path, one_based=True):
    """The Annotation in ``data`` (bytes of the file at ``path``, named in errors). Boxes say
    where they are as "<file> object <n>"; an error names the line (the file is parsed again,
    keeping lines, to find it)."""
    root, _ = _parse(data, path)
    try:
        return _annotation(root, path, lambda element, number=0: "%s object %d" % (path, number),
                           one_based)
    except DataError:
        root, lines = _parse(data, path, with_lines=True)
        return _annotation(root, path, lambda element, number=0: "%s line %d" % (
            path, lines.get(id(element), 0)), one_based)


def _annotation(root, path, where, one_based=True):
    if root.tag != "annotation":
        raise DataError("%s is not a Pascal VOC annotation: its root element is <%s>, not "
                        "<annotation>." % (path, root.tag),
                        "remove the file from the data, or export the labels as Pascal VOC XML.")
    annotation = Annotation(path, _child_text(root, "filename"), _child_text(root, "folder"))
    size = root.find("size")
    if size is not None:
        width, height = _positive(size, "width"), _positive(size, "height")
        annotation.size = (width, height) if width and height else None
        depth = _positive(size, "depth")
        annotation.depth = int(depth) if depth else None
    for number, obj in enumerate(root.iter("object"), 1):
        annotation.objects.append(_box(obj, number, where, 1.0 if one_based else 0.0))
    return annotation


def _box(obj, number, where, offset):
    name = _child_text(obj, "name")
    if not name:
        raise DataError("%s: an <object> without a <name>." % where(obj, number), FIX)
    box = obj.find("bndbox")
    if box is None:
        raise DataError("%s: object '%s' has no <bndbox>." % (where(obj, number), name), FIX)
    corners = []
    for tag in CORNERS:
        element = box.find(tag)
        if element is None:
            raise DataError("%s: object '%s' has no <%s> in its <bndbox>."
                            % (where(box, number), name, tag), FIX)
        text = (element.text or "").strip()
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise DataError("%s: <%s> of object '%s' is '%s', not a number."
                            % (where(element, number), tag, name, text[:40]), FIX)
        corners.append(value - offset)  # 1-based pixel index -> 0-based (CVAT's edges: as they are)
    difficult = _child_text(obj, "difficult")
    return Box(*corners, label=name, difficult=difficult not in ("", "0"),
               where=where(obj, number))
