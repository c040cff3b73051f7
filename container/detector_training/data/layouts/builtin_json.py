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

Quirks: a box partly outside its image is clipped, a box with no area left is dropped, an
annotation whose image is missing is dropped, as is a second annotation of the same image; each
is counted in the set's Drops. The image's own header gives its size (``image_size`` may be
wrong). A broken file (not JSON, a field of the wrong type, an image whose header cannot be read)
is a DataError naming the file and the field.

Pure: JSON through :func:`core.files.read_json`, image sizes from headers (Pillow's lazy open).
"""

import os

from detector_training.core.files import json_preview, path_inside, read_json
from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet
from detector_training.errors import DataError

TRAIN, VALIDATION = "train", "validation"
ANNOTATION_SUFFIX = "_annotation"
ANNOTATION_CAP = 4 << 20  # one image's boxes; four megabytes is tens of thousands of them
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")
LAYOUT = "SageMaker built-in Object Detection, image format (one JSON per image)"
FIX = ("write the annotation as the built-in Object Detection algorithm's JSON: file, image_size "
       "[{width, height, depth}], annotations [{class_id, left, top, width, height}] in pixels, "
       "optional categories [{class_id, name}].")

# Drop reasons, shared with the data report.
NO_IMAGE = "image file not found"
MAX_PIXELS = 200_000_000  # a header may state any size (Pillow's decompression-bomb guard)
FIX_IMAGE = "replace the image with an intact JPEG, PNG or BMP, or remove it and its annotation."
CLIPPED = "box partly outside the image (clipped)"
NO_AREA = "box with no area (dropped)"
TWICE = "image annotated twice (the later annotation dropped)"


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


def header_size(source, where):
    """(width, height) from an image's header (a path, or a binary stream; no decode), or a
    DataError naming ``where``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(source) as image:
            width, height = image.size
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError, SyntaxError,
            ValueError) as exc:
        raise DataError("image %s cannot be read (%s)." % (where, str(exc).splitlines()[0][:200]
                                                            if str(exc) else type(exc).__name__),
                        FIX_IMAGE) from None
    if width <= 0 or height <= 0 or width * height > MAX_PIXELS:
        raise DataError("image %s states a size of %dx%d pixels." % (where, width, height),
                        "use images of at most %d pixels." % MAX_PIXELS)
    return width, height


def index_images(folder):
    """{base name: [paths]} and {stem: [paths]} of the image files under ``folder``."""
    by_name, by_stem = {}, {}
    for top, _dirs, names in os.walk(folder):
        for name in names:
            stem, ext = os.path.splitext(name)
            if ext.lower() in IMAGE_EXTENSIONS:
                path = os.path.join(top, name)
                by_name.setdefault(name, []).append(path)
                by_stem.setdefault(stem, []).append(path)
    return by_name, by_stem


def find_image(images_dir, file_field, json_path, index):
    """The image of one annotation: ``file`` under the channel, else the one image of that base
    name, else the one image named like the JSON; None when none (or several) match."""
    by_name, by_stem = index
    if file_field:
        relative = file_field.replace("\\", "/").lstrip("/")
        direct = path_inside(images_dir, relative)
        if direct and os.path.isfile(direct):
            return direct
        named = by_name.get(relative.rsplit("/", 1)[-1], [])
        if len(named) == 1:
            return named[0]
    stemmed = by_stem.get(os.path.splitext(os.path.basename(json_path))[0], [])
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


def clip_box(xmin, ymin, xmax, ymax, width, height, drops, where):
    """The box clipped to the image (counted when it was partly outside), or None (counted) when
    no area is left."""
    clipped = (max(0.0, min(xmin, width)), max(0.0, min(ymin, height)),
               max(0.0, min(xmax, width)), max(0.0, min(ymax, height)))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        drops.add(NO_AREA, where)
        return None
    if clipped != (xmin, ymin, xmax, ymax):
        drops.add(CLIPPED, where)
    return clipped


def merge_names(found):
    """One {class id: name} from [(file, {id: name})]; an id with two names, or a name with two
    ids, is a DataError naming both files."""
    names, first = {}, {}
    for where, mapping in found:
        for class_id, name in mapping.items():
            if class_id in names and names[class_id] != name:
                raise DataError("class_id %d is '%s' in %s but '%s' in %s." % (
                    class_id, names[class_id], first[class_id], name, where),
                    "give each class_id one name in every file's categories.")
            names.setdefault(class_id, name)
            first.setdefault(class_id, where)
    by_name = {}
    for class_id in sorted(names):
        other = by_name.setdefault(names[class_id], class_id)
        if other != class_id:
            raise DataError("class '%s' has the class_ids %d (%s) and %d (%s)." % (
                names[class_id], other, first[other], class_id, first[class_id]),
                "give each class one class_id in every file's categories.")
    return names


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


def build_split(images_dir, parsed, names):
    """The LabelledSet of one split's parsed files, its images found under ``images_dir``."""
    index = index_images(images_dir)
    drops = Drops()
    images, seen = [], {}
    for path, where, file_field, _mapping, boxes in parsed:
        image_path = find_image(images_dir, file_field, path, index)
        if image_path is None:
            drops.add(NO_IMAGE, "%s (file %s)" % (where, file_field))
            continue
        if image_path in seen:
            drops.add(TWICE, "%s (also %s)" % (where, seen[image_path]))
            continue
        seen[image_path] = where
        size = header_size(image_path, "%s (of %s)" % (image_path, where))
        kept = []
        for class_id, left, top, width, height, what in boxes:
            box_where = "%s %s" % (where, what)
            corners = clip_box(left, top, left + width, top + height, size[0], size[1], drops,
                               box_where)
            if corners:
                kept.append(Box(*corners, label=names[class_id], where=box_where))
        images.append(LabelledImage(image_path, kept, size, where))
    classes = tuple(names[class_id] for class_id in sorted(names))
    return LabelledSet(images, classes, drops, LAYOUT)


def read_splits(channels_dir, id_names=()):
    """{split: LabelledSet} of every split the channels hold; both splits name their class ids
    the same way (from every file's categories)."""
    found = recognise(channels_dir)
    if TRAIN not in found:
        raise DataError("no built-in algorithm image-format data in %s: it needs the channels "
                        "'train' (images) and 'train_annotation' (one JSON per image)."
                        % channels_dir, "send both channels.")
    parsed = {split: parse_split(annotations) for split, (_images, annotations) in found.items()}
    names = class_names([entry for entries in parsed.values() for entry in entries], id_names)
    return {split: build_split(found[split][0], parsed[split], names) for split in found}
