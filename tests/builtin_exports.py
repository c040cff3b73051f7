"""Data laid out exactly as the SageMaker built-in Object Detection algorithm takes it and as CVAT,
Roboflow and Label Studio export COCO format: builders shared by the layout tests, the whole-job
tests and the data check's tests.

- Built-in image format: channels ``train``/``validation`` (images, here under a folder as the
  AWS page's example ``sample_image/sample_image1.jpg``) and ``train_annotation``/
  ``validation_annotation`` (one JSON per image, named after it, ``file`` relative to the image
  channel).
- Built-in RecordIO: im2rec's ``.lst`` (``index <TAB> label... <TAB> path``) packed the way
  ``im2rec.py --pack-label --pass-through`` packs it (``IRHeader(0, label, index, 0)`` and the
  image file's bytes, ``MXIndexedRecordIO`` writing ``.rec`` and ``.idx``).
- CVAT "COCO 1.0": ``annotations/instances_<subset>.json`` and ``images/<subset>/`` (Datumaro's
  exporter with ``merge_images=False``, CVAT 2.x), or ``images/`` flat (older CVAT); categories from
  id 1 with supercategory "", images with ``license``/``flickr_url``/``coco_url`` ""/
  ``date_captured`` 0, boxes with ``segmentation: []`` and ``attributes: {"occluded": false}``.
- Roboflow "COCO": ``train/``, ``valid/``, ``test/`` each with ``_annotations.coco.json`` beside
  the images, category 0 the project's name (supercategory "none") and the classes from id 1 with
  that supercategory, files renamed ``<stem>_<ext>.rf.<hash>.<ext>``, ``README.roboflow.txt``.
- Label Studio "COCO": ``result.json`` and ``images/``, ``file_name`` ``images/<8 hex>-<name>``
  (``images\\...`` when exported on Windows), categories sorted by name from id 0, images from id
  0, rectangles with ``segmentation: []``, ``ignore: 0``, ``iscrowd: 0``.
"""

import hashlib
import io
import json
import os

from PIL import Image

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]


def image_bytes(size=(64, 48), mode="RGB", fmt="JPEG", seed=0):
    """A small image's file bytes, with a filled square so that it is not blank."""
    width, height = size
    colour = COLOURS[seed % len(COLOURS)] if mode in ("RGB", "CMYK") else 128
    image = Image.new(mode, size, (90, 90, 90) if mode == "RGB" else 60)
    image.paste(colour if mode != "CMYK" else (0, 200, 100, 0),
                (width // 4, height // 4, width // 2, height // 2))
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def write_image(path, size=(64, 48), mode="RGB", seed=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fmt = "PNG" if path.lower().endswith(".png") else "JPEG"
    with open(path, "wb") as handle:
        handle.write(image_bytes(size, mode, fmt, seed))
    return path


def write_json(path, value, indent=None, compact=False):
    """``value`` as JSON; ``compact``: orjson's bytes (no spaces, UTF-8, no final newline), as
    datumaro's ``dump_json_file`` writes CVAT's exports."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        if compact:
            handle.write(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        else:
            json.dump(value, handle, indent=indent)
    return path


def sample_objects(count, size=(64, 48), classes=2):
    """[(name, size, [(class id, left, top, width, height)])] for ``count`` images, in pixels."""
    width, height = size
    items = []
    for i in range(count):
        boxes = [(i % classes, width // 4, height // 4, width // 4 + 1, height // 4 + 1)]
        if i % 3 == 2:
            boxes.append(((i + 1) % classes, 2.5, 3.5, width / 2.0, height / 2.0))
        items.append(("img_%03d" % i, size, boxes))
    return items


# ------------------------------------------------------------------- built-in algorithm, JSON

def builtin_json_split(channels_dir, split, items, categories=None, folder="sample_image"):
    """One split of the image format: images in ``<split>/<folder>/<name>.jpg``, one
    ``<split>_annotation/<name>.json`` each (``categories`` in every file when given)."""
    for number, (name, size, boxes) in enumerate(items):
        relative = "%s/%s.jpg" % (folder, name) if folder else name + ".jpg"
        write_image(os.path.join(channels_dir, split, relative), size, seed=number)
        document = {"file": relative,
                    "image_size": [{"width": size[0], "height": size[1], "depth": 3}],
                    "annotations": [{"class_id": c, "left": l, "top": t, "width": w, "height": h}
                                    for c, l, t, w, h in boxes]}
        if categories is not None:
            document["categories"] = [{"class_id": i, "name": n} for i, n in sorted(categories.items())]
        write_json(os.path.join(channels_dir, split + "_annotation", name + ".json"), document, indent=3)
    return channels_dir


def builtin_json_channels(channels_dir, n_train=6, n_val=3, categories=None, size=(64, 48)):
    """The four channels of the image format."""
    categories = {0: "dog", 1: "cat"} if categories is None else categories
    builtin_json_split(channels_dir, "train", sample_objects(n_train, size), categories)
    if n_val:
        builtin_json_split(channels_dir, "validation",
                           [("val_" + n, s, b) for n, s, b in sample_objects(n_val, size)], categories)
    return channels_dir


# ------------------------------------------------------------------- built-in algorithm, RecordIO

def detection_label(boxes, size, header_width=2, extra=()):
    """im2rec's detection label for pixel boxes [(class, left, top, width, height)]: [A, B,
    extra..., class, xmin, ymin, xmax, ymax, ...] with corners as fractions."""
    width, height = size
    label = [float(header_width), 5.0] + [float(v) for v in extra][:header_width - 2]
    label += [0.0] * (header_width - len(label))
    for class_id, left, top, w, h in boxes:
        label += [float(class_id), left / width, top / height, (left + w) / width, (top + h) / height]
    return label


def write_lst(path, entries):
    """im2rec's .lst: ``index <TAB> label numbers... <TAB> relative image path`` per line, the
    numbers as GluonCV's tutorial ``write_line`` writes them (dmlc/gluon-cv, docs/tutorials/
    detection/lst_record_dataset.py, which the built-in algorithm's RecordIO preparation follows):
    the header (A, B, width, height) as ``str(int)``, each object's numbers as ``str(float)``.
    tests/samples/builtin_recordio/train.lst is the sample it must reproduce."""
    with open(path, "w") as handle:
        for index, label, relative in entries:
            width = int(label[0])
            numbers = [str(int(v)) for v in label[:width]] + [str(float(v)) for v in label[width:]]
            handle.write("\t".join([str(index)] + numbers + [relative]) + "\n")
    return path


def pack_rec(lst_path, image_root, prefix):
    """What ``im2rec.py --pack-label --pass-through prefix image_root`` does with ``lst_path``:
    one record per line, ``IRHeader(0, label, index, 0)`` and the image file's bytes, written
    with MXIndexedRecordIO (``prefix.rec`` and ``prefix.idx``)."""
    import mxnet as mx

    record = mx.recordio.MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "w")
    with open(lst_path) as handle:
        for line in handle:
            parts = [p.strip() for p in line.strip().split("\t")]
            index, label, relative = int(parts[0]), [float(v) for v in parts[1:-1]], parts[-1]
            with open(os.path.join(image_root, relative), "rb") as image:
                header = mx.recordio.IRHeader(0, label, index, 0)
                record.write_idx(index, mx.recordio.pack(header, image.read()))
    record.close()
    return prefix + ".rec"


def builtin_recordio_split(work_dir, channel_dir, name, items, header_width=2, extra=()):
    """Images under ``work_dir/<name>_images``, their .lst, and ``<channel_dir>/<name>.rec``
    (with its .idx beside it, as im2rec leaves it)."""
    image_root = os.path.join(work_dir, name + "_images")
    entries = []
    for index, (image_name, size, boxes) in enumerate(items):
        write_image(os.path.join(image_root, image_name + ".jpg"), size, seed=index)
        entries.append((index, detection_label(boxes, size, header_width, extra), image_name + ".jpg"))
    lst = write_lst(os.path.join(work_dir, name + ".lst"), entries)
    os.makedirs(channel_dir, exist_ok=True)
    return pack_rec(lst, image_root, os.path.join(channel_dir, name))


def builtin_recordio_channels(channels_dir, work_dir, n_train=6, n_val=3, header_width=2,
                              size=(64, 48)):
    """``train/train.rec`` and ``validation/val.rec`` as a built-in algorithm job sends them."""
    builtin_recordio_split(work_dir, os.path.join(channels_dir, "train"), "train",
                           sample_objects(n_train, size), header_width, extra=(size[0], size[1]))
    if n_val:
        builtin_recordio_split(work_dir, os.path.join(channels_dir, "validation"), "val",
                               sample_objects(n_val, size), header_width, extra=(size[0], size[1]))
    return channels_dir


# ------------------------------------------------------------------- COCO exports

def _coco_boxes(items, first_image_id, first_category_id, ann_fields, start_ann_id=1):
    images, annotations = [], []
    ann_id = start_ann_id
    for number, (file_name, size, boxes) in enumerate(items):
        image_id = first_image_id + number
        images.append((image_id, file_name, size))
        for class_id, left, top, w, h in boxes:
            annotation = {"id": ann_id, "image_id": image_id,
                          "category_id": first_category_id + class_id,
                          "segmentation": [], "area": float(w * h),
                          "bbox": [float(left), float(top), float(w), float(h)], "iscrowd": 0}
            annotation.update(ann_fields)
            annotations.append(annotation)
            ann_id += 1
    return images, annotations


def polygon(left, top, w, h):
    """A polygon inside the box (a diamond), COCO's flat [x1, y1, x2, y2, ...]."""
    cx, cy = left + w / 2.0, top + h / 2.0
    return [[float(left), cy, cx, float(top), float(left + w), cy, cx, float(top + h)]]


def cvat_rle(mask):
    """A binary mask (numpy, height x width) as datumaro's ``mask_tools.mask_to_rle`` writes it
    into CVAT's COCO 1.0: uncompressed RLE, runs in column-major order starting with a run of 0s
    (of length 0 when the first pixel is set), ``size`` [height, width]."""
    import numpy as np

    flat = np.asarray(mask, dtype=np.uint8).ravel(order="F")
    counts, value, run = [], 0, 0
    for pixel in flat:
        if pixel != value:
            counts.append(run)
            value, run = pixel, 0
        run += 1
    counts.append(run)
    return {"counts": [int(c) for c in counts], "size": [int(n) for n in mask.shape]}


def cvat_mask_annotation(annotation, size):
    """A box annotation turned into what CVAT's COCO 1.0 writes for a mask or brush object of
    those pixels (datumaro's coco exporter, ``convert_instance``: ``is_crowd = mask is not None``):
    ``segmentation`` the uncompressed RLE, ``iscrowd: 1``, ``area`` the mask's pixels, ``bbox``
    datumaro's ``find_mask_bbox`` ([x0, y0, x1 - x0, y1 - y0] of the first and last set columns
    and rows)."""
    import numpy as np

    left, top, w, h = (int(v) for v in annotation["bbox"])
    mask = np.zeros((size[1], size[0]), dtype=np.uint8)
    mask[top:top + h, left:left + w] = 1
    return dict(annotation, segmentation=cvat_rle(mask), iscrowd=1, area=float(mask.sum()),
                bbox=[float(left), float(top), float(w - 1), float(h - 1)])


def cvat_coco(root, subsets, class_names=("dog", "cat"), flat_images=False, polygons=False,
              masks=False):
    """CVAT's "COCO 1.0" export with images: {subset: items} -> ``annotations/instances_<subset>
    .json`` and ``images/<subset>/<name>.jpg`` (``images/<name>.jpg`` with ``flat_images``), as
    datumaro's COCO converter writes it (cvat-ai/datumaro, datumaro/plugins/coco_format/
    converter.py, run by cvat/apps/dataset_manager/formats/coco.py): orjson's compact bytes, ids
    from 1 per subset file, a box's ``attributes`` CVAT's ``occluded`` and ``rotation``.
    tests/samples/cvat_coco_1_0/ is the sample it must reproduce (boxes; with ``polygons`` the
    area stays the box's, where CVAT writes the polygon's pixel area). ``masks``: every object a
    mask or brush object (``cvat_mask_annotation``)."""
    for subset, items in subsets.items():
        folder = os.path.join(root, "images") if flat_images else os.path.join(root, "images", subset)
        named = []
        for number, (name, size, boxes) in enumerate(items):
            write_image(os.path.join(folder, name + ".jpg"), size, seed=number)
            named.append((name + ".jpg", size, boxes))
        images, annotations = _coco_boxes(named, 1, 1, {"attributes": {"occluded": False,
                                                                        "rotation": 0.0}})
        if polygons:
            for annotation in annotations:
                annotation["segmentation"] = polygon(*annotation["bbox"])
        if masks:
            sizes = {i: s for i, _f, s in images}
            annotations = [cvat_mask_annotation(a, sizes[a["image_id"]]) for a in annotations]
        write_json(os.path.join(root, "annotations", "instances_%s.json" % subset), {
            "licenses": [{"name": "", "id": 0, "url": ""}],
            "info": {"contributor": "", "date_created": "", "description": "", "url": "",
                     "version": "", "year": ""},
            "categories": [{"id": i + 1, "name": n, "supercategory": ""} for i, n in enumerate(class_names)],
            "images": [{"id": i, "width": s[0], "height": s[1], "file_name": f, "license": 0,
                        "flickr_url": "", "coco_url": "", "date_captured": 0} for i, f, s in images],
            "annotations": annotations}, compact=True)
    return root


def roboflow_name(name, ext="jpg"):
    """Roboflow's renamed file: ``<stem>_<ext>.rf.<32 hex>.<ext>``."""
    digest = hashlib.md5(name.encode()).hexdigest()
    return "%s_%s.rf.%s.%s" % (name, ext, digest, ext)


def roboflow_coco(root, splits, class_names=("dog", "cat"), project="pets", polygons=False):
    """Roboflow's "COCO" export: {split folder: items} -> ``<split>/_annotations.coco.json`` with
    the renamed images beside it (splits named train, valid, test)."""
    with open(os.path.join(_mkdir(root), "README.roboflow.txt"), "w") as handle:
        handle.write("\nPets - v1 2024-01-01\n==============================\n\nThis dataset was "
                     "exported via roboflow.com\n")
    for split, items in splits.items():
        named = []
        for number, (name, size, boxes) in enumerate(items):
            file_name = roboflow_name(name)
            write_image(os.path.join(root, split, file_name), size, seed=number)
            named.append((file_name, size, boxes))
        images, annotations = _coco_boxes(named, 0, 1, {}, start_ann_id=0)
        if polygons:
            for annotation in annotations:
                annotation["segmentation"] = polygon(*annotation["bbox"])
        write_json(os.path.join(root, split, "_annotations.coco.json"), {
            "info": {"year": "2024", "version": "1", "description": "Exported from roboflow.com",
                     "contributor": "", "url": "https://public.roboflow.com/object-detection/x",
                     "date_created": "2024-01-01T00:00:00+00:00"},
            "licenses": [{"id": 1, "url": "https://creativecommons.org/licenses/by/4.0/",
                          "name": "CC BY 4.0"}],
            "categories": [{"id": 0, "name": project, "supercategory": "none"}]
                          + [{"id": i + 1, "name": n, "supercategory": project}
                             for i, n in enumerate(class_names)],
            "images": [{"id": i, "license": 1, "file_name": f, "height": s[1], "width": s[0],
                        "date_captured": "2024-01-01T00:00:00+00:00"} for i, f, s in images],
            "annotations": annotations}, indent=4)
    return root


def label_studio_coco(root, items, class_names=("cat", "dog"), windows=False, polygons=False,
                      date_created="2026-12-01 10:15:42.123456"):
    """Label Studio's "COCO" export (with images): ``result.json`` and ``images/<8 hex>-<name>``;
    ``file_name`` ``images/...`` (``images\\...`` with ``windows``). Written as
    label-studio-converter's ``Converter.convert_to_coco`` (HumanSignal/label-studio-converter,
    label_studio_converter/converter.py) writes it: ``json.dump(indent=2)``; keys images,
    categories, annotations, info; categories sorted by name from id 0 (``_get_labels``); images
    and annotations from id 0; a rectangle's keys id, image_id, category_id, segmentation
    ``[]``, bbox, ignore, iscrowd, area (``w * h``); ``info`` with the export's year and
    ``str(datetime.now())``. The items' class ids index ``class_names``.
    tests/samples/label_studio_coco/ is the sample it must reproduce."""
    ordered = sorted(class_names)
    images, annotations = [], []
    for number, (name, size, boxes) in enumerate(items):
        stored = "%s-%s.jpg" % (hashlib.md5(name.encode()).hexdigest()[:8], name)
        write_image(os.path.join(root, "images", stored), size, seed=number)
        images.append({"width": size[0], "height": size[1], "id": number,
                       "file_name": ("images\\" if windows else "images/") + stored})
        for class_id, left, top, w, h in boxes:
            bbox = [float(left), float(top), float(w), float(h)]
            annotations.append({"id": len(annotations), "image_id": number,
                                "category_id": ordered.index(class_names[class_id]),
                                "segmentation": polygon(*bbox) if polygons else [], "bbox": bbox,
                                "ignore": 0, "iscrowd": 0, "area": bbox[2] * bbox[3]})
    write_json(os.path.join(root, "result.json"), {
        "images": images,
        "categories": [{"id": i, "name": n} for i, n in enumerate(ordered)],
        "annotations": annotations,
        "info": {"year": int(date_created[:4]), "version": "1.0", "description": "",
                 "contributor": "Label Studio", "url": "", "date_created": date_created}}, indent=2)
    return root


def _mkdir(path):
    os.makedirs(path, exist_ok=True)
    return path
