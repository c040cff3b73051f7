"""SageMaker Ground Truth object-detection manifests (augmented manifests, JSON Lines) as data.

One JSON object per line: ``source-ref`` (the image's S3 URI), the label attribute (named after
the labelling job) with ``image_size`` and ``annotations`` (``class_id``, ``left``, ``top``,
``width``, ``height`` in pixels), and ``<attribute>-metadata`` with the line's ``class-map`` and
its ``type``. The attribute is the one named by ``label_attribute``, or found as the key whose
metadata says it is an object-detection job; where a line has several, the adjustment job's
(its metadata declares an ``adjustment-status``; the user names its attribute) is preferred. The class maps (each lists only the classes on its line, ids may be
sparse) are merged into one class list in id order.

Every check names the line: a line that is not JSON, a missing attribute, an unknown type, a box
outside its image or with a negative width is a DataError saying which line and what to fix. The
images are matched to files by their S3 key (:func:`match_images`): the ``images`` channel holds
the objects under some S3 prefix with that prefix stripped, so a file matches a key that ends
with its relative path.

The data format ``manifest`` (``data/formats/ground_truth.py``) builds the training and
validation sets from these pieces (``LabelledDetection`` gives ``(image, label)`` with label rows
``[x1, y1, x2, y2, class]``), so every box family trains and validates on them unchanged.
"""

import os
from dataclasses import dataclass

from detector_training.core.files import json_preview, parse_json
from detector_training.data.readers.coco_format import choose_classes
from detector_training.data.labelled import merge_class_ids
from detector_training.data.negatives import negative_label
from detector_training.errors import DataError

SOURCE_REF = "source-ref"
METADATA_SUFFIX = "-metadata"
# What an adjustment job's metadata declares ("adjusted" or "unadjusted"): its attribute holds
# the boxes as the adjustment left them, under whatever name the user gave the job.
ADJUSTMENT_STATUS = "adjustment-status"
MANIFEST_SUFFIXES = (".manifest", ".jsonl")
MAX_LINE_BYTES = 1 << 20  # a line holds one image's labels; a megabyte is thousands of boxes
MANIFEST_CHANNELS = ("train", "training")
VALIDATION_CHANNEL = "validation"
IMAGES_CHANNEL = "images"
# The share of training lines carved as validation when there is no validation manifest and
# val_fraction is 0 (the built-in algorithm asks for a validation channel; this is its stand-in).
DEFAULT_VAL_FRACTION = 0.1

FIX_LINE = "correct or remove that line of the manifest (Ground Truth's output.manifest format)."


def is_object_detection_type(value):
    """Ground Truth writes 'groundtruth/object-detection'; the built-in algorithm's page spells
    'object_detection'."""
    return isinstance(value, str) and value.rsplit("/", 1)[-1].replace("-", "_") == "object_detection"


@dataclass(frozen=True)
class ManifestEntry:
    """One manifest line, checked: where it is (for errors), its image, size, boxes as
    ``(x1, y1, x2, y2, class id)`` and the class names its metadata gives for ids."""

    where: str
    source_ref: str
    width: int
    height: int
    boxes: tuple
    class_map: dict


# ------------------------------------------------------------------------------------ JSON lines

def parse_json_line(text, where):
    """One line's JSON value, at most MAX_LINE_BYTES, through the package's one reader of
    untrusted JSON (core/files.py: no NaN or Infinity, nesting capped)."""
    if len(text) > MAX_LINE_BYTES:
        raise DataError("%s is longer than %d bytes; a manifest line holds one image's labels."
                        % (where, MAX_LINE_BYTES), FIX_LINE)
    return parse_json(text, where, fix=FIX_LINE)


def read_lines(path, label=None):
    """``(where, object)`` for every non-blank line of the manifest file at ``path``."""
    label = label or path
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataError("cannot read the manifest %s (%s)." % (label, exc.strerror or exc),
                        "check the channel's files.") from None
    with handle:
        # readline with a limit: a file without line breaks is never read whole into memory.
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
            where = "%s line %d" % (label, number)
            if len(raw) > MAX_LINE_BYTES:
                raise DataError("%s is longer than %d bytes; a manifest line holds one image's "
                                "labels." % (where, MAX_LINE_BYTES), FIX_LINE)
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DataError("%s is not UTF-8 text." % where, FIX_LINE) from None
            if not text:
                continue
            record = parse_json_line(text, where)
            if not isinstance(record, dict):
                raise DataError("%s is not a JSON object." % where, FIX_LINE)
            yield where, record


# ------------------------------------------------------------------------------------ one line

def label_attribute(record, where, named=""):
    """The attribute of ``record`` that holds its boxes: ``named`` (then the line must have it),
    else the one whose metadata has an object-detection type, an adjustment job's preferred
    (its metadata has an ``adjustment-status``)."""
    if named:
        if named not in record:
            raise DataError("%s has no attribute '%s' (it has: %s)." % (
                where, named, ", ".join(sorted(record))[:300]),
                "name the label attribute with label_attribute (Ground Truth names it after "
                "the labelling job), or fix that line.")
        return named
    found = sorted(key[:-len(METADATA_SUFFIX)] for key, value in record.items()
                   if key.endswith(METADATA_SUFFIX) and isinstance(value, dict)
                   and is_object_detection_type(value.get("type")))
    if found and not any(name in record for name in found):
        raise DataError("%s has '%s%s' but no attribute '%s' (missing attribute)." % (
            where, found[0], METADATA_SUFFIX, found[0]), FIX_LINE)
    found = [name for name in found if name in record]
    adjusted = [name for name in found if ADJUSTMENT_STATUS in record[name + METADATA_SUFFIX]]
    if adjusted:
        found = adjusted
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise DataError("%s has several bounding-box attributes: %s." % (where, ", ".join(found)),
                        "name the one to train with label_attribute.")
    types = sorted("%s: %s" % (key, value.get("type")) for key, value in record.items()
                   if key.endswith(METADATA_SUFFIX) and isinstance(value, dict))
    if types:
        raise DataError("%s has no object-detection label; its attributes have the types %s "
                        "(unknown type: only groundtruth/object-detection bounding boxes train a "
                        "detector)." % (where, "; ".join(types)[:300]),
                        "give a bounding-box labelling job's manifest, or name the attribute "
                        "with label_attribute.")
    raise DataError("%s has no label attribute: no key has '%s' metadata of type "
                    "groundtruth/object-detection." % (where, METADATA_SUFFIX),
                    "name the label attribute with label_attribute, or fix that line.")


def _number(value, where, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError("%s: %s is %s, not a number." % (where, what, json_preview(value)), FIX_LINE)
    return value


def check_label(label, where):
    """``(width, height, boxes)`` of an attribute's value ``{"image_size": [{"width", "height",
    ...}], "annotations": [{"class_id", "left", "top", "width", "height"}, ...]}``; every box
    inside its image, with a positive width and height."""
    if not isinstance(label, dict):
        raise DataError("%s: the label is %s, not a JSON object with image_size and annotations."
                        % (where, type(label).__name__), FIX_LINE)
    sizes = label.get("image_size")
    if not (isinstance(sizes, list) and sizes and isinstance(sizes[0], dict)):
        raise DataError("%s: the label has no image_size [{\"width\", \"height\", \"depth\"}]."
                        % where, FIX_LINE)
    width = _number(sizes[0].get("width"), where, "image_size width")
    height = _number(sizes[0].get("height"), where, "image_size height")
    if width <= 0 or height <= 0:
        raise DataError("%s: image_size %sx%s is not a positive size." % (where, width, height),
                        FIX_LINE)
    annotations = label.get("annotations")
    if not isinstance(annotations, list):
        raise DataError("%s: the label has no annotations list (an image without boxes has "
                        "\"annotations\": [])." % where, FIX_LINE)
    boxes = []
    for number, box in enumerate(annotations, 1):
        what = "annotation %d" % number
        if not isinstance(box, dict):
            raise DataError("%s: %s is not a JSON object." % (where, what), FIX_LINE)
        missing = [k for k in ("class_id", "left", "top", "width", "height") if k not in box]
        if missing:
            raise DataError("%s: %s lacks %s." % (where, what, ", ".join(missing)), FIX_LINE)
        class_id = box["class_id"]
        if isinstance(class_id, bool) or not isinstance(class_id, int) or class_id < 0:
            raise DataError("%s: %s has class_id %s, not an integer >= 0."
                            % (where, what, json_preview(class_id)), FIX_LINE)
        left, top, w, h = (_number(box[k], where, "%s %s" % (what, k))
                           for k in ("left", "top", "width", "height"))
        if w <= 0 or h <= 0:
            raise DataError("%s: %s has a negative or zero size (width %s, height %s)."
                            % (where, what, w, h), FIX_LINE)
        if left < 0 or top < 0 or left + w > width or top + h > height:
            raise DataError("%s: %s (left %s, top %s, width %s, height %s) lies outside the %sx%s "
                            "image." % (where, what, left, top, w, h, width, height), FIX_LINE)
        boxes.append((float(left), float(top), float(left + w), float(top + h), class_id))
    return int(width), int(height), tuple(boxes)


def check_class_map(metadata, where):
    """{class id: name} from an attribute's metadata (``class-map``: {"0": "dog", "5": "bone"})."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise DataError("%s: the label's metadata is not a JSON object." % where, FIX_LINE)
    if "type" in metadata and not is_object_detection_type(metadata["type"]):
        raise DataError("%s: the label's metadata has the unknown type %s (expected "
                        "groundtruth/object-detection)." % (where, json_preview(metadata["type"])),
                        "give a bounding-box labelling job's manifest.")
    raw = metadata.get("class-map", {})
    if not isinstance(raw, dict):
        raise DataError("%s: class-map is not a JSON object of id to name." % where, FIX_LINE)
    class_map = {}
    for key, name in raw.items():
        if not (isinstance(key, str) and key.isdigit() and isinstance(name, str) and name.strip()):
            raise DataError("%s: class-map entry %s: %s is not an id with a name."
                            % (where, json_preview(key), json_preview(name)), FIX_LINE)
        class_map[int(key)] = name.strip()
    return class_map


def parse_entry(record, where, named=""):
    """A checked :class:`ManifestEntry` of one manifest line."""
    attribute = label_attribute(record, where, named)
    source = record.get(SOURCE_REF)
    if not isinstance(source, str) or not source.strip():
        raise DataError("%s has no '%s' (the image's S3 URI)." % (where, SOURCE_REF), FIX_LINE)
    width, height, boxes = check_label(record[attribute], where)
    class_map = check_class_map(record.get(attribute + METADATA_SUFFIX), where)
    return ManifestEntry(where, source.strip(), width, height, boxes, class_map)


# ------------------------------------------------------------------------------- whole manifests

def merge_class_maps(entries):
    """One {id: name} from every line's class map; one id with two names is an error naming
    both lines, as is one name for two ids."""
    return merge_class_ids(((entry.where, entry.class_map) for entry in entries), "class id",
                           "ids", "give each class id one name in every line's class-map "
                           "(relabel or merge the manifests consistently).",
                           "give each class one id in every line's class-map.")


def class_list(entries, requested=()):
    """(class names in id order, {class id: index}) for the manifest's lines. Names come from the
    class maps; without any, ``requested`` (the ``classes`` hyperparameter) names the ids 0, 1, ...
    With class maps, ``requested`` picks the classes to train (boxes of others are dropped)."""
    names = merge_class_maps(entries)
    used = sorted({box[4] for entry in entries for box in entry.boxes})
    if not names:
        if not requested:
            raise DataError("the manifest names no classes (no line has a class-map in its "
                            "metadata).", "name the classes in id order with the 'classes' "
                            "hyperparameter, or include the '<attribute>-metadata' attribute "
                            "(Pipe mode: list it in AttributeNames).")
        too_large = [entry.where for entry in entries if any(b[4] >= len(requested) for b in entry.boxes)]
        if too_large:
            raise DataError("%s has a class_id beyond the %d classes named by 'classes' (%s)." % (
                too_large[0], len(requested), ",".join(requested)),
                "name every class, in id order, with the 'classes' hyperparameter.")
        return tuple(requested), {i: i for i in range(len(requested))}
    unnamed = [class_id for class_id in used if class_id not in names]
    if unnamed:
        where = next(e.where for e in entries if any(b[4] == unnamed[0] for b in e.boxes))
        raise DataError("%s has class_id %d, which no line's class-map names." % (where, unnamed[0]),
                        "add the class to the line's class-map.")
    available = tuple(names[class_id] for class_id in sorted(names))
    chosen = choose_classes(available, requested, "the manifest")
    index = {class_id: chosen.index(names[class_id]) for class_id in sorted(names)
             if names[class_id] in chosen}
    return chosen, index


def s3_key(source_ref):
    """The object key of an ``s3://bucket/key`` source-ref (a plain path is its own key)."""
    if source_ref.startswith("s3://"):
        return source_ref[5:].partition("/")[2]
    return source_ref.lstrip("/")


def index_images(images_root):
    """{file name: [paths relative to ``images_root``]} of every file under it."""
    by_name = {}
    for folder, _dirs, files in os.walk(images_root):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), images_root).replace(os.sep, "/")
            by_name.setdefault(name, []).append(rel)
    return by_name


def match_images(entries, images_root):
    """The file of each entry's image: the one file whose path under ``images_root`` ends its S3
    key. A key that matches no file, or two, is an error naming it and how many are missing."""
    by_name = index_images(images_root)
    paths, missing, ambiguous = [], [], []
    for entry in entries:
        key = s3_key(entry.source_ref)
        found = [rel for rel in by_name.get(key.rsplit("/", 1)[-1], ())
                 if key == rel or key.endswith("/" + rel)]
        if len(found) == 1:
            paths.append(os.path.join(images_root, found[0]))
        elif found:
            ambiguous.append((entry, found))
        else:
            missing.append(entry)
    if ambiguous:
        entry, found = ambiguous[0]
        raise DataError("%s: %s matches %d image files (%s); %d source-ref(s) are ambiguous." % (
            entry.where, entry.source_ref, len(found), ", ".join(sorted(found)[:3]), len(ambiguous)),
            "point the 'images' channel at the S3 prefix the source-refs share, so each key "
            "names one file.")
    if missing:
        raise DataError("%s: no image file for %s in the 'images' channel; %d of %d images are "
                        "missing." % (missing[0].where, missing[0].source_ref, len(missing),
                                      len(entries)),
                        "give the job an 'images' channel on the S3 prefix that holds every "
                        "source-ref's object.")
    return paths


def entry_label(entry, index):
    """The label rows of an entry's boxes of the trained classes (``index``: id -> class)."""
    import numpy as np

    rows = [list(box[:4]) + [index[box[4]]] for box in entry.boxes if box[4] in index]
    return np.asarray(rows, dtype="float32") if rows else negative_label()


def read_entries(channel_dir, named=""):
    """Every line of every manifest file (``*.manifest``, ``*.jsonl``) in ``channel_dir``, checked."""
    files = sorted(os.path.join(folder, name) for folder, _dirs, names in os.walk(channel_dir)
                   for name in names if name.endswith(MANIFEST_SUFFIXES))
    if not files:
        raise DataError("no manifest (*.manifest or *.jsonl) in %s." % channel_dir,
                        "put Ground Truth's output.manifest in the channel.")
    entries = []
    for path in files:
        label = os.path.relpath(path, os.path.dirname(os.path.normpath(channel_dir)))
        entries.extend(parse_entry(record, where, named) for where, record in read_lines(path, label))
    if not entries:
        raise DataError("the manifests in %s have no lines." % channel_dir,
                        "give a manifest with at least one labelled image.")
    return entries


def channel_in(root, names):
    """The first of the channel folders ``names`` under ``root``, or None."""
    return next((os.path.join(root, n) for n in names if os.path.isdir(os.path.join(root, n))), None)
