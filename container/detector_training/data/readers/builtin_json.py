"""The SageMaker built-in Object Detection algorithm's image format, read as it is sent.

Four channels: ``train`` and ``validation`` hold the images, ``train_annotation`` and
``validation_annotation`` one JSON per image, named after it (``sample_image1.json``)::

    {"file": "sample_image/sample_image1.jpg",
     "image_size": [{"width": 500, "height": 400, "depth": 3}],
     "annotations": [{"class_id": 0, "left": 111, "top": 134, "width": 61, "height": 128}],
     "categories": [{"class_id": 0, "name": "dog"}]}

``file`` is the image's path relative to its image channel; an image is also found by the base
name of ``file``, then by the JSON's own name with an image extension, anywhere in the channel.
Boxes are in pixels. ``categories`` is optional: class names come from the categories of every
file (ids may be sparse; one id with two names is an error naming both files), and where no file
has any, from ``id_names`` (the ``classes`` hyperparameter, naming the ids 0, 1, ... in order),
else the ids themselves ("0", "1", ...) are the names.

Quirks: an annotation whose image is missing is dropped (counted in the set's Drops); the rest
is :func:`labelled.clean`'s as for every layout (a box partly outside its image clipped and counted
as adjusted; a box wholly outside or with no area, a second annotation of the same image, a box
given twice: dropped and counted). The image's own header gives its size (``image_size`` may be
wrong). A broken file (not JSON, a field of the wrong type, an image whose header cannot be read)
is a DataError naming the file and the field.

Pure: JSON through :func:`core.files.read_json`, image sizes from headers (Pillow's lazy open).
"""

import os

from detector_training.core.files import json_preview, path_inside, read_json
from detector_training.data.labelled import (Box, Drops, LabelledImage, LabelledSet, clean,
                                            merge_class_ids)
from detector_training.data.readers.images import Frame, ImageIndex, read_header
from detector_training.errors import DataError

TRAIN, VALIDATION = "train", "validation"
ANNOTATION_SUFFIX = "_annotation"
ANNOTATION_CAP = 4 << 20  # one image's boxes; four megabytes is tens of thousands of them
LAYOUT = "SageMaker built-in Object Detection, image format (one JSON per image)"
FIX = ("write the annotation as the built-in Object Detection algorithm's JSON: file, image_size "
       "[{width, height, depth}], annotations [{class_id, left, top, width, height}] in pixels, "
       "optional categories [{class_id, name}].")

# Drop reason, shared with the data report (the others are labelled.clean's).
NO_IMAGE = "image file not found"


def annotation_channel(split):
    return split + ANNOTATION_SUFFIX


def annotation_files(folder):
    """Every ``*.json`` under ``folder`` (any depth), sorted."""
    return sorted(os.path.join(top, name) for top, _dirs, names in os.walk(folder)
                  for name in names if name.lower().endswith(".json"))


def recognise(channels_dir):
    """Where the layout is: {split: (images channel, annotation channel)} for each split whose two
    channels exist and whose annotation channel holds JSON; empty when there is none."""
    found = {}
    for split in (TRAIN, VALIDATION):
        images = os.path.join(channels_dir, split)
        annotations = os.path.join(channels_dir, annotation_channel(split))
        if os.path.isdir(images) and os.path.isdir(annotations) and annotation_files(annotations):
            found[split] = (images, annotations)
    return found


def find_image(images_dir, file_field, json_path, index):
    """The image of one annotation: ``file`` under the channel, else the one image of that base
    name, else the one image named like the JSON; None when none (or several) match.

    Not :meth:`ImageIndex.find`: ``file`` is a path inside the channel here (tried first), and
    an ambiguous name drops the annotation (counted) where a VOC export's picks the closest
    folder or is an error."""
    if file_field:
        relative = file_field.replace("\\", "/").lstrip("/")
        direct = path_inside(images_dir, relative)
        if direct and os.path.isfile(direct):
            return direct
        named = index.named(relative.rsplit("/", 1)[-1])
        if len(named) == 1:
            return named[0]
    stemmed = index.stemmed(os.path.splitext(os.path.basename(json_path))[0])
    return stemmed[0] if len(stemmed) == 1 else None


def _number(value, where, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError("%s: %s is %s, not a number." % (where, what, json_preview(value)), FIX)
    return float(value)


def _class_id(value, where, what):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError("%s: %s is %s, not an integer >= 0." % (where, what, json_preview(value)),
                        FIX)
    return value


def parse_annotation(document, where):
    """(file, {class id: name}, [(class id, left, top, width, height, what)]) of one JSON."""
    if not isinstance(document, dict):
        raise DataError("%s is not a JSON object." % where, FIX)
    file_field = document.get("file")
    if file_field is not None and not isinstance(file_field, str):
        raise DataError("%s: file is %s, not a path." % (where, json_preview(file_field)), FIX)
    annotations = document.get("annotations")
    if not isinstance(annotations, list):
        raise DataError("%s has no annotations list (an image without objects has "
                        "\"annotations\": [])." % where, FIX)
    categories = document.get("categories", [])
    if not isinstance(categories, list):
        raise DataError("%s: categories is %s, not a list." % (where, json_preview(categories)), FIX)
    names = {}
    for number, category in enumerate(categories, 1):
        what = "categories[%d]" % (number - 1)
        if not isinstance(category, dict) or "class_id" not in category or "name" not in category:
            raise DataError("%s: %s is %s, not {class_id, name}." % (where, what,
                                                                       json_preview(category)), FIX)
        name = category["name"]
        if not isinstance(name, str) or not name.strip():
            raise DataError("%s: %s.name is %s, not a name." % (where, what, json_preview(name)), FIX)
        names[_class_id(category["class_id"], where, what + ".class_id")] = name.strip()
    boxes = []
    for number, box in enumerate(annotations):
        what = "annotations[%d]" % number
        if not isinstance(box, dict):
            raise DataError("%s: %s is %s, not a JSON object." % (where, what, json_preview(box)), FIX)
        missing = [k for k in ("class_id", "left", "top", "width", "height") if k not in box]
        if missing:
            raise DataError("%s: %s lacks %s." % (where, what, ", ".join(missing)), FIX)
        boxes.append((_class_id(box["class_id"], where, what + ".class_id"),)
                     + tuple(_number(box[k], where, "%s.%s" % (what, k))
                             for k in ("left", "top", "width", "height")) + (what,))
    return file_field, names, boxes


def merge_names(found):
    """One {class id: name} from [(file, {id: name})]; an id with two names, or a name with two
    ids, is a DataError naming both files."""
    return merge_class_ids(found, "class_id", "class_ids",
                           "give each class_id one name in every file's categories.",
                           "give each class one class_id in every file's categories.")


def parse_split(annotations_dir):
    """[(path, where, file, {class id: name}, boxes)] of every annotation JSON of one split."""
    label_root = os.path.dirname(os.path.normpath(annotations_dir))
    parsed = []
    for path in annotation_files(annotations_dir):
        where = os.path.relpath(path, label_root)
        document = read_json(path, ANNOTATION_CAP, fix=FIX)
        parsed.append((path, where) + parse_annotation(document, where))
    if not parsed:
        raise DataError("no annotation JSON in %s." % annotations_dir,
                        "put one JSON per image in the annotation channel.")
    return parsed


def class_names(parsed, id_names=()):
    """{class id: name} for the parsed files of every split: their categories, else ``id_names``
    for the ids 0, 1, ..., else the ids as names."""
    names = merge_names([(entry[1], entry[3]) for entry in parsed])
    declared = bool(names)
    if not declared:
        names = dict(enumerate(id_names))
    used = {box[0] for entry in parsed for box in entry[4]}
    for class_id in sorted(used - set(names)):
        where = next(e[1] for e in parsed if any(b[0] == class_id for b in e[4]))
        if declared:
            raise DataError("%s has class_id %d, which no file's categories name." % (where, class_id),
                            "add {\"class_id\": %d, \"name\": ...} to the categories." % class_id)
        if id_names:
            raise DataError("%s has class_id %d, beyond the %d classes named by 'classes' (%s)." % (
                where, class_id, len(id_names), ",".join(id_names)),
                "name every class, in class_id order, with the 'classes' hyperparameter.")
        names[class_id] = str(class_id)
    return names


def build_split(images_dir, parsed, names, frame=Frame.ORIENTED):
    """The LabelledSet of one split's parsed files, its images found under ``images_dir`` (sized
    in the ``frame`` the boxes are in), with :func:`labelled.clean`'s quirks settled (an image
    annotated twice, boxes partly outside)."""
    index = ImageIndex(images_dir)
    drops = Drops()
    images = []
    for path, where, file_field, _mapping, boxes in parsed:
        image_path = find_image(images_dir, file_field, path, index)
        if image_path is None:
            drops.add(NO_IMAGE, "%s (file %s)" % (where, file_field))
            continue
        header = read_header(image_path, "%s (of %s)" % (image_path, where))
        oriented = bool(frame.oriented(header))
        kept = [Box(left, top, left + width, top + height, names[class_id],
                    where="%s %s" % (where, what))
                for class_id, left, top, width, height, what in boxes]
        images.append(LabelledImage(image_path, kept, header.size(oriented), where,
                                    header.orientation, oriented))
    classes = tuple(names[class_id] for class_id in sorted(names))
    return clean(LabelledSet(images, classes, drops, LAYOUT))


def read_splits(channels_dir, id_names=(), frame=Frame.ORIENTED):
    """{split: LabelledSet} of every split the channels hold, boxes in the ``frame``; both splits
    name their class ids the same way (from every file's categories)."""
    found = recognise(channels_dir)
    if TRAIN not in found:
        raise DataError("no built-in algorithm image-format data in %s: it needs the channels "
                        "'train' (images) and 'train_annotation' (one JSON per image)."
                        % channels_dir, "send both channels.")
    parsed = {split: parse_split(annotations) for split, (_images, annotations) in found.items()}
    names = class_names([entry for entries in parsed.values() for entry in entries], id_names)
    return {split: build_split(found[split][0], parsed[split], names, frame) for split in found}
