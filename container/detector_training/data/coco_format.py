"""COCO-format data in the layout GluonCV reads: ``annotations/<split>.json``, images under the
split's folder (``instances_train2017`` -> ``train2017/``).

GluonCV's ``COCODetection`` accepts only COCO's 80 category names and finds every image through
``coco_url``. :class:`CocoFormatDetection` is that reader for any COCO-format file: the categories
come from the JSON (COCO's own 80 for COCO; a labelling tool's export has its own), ``classes`` may
pick a subset, and an image is found by ``file_name`` under the split's folder when there is no
``coco_url``. The annotations are restricted to the chosen categories before GluonCV's COCO metric
sees them, so the metric scores exactly the classes trained.
"""

import contextlib
import io
import json
import os

from detector_training.errors import DataError

ANNOTATIONS = "annotations"


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


def read_document(path):
    """The JSON of a COCO-format annotation file, checked for what training needs."""
    try:
        with open(path) as handle:
            document = json.load(handle)
    except ValueError as exc:
        raise DataError("%s is not valid JSON (%s)." % (path, exc),
                        "export the annotations again in COCO format.") from None
    if not isinstance(document, dict):
        raise DataError("%s is not a COCO annotation file (not a JSON object)." % path,
                        "export the annotations again in COCO format.")
    for key in ("images", "annotations", "categories"):
        if not isinstance(document.get(key), list):
            raise DataError("%s has no '%s' list; COCO format needs images, annotations and "
                            "categories." % (path, key), "export the annotations again in COCO format.")
    for key, required in (("images", ("id", "width", "height")),
                          ("annotations", ("image_id", "category_id", "bbox")),
                          ("categories", ("id", "name"))):
        for entry in document[key]:
            missing = [k for k in required if not isinstance(entry, dict) or k not in entry]
            if missing:
                raise DataError("%s: an entry of '%s' lacks %s: %s" % (path, key, ", ".join(missing),
                                                                       json.dumps(entry)[:200]),
                                "export the annotations again in COCO format.")
    for entry in document["images"]:
        if not entry.get("file_name") and not entry.get("coco_url"):
            raise DataError("%s: image %s has neither file_name nor coco_url." % (path, entry["id"]),
                            "give every image entry its file_name.")
    return document


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


def image_paths(root, split, entry):
    """Where an image entry's file may be, in the order tried."""
    paths = []
    if entry.get("file_name"):
        paths.append(os.path.join(root, split_folder(split), entry["file_name"]))
    if entry.get("coco_url"):  # GluonCV's rule: <root>/<last folder of the URL>/<file name>
        paths.append(os.path.join(root, *entry["coco_url"].split("/")[-2:]))
    if entry.get("file_name"):
        paths.append(os.path.join(root, entry["file_name"]))
    return paths


def coco_api(document):
    """A pycocotools COCO object over ``document`` (without its progress prints)."""
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = document
        coco.createIndex()
    return coco


def coco_dataset_class():
    from gluoncv.data import COCODetection

    class CocoFormatDetection(COCODetection):
        """GluonCV's COCO reader for any COCO-format file. ``classes``: the categories to read
        (all of the first split's when empty; names matched without regard to case)."""

        CLASSES = ()

        def __init__(self, root, splits, classes=(), **kwargs):
            self._requested = tuple(classes)
            self._classes = ()
            super().__init__(root=root, splits=splits, **kwargs)

        @property
        def classes(self):
            return self._classes

        def _load_jsons(self):
            items, labels, ratios = [], [], []
            for split in self._splits:
                path = annotation_file(self._root, split)
                document = read_document(path)
                if not self._classes:
                    self._classes = choose_classes(category_names(document, path), self._requested, path)
                document = restricted(document, self._classes, path)
                coco = coco_api(document)
                self._coco.append(coco)
                by_name = {c["name"]: c["id"] for c in document["categories"]}
                self.json_id_to_contiguous = {by_name[name]: i for i, name in enumerate(self._classes)}
                self.contiguous_id_to_json = {i: j for j, i in self.json_id_to_contiguous.items()}
                missing = []
                for entry in coco.loadImgs(sorted(coco.getImgIds())):
                    candidates = image_paths(self._root, split, entry)
                    found = next((p for p in candidates if os.path.isfile(p)), None)
                    if found is None:
                        missing.append(candidates[0])
                        continue
                    label = self._check_load_bbox(coco, entry)
                    if not label:
                        continue
                    ratios.append(float(entry["width"]) / entry["height"])
                    items.append(found)
                    labels.append(label)
                if missing:
                    raise DataError("%d image(s) of %s are missing, e.g. %s." % (
                        len(missing), path, ", ".join(missing[:3])),
                        "put each image under the split's folder (%s/) by its file_name, or "
                        "remove its entry from the JSON." % split_folder(split))
            return items, labels, ratios

    return CocoFormatDetection

