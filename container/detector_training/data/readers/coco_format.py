"""COCO-format data in the layout GluonCV reads: ``annotations/<split>.json``, images under the
split's folder (``instances_train2017`` -> ``train2017/``).

GluonCV's ``COCODetection`` accepts only COCO's 80 category names and finds every image through
``coco_url``. :class:`CocoFormatDetection` is that reader for any COCO-format file: the categories
come from the JSON (COCO's own 80 for COCO; a labelling tool's export has its own), ``classes`` may
pick a subset, and an image is found by ``file_name`` under the split's folder when there is no
``coco_url``. The annotations are restricted to the chosen categories before GluonCV's COCO metric
sees them, so the metric scores exactly the classes trained. :class:`CocoFormatInstance` is
GluonCV's ``COCOInstance`` made the same way, with each object's mask (polygons or RLE) for the
Mask R-CNN family.
"""

import contextlib
import io
import json
import os

from detector_training.core.files import json_preview, path_inside, read_json
from detector_training.data.readers.images import decode_nd
from detector_training.data.negatives import negative_label
from detector_training.errors import DataError

ANNOTATIONS = "annotations"
ANNOTATIONS_CAP = 4 << 30  # COCO 2017's instances_train2017.json is 448 MB
_FIX_EXPORT = "export the annotations again in COCO format."


def split_folder(split):
    """The image folder of a split: COCO's ``instances_val2017`` keeps its images in ``val2017``."""
    return split.split("_", 1)[1] if split.startswith("instances_") else split


def annotation_file(root, split):
    return os.path.join(root, ANNOTATIONS, split + ".json")


def find_coco_root(channel, split):
    """The directory under ``channel`` (itself, or one level down) holding annotations/<split>.json."""
    candidates = [channel] + sorted(os.path.join(channel, d) for d in os.listdir(channel)
                                    if os.path.isdir(os.path.join(channel, d)))
    for candidate in candidates:
        if os.path.isfile(annotation_file(candidate, split)):
            return candidate
    raise DataError("no %s/%s.json in %s or a folder directly under it." % (ANNOTATIONS, split, channel),
                    "put the COCO-format data in the channel as annotations/<split>.json with the "
                    "images under the split's folder (annotations/instances_train2017.json and "
                    "train2017/), or name the splits with train_splits/val_splits.")


def named_annotation_file(channels_dir, split_kind, annotation_path, image_dir):
    """A ``<split_kind>_annotation_file`` (train or val): (image root, split name, annotation
    file), both paths checked to lie inside ``channels_dir``. The split is named after the file
    (``labels/instances_val2017.json`` -> ``instances_val2017``); the image root is
    ``<split_kind>_image_dir``, else the file's folder."""
    file_key, dir_key = split_kind + "_annotation_file", split_kind + "_image_dir"
    resolved = {}
    for key, value in ((file_key, annotation_path), (dir_key, image_dir)):
        if value:
            resolved[key] = path_inside(channels_dir, value)
            if resolved[key] is None:
                raise DataError("%s=%s lies outside the job's channels (%s)." % (key, value, channels_dir),
                                "name a path inside a channel, relative to %s (e.g. "
                                "coco/labels/train.json)." % channels_dir)
    path = resolved[file_key]
    if not os.path.isfile(path):
        raise DataError("%s=%s: no such file in the job's channels (%s)." % (file_key, annotation_path,
                                                                            channels_dir),
                        "give the path of the COCO-format JSON relative to %s, starting with its "
                        "channel's name." % channels_dir)
    images = resolved.get(dir_key, os.path.dirname(path))
    return images, os.path.splitext(os.path.basename(path))[0], path


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _id(value):
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _shape_error(path, field, value, expected):
    return DataError("%s: %s is %s; it must be %s." % (path, field, json_preview(value), expected), _FIX_EXPORT)


def read_document(path):
    """The JSON of a COCO-format annotation file (through the one reader of untrusted JSON),
    checked for what training needs: errors name the file and the field."""
    document = read_json(path, ANNOTATIONS_CAP, fix=_FIX_EXPORT)
    if not isinstance(document, dict):
        raise DataError("%s is not a COCO annotation file (not a JSON object)." % path, _FIX_EXPORT)
    for key in ("images", "annotations", "categories"):
        if not isinstance(document.get(key), list):
            raise DataError("%s has no '%s' list; COCO format needs images, annotations and "
                            "categories." % (path, key), _FIX_EXPORT)
    for key, required in (("images", ("id", "width", "height")),
                          ("annotations", ("image_id", "category_id", "bbox")),
                          ("categories", ("id", "name"))):
        for entry in document[key]:
            missing = [k for k in required if not isinstance(entry, dict) or k not in entry]
            if missing:
                raise DataError("%s: an entry of '%s' lacks %s: %s" % (path, key, ", ".join(missing),
                                                                       json.dumps(entry)[:200]), _FIX_EXPORT)
    _check_fields(document, path)
    for entry in document["images"]:
        if not entry.get("file_name") and not entry.get("coco_url"):
            raise DataError("%s: image %s has neither file_name nor coco_url." % (path, entry["id"]),
                            "give every image entry its file_name.")
    return document


class Documents:
    """COCO annotation files read (and checked) once each: ``documents(path)`` is
    :func:`read_document`'s answer, kept. One job's format instance holds one, so its training
    readers, a carved split and the data report share each parse. The documents are not changed
    by their readers (``restricted`` and ``only_images`` make new ones)."""

    def __init__(self):
        self._read = {}

    def __call__(self, path):
        key = os.path.realpath(path)
        if key not in self._read:
            self._read[key] = read_document(path)
        return self._read[key]


def _check_fields(document, path):
    """The types training and evaluation rely on, each refused with the field that breaks it."""
    for section in ("images", "categories"):  # ids are sorted: numbers and strings do not mix
        id_types = set()
        for index, entry in enumerate(document[section]):
            id_types.add(type(entry["id"]))
            if not _id(entry["id"]) or len(id_types) > 1:
                raise _shape_error(path, "%s[%d].id" % (section, index), entry["id"],
                                   "a number or a string, of the same type as the other %s ids"
                                   % section.rstrip("s"))
    for index, entry in enumerate(document["images"]):
        for key in ("width", "height"):
            if not _number(entry[key]) or entry[key] <= 0:
                raise _shape_error(path, "images[%d].%s" % (index, key), entry[key], "a positive number of pixels")
        for key in ("file_name", "coco_url"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise _shape_error(path, "images[%d].%s" % (index, key), entry[key], "a string")
    for index, entry in enumerate(document["categories"]):
        if not isinstance(entry["name"], str):
            raise _shape_error(path, "categories[%d].name" % index, entry["name"], "a string")
    for index, entry in enumerate(document["annotations"]):
        bbox = entry["bbox"]
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(_number(v) for v in bbox):
            raise _shape_error(path, "annotations[%d].bbox" % index, bbox, "four numbers [x, y, width, height]")
        if not _id(entry["category_id"]) or not _id(entry["image_id"]):
            key = "category_id" if not _id(entry["category_id"]) else "image_id"
            raise _shape_error(path, "annotations[%d].%s" % (index, key), entry[key], "a number or a string")
        for key in ("area", "iscrowd"):
            if key in entry and not _number(entry[key]):
                raise _shape_error(path, "annotations[%d].%s" % (index, key), entry[key], "a number")
    # Every reader of the file (training, validation, the data check) goes through here, so an
    # annotation of no category is refused by all of them alike, not skipped by one.
    category_ids = {entry["id"] for entry in document["categories"]}
    for index, entry in enumerate(document["annotations"]):
        if entry["category_id"] not in category_ids:
            raise DataError("%s annotations[%d] (image %s) has category_id %s, which no category has."
                            % (path, index, entry["image_id"], json_preview(entry["category_id"])),
                            "export the annotations again in COCO format, or add the category to "
                            "its 'categories'.")


def category_names(document, path):
    """Category names in the order of their ids; duplicates are refused."""
    names = [c["name"] for c in sorted(document["categories"], key=lambda c: c["id"])]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DataError("%s names several categories %s." % (path, ", ".join(duplicates)),
                        "give every category its own name.")
    return tuple(names)


def choose_classes(available, requested, path):
    """The categories to train: all of them, or those named in ``requested`` (matched without
    regard to case), in the order of their ids."""
    if not requested:
        return tuple(available)
    by_lower = {name.lower(): name for name in available}
    unknown = [name for name in requested if name.lower() not in by_lower]
    if unknown:
        raise DataError("classes %s are not categories of %s (it has: %s)."
                        % (", ".join(unknown), path, ", ".join(available)[:600]),
                        "name classes as the training JSON's categories, or leave 'classes' empty "
                        "to train them all.")
    wanted = {by_lower[name.lower()] for name in requested}
    return tuple(name for name in available if name in wanted)


def restricted(document, classes, path):
    """The document with only the categories in ``classes`` and their annotations; COCO fields the
    evaluation reads (area, iscrowd) filled in where an export leaves them out."""
    by_name = {c["name"]: c for c in document["categories"]}
    missing = [name for name in classes if name not in by_name]
    if missing:
        raise DataError("%s has no category %s, which the training data has." % (path, ", ".join(missing)),
                        "use the same categories in every split.")
    keep = {by_name[name]["id"] for name in classes}
    annotations = []
    for ann in document["annotations"]:
        if ann["category_id"] not in keep:
            continue
        ann = dict(ann)
        bbox = ann["bbox"]
        ann.setdefault("area", float(bbox[2]) * float(bbox[3]) if len(bbox) == 4 else 0.0)
        ann.setdefault("iscrowd", 0)
        annotations.append(ann)
    categories = sorted((by_name[name] for name in classes), key=lambda c: c["id"])
    return dict(document, annotations=annotations, categories=categories)


def only_images(document, image_ids):
    """The document with only these images and their annotations (a carved split: the metric's
    ground truth is then exactly the images validated)."""
    keep = set(image_ids)
    return dict(document, images=[e for e in document["images"] if e["id"] in keep],
                annotations=[a for a in document["annotations"] if a["image_id"] in keep])


def carve_image_ids(document, fraction, seed):
    """(training image ids, validation image ids) of one annotation file: ``round(fraction * N)``
    images (at least 1, leaving at least 1) drawn by a generator seeded with ``seed``, as
    ``common.carve_validation`` draws positions, so every rank and every resumed run carves the
    same split."""
    import random

    ids = sorted(entry["id"] for entry in document["images"])
    if len(ids) < 2:
        raise DataError("a validation split needs at least 2 images to carve from; the annotation "
                        "file has %d." % len(ids), "add images, or send a validation export.")
    count = min(len(ids) - 1, max(1, int(round(fraction * len(ids)))))
    order = list(ids)
    random.Random("carve-%d" % seed).shuffle(order)
    val = set(order[:count])
    return [i for i in ids if i not in val], sorted(val)


def image_paths(root, split, entry):
    """Where an image entry's file may be, in the order tried."""
    paths = []
    if entry.get("file_name"):
        paths.append(os.path.join(root, split_folder(split), entry["file_name"]))
    if entry.get("coco_url"):  # GluonCV's rule: <root>/<last folder of the URL>/<file name>
        paths.append(os.path.join(root, *entry["coco_url"].split("/")[-2:]))
    if entry.get("file_name"):
        # Label Studio's exports: "images\\x.jpg" when exported on Windows, or the labeller's
        # absolute path; the export's images/ folder holds the file by its base name.
        portable = entry["file_name"].replace("\\", "/")
        paths.append(os.path.join(root, portable))
        paths.append(os.path.join(root, "images", portable.rsplit("/", 1)[-1]))
    return paths


def coco_api(document):
    """A pycocotools COCO object over ``document`` (without its progress prints)."""
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = document
        coco.createIndex()
    return coco


def load_splits(reader, read_objects):
    """What both readers load from their splits: the categories (all of the first split's, or those
    requested), each split's document restricted to them, and every image found on disk with its
    objects. ``read_objects(coco, entry, path)`` returns an image's objects, or None to leave the image
    out. Returns (image paths, objects, width/height ratios, (image id, width, height) per image)."""
    items, objects, ratios, images = [], [], [], []
    for split in reader._splits:  # pylint: disable=protected-access
        path = reader.annotation_files.get(split) or annotation_file(reader._root, split)  # pylint: disable=protected-access
        document = reader.documents(path)
        if not reader._classes:  # pylint: disable=protected-access
            reader._classes = choose_classes(category_names(document, path), reader._requested, path)  # pylint: disable=protected-access
        document = restricted(document, reader._classes, path)  # pylint: disable=protected-access
        if reader.image_ids is not None:
            document = only_images(document, reader.image_ids)
        coco = coco_api(document)
        reader._coco.append(coco)  # pylint: disable=protected-access
        by_name = {c["name"]: c["id"] for c in document["categories"]}
        reader.json_id_to_contiguous = {by_name[name]: i for i, name in enumerate(reader.classes)}
        reader.contiguous_id_to_json = {i: j for j, i in reader.json_id_to_contiguous.items()}
        missing = []
        for entry in coco.loadImgs(sorted(coco.getImgIds())):
            candidates = image_paths(reader._root, split, entry)  # pylint: disable=protected-access
            found = next((p for p in candidates if os.path.isfile(p)), None)
            if found is None:
                missing.append(candidates[0])
                continue
            found_objects = read_objects(coco, entry, path)
            if found_objects is None:
                continue
            ratios.append(float(entry["width"]) / entry["height"])
            items.append(found)
            objects.append(found_objects)
            images.append((entry["id"], entry["width"], entry["height"]))
        if missing:
            raise DataError("%d image(s) of %s are missing, e.g. %s." % (
                len(missing), path, ", ".join(missing[:3])),
                "put each image under the split's folder (%s/) by its file_name, or "
                "remove its entry from the JSON." % split_folder(split))
    return items, objects, ratios, images


class _AnyCocoFile:
    """What both COCO readers add to GluonCV's: ``classes``: the categories to read (all of the
    first split's when empty; names matched without regard to case); ``annotation_files``: a
    split's JSON where it is not ``<root>/annotations/<split>.json``; ``image_ids``: the images of
    the file(s) to read (a carved part; None: all); ``oriented``: images turned upright by their
    EXIF tag (the format's frame); ``documents``: the job's Documents, where it has one."""

    def __init__(self, root, splits, classes=(), annotation_files=None, image_ids=None,
                 oriented=True, documents=None, **kwargs):
        self._requested = tuple(classes)
        self._classes = ()
        self.annotation_files = dict(annotation_files or {})
        self.image_ids = image_ids
        self.oriented = oriented
        self.documents = documents or read_document
        super().__init__(root=root, splits=splits, **kwargs)

    @property
    def classes(self):
        return self._classes


def coco_dataset_class():
    import numpy as np
    from gluoncv.data import COCODetection

    class CocoFormatDetection(_AnyCocoFile, COCODetection):
        """GluonCV's COCO reader for any COCO-format file. ``classes``: the categories to read
        (all of the first split's when empty; names matched without regard to case);
        ``annotation_files``: a split's JSON where it is not ``<root>/annotations/<split>.json``."""

        CLASSES = ()

        def __getitem__(self, idx):
            """GluonCV's item, the image decoded in the format's frame."""
            img = decode_nd(self._items[idx], self.oriented)
            label = self._labels[idx]
            if self._transform is not None:
                return self._transform(img, label)
            return img, np.array(label).copy()

        def _load_jsons(self):
            # GluonCV's box reader gives an image without objects [] (a placeholder row when
            # skip_empty is off); an empty list leaves the image out.
            items, labels, ratios, _ = load_splits(
                self, lambda coco, entry, _path: self._check_load_bbox(coco, entry) or None)
            return items, labels, ratios

    return CocoFormatDetection


def coco_instance_class():
    from gluoncv.data import COCOInstance

    class CocoFormatInstance(_AnyCocoFile, COCOInstance):
        """GluonCV's COCO instance reader (boxes and polygons, what its Mask R-CNN transforms
        take) for any COCO-format file, like CocoFormatDetection. Masks may be polygons or RLE
        (see :func:`polygons`); ``images`` holds (image id, width, height) of every item, which
        validation needs to fill and encode predicted masks at image size."""

        CLASSES = ()

        def __init__(self, *args, **kwargs):
            self.images = []  # filled while GluonCV's __init__ loads the files
            super().__init__(*args, **kwargs)

        def __getitem__(self, idx):
            """GluonCV's item, the image decoded in the format's frame."""
            img = decode_nd(self._items[idx], self.oriented)
            label, segm = self._labels[idx], self._segms[idx]
            if self._transform is not None:
                return self._transform(img, label, segm)
            return img, label, segm

        def _load_jsons(self):
            items, objects, ratios, self.images = load_splits(self, self._instances)
            labels = [labels for labels, _ in objects]
            segms = [segms for _, segms in objects]
            return items, labels, segms, ratios

        def _instances(self, coco, entry, path):
            """(boxes with class ids as float32 rows, polygons per object) of one image, GluonCV's
            rules: crowd and ignored objects, and boxes under 2x2 pixels or area <= min_object_area
            are left out. None (image left out) when nothing is left and empty images are skipped;
            when they are kept, a negative: the placeholder row and one polygon of no area (the
            training transform makes a mask per row; KeepNegatives clears its targets)."""
            import numpy as np

            width, height = entry["width"], entry["height"]
            boxes, segms = [], []
            for ann in coco.loadAnns(coco.getAnnIds(imgIds=entry["id"], iscrowd=None)):
                kind = mask_kind(ann, height, width, path)  # all checked: the evaluation reads all
                if ann.get("ignore", 0) == 1 or ann.get("iscrowd", 0) == 1:
                    continue  # crowd regions train no mask; the evaluation ignores them
                x, y, w, h = ann["bbox"]
                x1, y1 = min(width, max(0.0, x)), min(height, max(0.0, y))
                x2, y2 = min(width, max(0.0, x + max(0.0, w))), min(height, max(0.0, y + max(0.0, h)))
                if ann["area"] <= self._min_object_area or x2 <= x1 or y2 <= y1 \
                        or (x2 - x1) * (y2 - y1) < 4:
                    continue
                rings = polygons(ann["segmentation"], kind, height, width)
                if not rings:
                    continue  # only polygons under 3 points (GluonCV drops those)
                boxes.append([x1, y1, x2, y2, self.json_id_to_contiguous[ann["category_id"]]])
                segms.append(rings)
            if not boxes:
                return None if self._skip_empty else (negative_label(), [[np.zeros((3, 2), "float32")]])
            return np.asarray(boxes, dtype="float32"), segms

    return CocoFormatInstance


def mask_kind(ann, height, width, path):
    """'polygons' or 'rle' for an annotation's ``segmentation``; a DataError naming the annotation
    when it has none a Mask R-CNN can use, or an RLE of another size than its image."""
    segmentation = ann.get("segmentation")
    if isinstance(segmentation, list) and segmentation and all(
            isinstance(p, list) and len(p) % 2 == 0
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)
            for p in segmentation):
        return "polygons"
    if isinstance(segmentation, dict) and isinstance(segmentation.get("counts"), (str, list)) \
            and isinstance(segmentation.get("size"), list) and len(segmentation["size"]) == 2:
        if list(segmentation["size"]) != [height, width]:
            raise DataError("%s: annotation %s has an RLE mask of size %s (height, width), but its "
                            "image is %dx%d." % (path, ann.get("id"), segmentation["size"], height,
                                                 width),
                            "export the masks at the size of their images.")
        return "rle"
    raise DataError("%s: annotation %s has no usable 'segmentation' (%s); a Mask R-CNN network "
                    "needs every object's mask, as polygons or RLE." % (
                        path, ann.get("id"), json.dumps(segmentation)[:120]),
                    "export the annotations with their masks (COCO 'segmentation'), or train a "
                    "faster_rcnn_* network on the boxes.")


def polygons(segmentation, kind, height, width):
    """A mask as GluonCV's transforms take it: a list of (N, 2) float32 polygons.

    COCO's polygons (lists of x, y pairs) are used as they are (those under 3 points dropped, as
    GluonCV does); RLE, compressed (``counts`` a string) or not (a list, as labelling tools
    write), is decoded and traced into the outer contour of each of its regions (OpenCV), so
    holes are filled."""
    import numpy as np

    if kind == "polygons":
        return [np.asarray(p, dtype="float32").reshape(-1, 2) for p in segmentation if len(p) >= 6]
    return rle_polygons(segmentation, height, width)


def rle_polygons(rle, height, width):
    """The outer contours of an RLE mask, as polygons through the boundary pixels' centres."""
    import cv2
    import numpy as np
    import pycocotools.mask as cocomask

    if isinstance(rle["counts"], list):
        rle = cocomask.frPyObjects(rle, height, width)
    mask = np.ascontiguousarray(cocomask.decode(rle), dtype=np.uint8)
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    return [c.reshape(-1, 2).astype("float32") + 0.5 for c in contours if len(c) >= 3]
