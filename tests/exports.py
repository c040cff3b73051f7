"""Labelled photos laid out exactly as labelling tools export them, for the readers' tests, the
whole-job tests and the data check: labelImg (XML beside each image, and a separate save folder),
CVAT's "Pascal VOC 1.1", Roboflow's "Pascal VOC" and "YOLOv8", and an Ultralytics dataset.

The photos are generated (shapes on textured backgrounds: ``synthetic_voc.make_image``); the file
and folder names, the annotation text and its quirks are the tools' own: labelImg's absolute
``<path>`` from the labeller's machine, tab indentation, 1-based integer corners clamped to 1, and
``<depth>1</depth>`` for a grey photo; CVAT's float edges, its nested ``<source><annotation>``,
its ``labelmap.txt`` with a comment line, ``background`` and VOC colormap colours, its per-label
lists for tags (tests/samples/ holds what each tool writes; tests/data/test_tool_samples.py checks
these writers against it); Roboflow's ``<stem>_<ext>.rf.<hash>.<ext>`` names and its xmin, xmax, ymin, ymax order; YOLO's
fractions, Roboflow's ``../train/images`` paths and an Ultralytics ``path`` that is not here.
"""

import hashlib
import os
import random
from dataclasses import dataclass

from detector_training.data.generated.synthetic_voc import make_image

CLASSES = ("circle", "square")


@dataclass
class Photo:
    """A generated photo: its file name, the image, and its objects as (class, xmin, ymin, xmax,
    ymax) in 0-based pixels, corners inclusive."""

    name: str
    image: object
    objects: list

    @property
    def stem(self):
        return os.path.splitext(self.name)[0]


def photos(count, seed=0, prefix="IMG_", start=1, grey=(), suffix=".jpg"):
    """``count`` photos named ``<prefix><number>.jpg``; those at positions ``grey`` are grey-scale."""
    rng = random.Random(seed)
    made = []
    for n in range(count):
        image, objects = make_image(rng, list(CLASSES))
        if n in grey:
            image = image.convert("L")
        made.append(Photo("%s%04d%s" % (prefix, start + n, suffix), image, objects))
    return made


def save(photo, folder, name=None):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name or photo.name)
    if path.lower().endswith((".jpg", ".jpeg")):
        photo.image.save(path, "JPEG", quality=90)
    else:
        photo.image.save(path)
    return path


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


# labelImg ------------------------------------------------------------------------------------

def labelimg_xml(photo, image_folder, size=None, extra_objects=()):
    """labelImg's PascalVocWriter: tabs, no declaration, ``<path>`` on the labeller's machine,
    depth 1 for a grey photo, corners 1-based integers clamped to at least 1. ``size``: what the
    XML claims (default: the true size); ``extra_objects``: more (class, xmin, ymin, xmax, ymax)
    written as they are (1-based already)."""
    width, height = size or photo.image.size
    depth = 1 if photo.image.mode == "L" else 3
    folder = os.path.basename(image_folder.rstrip("/"))
    objects = "".join(_labelimg_object(name, max(1, x0 + 1), max(1, y0 + 1), x1 + 1, y1 + 1,
                                       photo.image.size)
                      for name, x0, y0, x1, y1 in photo.objects)
    objects += "".join(_labelimg_object(*obj, photo.image.size) for obj in extra_objects)
    return ("<annotation>\n\t<folder>%s</folder>\n\t<filename>%s</filename>\n"
            "\t<path>/home/ana/Pictures/%s/%s</path>\n\t<source>\n\t\t<database>Unknown</database>\n"
            "\t</source>\n\t<size>\n\t\t<width>%d</width>\n\t\t<height>%d</height>\n"
            "\t\t<depth>%d</depth>\n\t</size>\n\t<segmented>0</segmented>\n%s</annotation>\n"
            % (folder, photo.name, folder, photo.name, width, height, depth, objects))


def _labelimg_object(name, xmin, ymin, xmax, ymax, image_size):
    truncated = int(xmin == 1 or ymin == 1 or xmax >= image_size[0] or ymax >= image_size[1])
    return ("\t<object>\n\t\t<name>%s</name>\n\t\t<pose>Unspecified</pose>\n"
            "\t\t<truncated>%d</truncated>\n\t\t<difficult>0</difficult>\n\t\t<bndbox>\n"
            "\t\t\t<xmin>%d</xmin>\n\t\t\t<ymin>%d</ymin>\n\t\t\t<xmax>%d</xmax>\n"
            "\t\t\t<ymax>%d</ymax>\n\t\t</bndbox>\n\t</object>\n"
            % (name, truncated, xmin, ymin, xmax, ymax))


def labelimg_beside(root, count=6, seed=0, grey=(1,), folder="photos"):
    """labelImg's default: ``<root>/<folder>/IMG_nnnn.jpg`` with ``IMG_nnnn.xml`` beside each."""
    made = photos(count, seed, grey=grey)
    images = os.path.join(root, folder)
    for photo in made:
        save(photo, images)
        _write(os.path.join(images, photo.stem + ".xml"), labelimg_xml(photo, images))
    return made


def labelimg_separate(root, count=6, seed=0, grey=(1,), images="images", annotations="annotations"):
    """labelImg with "Change Save Dir": images in one folder, the XMLs in another."""
    made = photos(count, seed, grey=grey)
    image_dir = os.path.join(root, images)
    for photo in made:
        save(photo, image_dir)
        _write(os.path.join(root, annotations, photo.stem + ".xml"), labelimg_xml(photo, image_dir))
    return made


# CVAT ----------------------------------------------------------------------------------------

def cvat_edges(photo, decimals=True):
    """CVAT boxes for ``photo``'s objects: (class, xmin, ymin, xmax, ymax) as float edges, with
    decimals (a box drawn between pixel edges) unless ``decimals`` is False."""
    edges = []
    for i, (name, x0, y0, x1, y1) in enumerate(photo.objects):
        shift = 0.35 if decimals else 0.0
        edges.append((name, x0 + shift, float(y0), x1 - shift, y1 + 0.5 * (i % 2)))
    return edges


def _cvat_corners(xmin, ymin, xmax, ymax):
    """The four numbers CVAT's VOC export writes for a box drawn from (xmin, ymin) to (xmax, ymax):
    CVAT makes ``Bbox(x0, y0, x1 - x0, y1 - y0)``, datumaro keeps its points rounded to 2 decimals
    (``np.around``), and the writer prints ``x``, ``y``, ``x + w``, ``y + h`` of ``get_bbox()``
    with ``str(float)`` (``40.5``, ``63.0``)."""
    import numpy

    points = numpy.around([xmin, ymin, xmin + (xmax - xmin), ymin + (ymax - ymin)], 2).tolist()
    x, y = points[0], points[1]
    w, h = points[2] - x, points[3] - y
    return tuple(str(float(v)) for v in (x, y, x + w, y + h))


def cvat_xml(photo, decimals=True, edges=None, occluded=()):
    """CVAT's "Pascal VOC 1.1" annotation, as datumaro's VOC converter (cvat-ai/datumaro,
    datumaro/plugins/voc_format/converter.py) writes it from CVAT's items (cvat/apps/
    dataset_manager/bindings.py): lxml's ``tostring(pretty_print=True)`` (two-space indent, no
    XML declaration, a final newline); ``<folder>`` the item id's part before its first ``_``;
    ``<source>`` with database, annotation and image "Unknown"; an empty ``<depth></depth>``; per
    box ``truncated``, ``occluded``, ``difficult`` as elements and CVAT's other box attribute,
    ``rotation``, in ``<attributes>``; each box as its float edges (``xmin = x``, ``xmax = x + w``,
    ``str(float)``: no + 1, unlike the official VOC's 1-based pixel indices). ``edges``:
    (class, xmin, ymin, xmax, ymax) to write (default: ``cvat_edges(photo, decimals)``);
    ``occluded``: the positions of boxes marked occluded. tests/samples/cvat_voc_1_1/ is the
    sample it must reproduce."""
    width, height = photo.image.size
    edges = cvat_edges(photo, decimals) if edges is None else edges
    objects = ""
    for i, (name, *corners) in enumerate(edges):
        objects += ("  <object>\n    <name>%s</name>\n    <truncated>0</truncated>\n"
                    "    <occluded>%d</occluded>\n    <difficult>0</difficult>\n    <bndbox>\n"
                    "      <xmin>%s</xmin>\n      <ymin>%s</ymin>\n      <xmax>%s</xmax>\n"
                    "      <ymax>%s</ymax>\n    </bndbox>\n    <attributes>\n      <attribute>\n"
                    "        <name>rotation</name>\n        <value>0.0</value>\n"
                    "      </attribute>\n    </attributes>\n  </object>\n"
                    % ((name, int(i in occluded)) + _cvat_corners(*corners)))
    folder = photo.stem[:photo.stem.find("_")] if "_" in photo.stem else ""
    return ("<annotation>\n  <folder>%s</folder>\n"
            "  <filename>%s</filename>\n  <source>\n    <database>Unknown</database>\n"
            "    <annotation>Unknown</annotation>\n    <image>Unknown</image>\n  </source>\n"
            "  <size>\n    <width>%d</width>\n    <height>%d</height>\n    <depth></depth>\n"
            "  </size>\n  <segmented>0</segmented>\n%s</annotation>\n"
            % (folder, photo.name, width, height, objects))


def voc_colour(index):
    """datumaro's VOC colormap entry ``index`` (generate_colormap: the bits of the index spread
    over r, g, b from the high bit down): 0 -> 0,0,0; 1 -> 128,0,0; 2 -> 0,128,0; ..."""
    colour = [0, 0, 0]
    for bit in range(7, -1, -1):
        for channel in range(3):
            colour[channel] |= ((index >> channel) & 1) << bit
        index >>= 3
    return tuple(colour)


def cvat_labelmap(labels):
    """labelmap.txt as CVAT's VOC export writes it (label_map='source': CVAT's labels have no
    colormap there, so datumaro puts ``background`` first and gives every label its VOC colormap
    colour by position)."""
    return "# label:color_rgb:parts:actions\n" + "".join(
        "%s:%s::\n" % (label, ",".join(map(str, voc_colour(n))))
        for n, label in enumerate(("background",) + tuple(labels)))


def cvat_voc(root, subsets=(("default", 6),), seed=0, grey=(1,), labels=CLASSES, tags=False):
    """CVAT's "Pascal VOC 1.1" export (unzipped): Annotations/, JPEGImages/, ImageSets/Main/
    <subset>.txt (the item ids), labelmap.txt. ``subsets``: (name, count) pairs (``default``
    unless the task has subsets; CVAT keeps their case, e.g. ``Train``). datumaro writes
    ``ImageSets/Main/<label>_<subset>.txt`` (background included; `` 1``/``-1`` per image) only for
    images with tags (image-level labels): ``tags`` tags every image with the classes of its boxes.
    Its Segmentation, Layout and Action lists are written only for masks, parts and actions, which
    a box task has none of."""
    total = sum(count for _, count in subsets)
    made = photos(total, seed, prefix="frame_", grey=grey)
    for photo in made:
        save(photo, os.path.join(root, "JPEGImages"))
        _write(os.path.join(root, "Annotations", photo.stem + ".xml"), cvat_xml(photo))
    main = os.path.join(root, "ImageSets", "Main")
    at = 0
    for subset, count in subsets:
        part = made[at:at + count]
        at += count
        _write(os.path.join(main, subset + ".txt"), "".join(p.stem + "\n" for p in part))
        for label in ("background",) + tuple(labels) if tags else ():
            _write(os.path.join(main, "%s_%s.txt" % (label, subset)), "".join(
                "%s %s\n" % (p.stem, " 1" if any(o[0] == label for o in p.objects) else "-1")
                for p in part))
    _write(os.path.join(root, "labelmap.txt"), cvat_labelmap(labels))
    return made


# Roboflow ------------------------------------------------------------------------------------

def roboflow_name(name, seed):
    """Roboflow's rename: IMG_0001.jpg -> IMG_0001_jpg.rf.<32 hex>.jpg."""
    stem, ext = os.path.splitext(name)
    digest = hashlib.md5(("%s-%d" % (name, seed)).encode()).hexdigest()
    return "%s_%s.rf.%s%s" % (stem, ext[1:], digest, ext)


def roboflow_xml(photo):
    """Roboflow's VOC: tabs, <path> = the file name, xmin, xmax, ymin, ymax in that order."""
    width, height = photo.image.size
    objects = "".join(
        "\t<object>\n\t\t<name>%s</name>\n\t\t<pose>Unspecified</pose>\n\t\t<truncated>0</truncated>\n"
        "\t\t<difficult>0</difficult>\n\t\t<occluded>0</occluded>\n\t\t<bndbox>\n"
        "\t\t\t<xmin>%d</xmin>\n\t\t\t<xmax>%d</xmax>\n\t\t\t<ymin>%d</ymin>\n\t\t\t<ymax>%d</ymax>\n"
        "\t\t</bndbox>\n\t</object>\n" % (name, x0 + 1, x1 + 1, y0 + 1, y1 + 1)
        for name, x0, y0, x1, y1 in photo.objects)
    return ("<annotation>\n\t<folder></folder>\n\t<filename>%s</filename>\n\t<path>%s</path>\n"
            "\t<source>\n\t\t<database>roboflow.com</database>\n\t</source>\n\t<size>\n"
            "\t\t<width>%d</width>\n\t\t<height>%d</height>\n\t\t<depth>3</depth>\n\t</size>\n"
            "\t<segmented>0</segmented>\n%s</annotation>"
            % (photo.name, photo.name, width, height, objects))


ROBOFLOW_README = ("Shapes - v1 2026-12-01\n==============================\n\nThis dataset was "
                   "exported via roboflow.com on December 1, 2026\n")


def _roboflow_photos(splits, seed, grey):
    made, at = {}, 0
    total = sum(count for _, count in splits)
    everything = photos(total, seed, grey=grey)
    for split, count in splits:
        part = everything[at:at + count]
        at += count
        for photo in part:  # Roboflow converts every photo to RGB JPEG
            photo.image = photo.image.convert("RGB")
            photo.name = roboflow_name(photo.name, seed)
        made[split] = part
    return made


def roboflow_voc(root, splits=(("train", 6), ("valid", 3), ("test", 2)), seed=0, grey=()):
    """Roboflow's "Pascal VOC" export: train/, valid/, test/, each XML beside its image."""
    made = _roboflow_photos(splits, seed, grey)
    for split, part in made.items():
        for photo in part:
            save(photo, os.path.join(root, split))
            _write(os.path.join(root, split, photo.stem + ".xml"), roboflow_xml(photo))
    _write(os.path.join(root, "README.dataset.txt"), "# Shapes > 2026-12-01\n")
    _write(os.path.join(root, "README.roboflow.txt"), ROBOFLOW_README)
    return made


# YOLO ----------------------------------------------------------------------------------------

def yolo_lines(photo):
    """One 'class cx cy w h' line per object, fractions with six decimals (Ultralytics' own)."""
    width, height = photo.image.size
    lines = []
    for name, x0, y0, x1, y1 in photo.objects:
        w, h = x1 - x0, y1 - y0
        lines.append("%d %.6f %.6f %.6f %.6f" % (CLASSES.index(name), (x0 + w / 2) / width,
                                                 (y0 + h / 2) / height, w / width, h / height))
    return "".join(line + "\n" for line in lines)


def roboflow_yolo(root, splits=(("train", 6), ("valid", 3), ("test", 2)), seed=0, negatives=()):
    """Roboflow's "YOLOv8" export: data.yaml (../train/images paths, nc, names list, its roboflow
    block), <split>/images and <split>/labels. Photos at positions ``negatives`` of the train
    split have an empty label file."""
    made = _roboflow_photos(splits, seed, ())
    for split, part in made.items():
        for n, photo in enumerate(part):
            save(photo, os.path.join(root, split, "images"))
            text = "" if split == "train" and n in negatives else yolo_lines(photo)
            _write(os.path.join(root, split, "labels", photo.stem + ".txt"), text)
    keys = {"train": "train", "valid": "val", "test": "test"}
    _write(os.path.join(root, "data.yaml"),
           "".join("%s: ../%s/images\n" % (keys[s], s) for s, _ in splits)
           + "\nnc: %d\nnames: [%s]\n\nroboflow:\n  workspace: shapes-ws\n  project: shapes\n"
             "  version: 1\n  license: CC BY 4.0\n  url: https://universe.roboflow.com/shapes-ws/"
             "shapes/dataset/1\n" % (len(CLASSES), ", ".join("'%s'" % c for c in CLASSES)))
    _write(os.path.join(root, "README.dataset.txt"), "# Shapes > 2026-12-01\n")
    _write(os.path.join(root, "README.roboflow.txt"), ROBOFLOW_README)
    return made


def ultralytics_yolo(root, train=6, val=3, seed=0, grey=(1,), unlabelled=(2,), name="shapes"):
    """An Ultralytics dataset as its docs lay it out: ``<name>.yaml`` (``path: ../datasets/<name>``
    from the exporter's machine, ``names`` as a mapping) beside images/{train,val} and
    labels/{train,val}. Train photos at ``unlabelled`` have no label file (negatives)."""
    made = {"train": photos(train, seed, grey=grey), "val": photos(val, seed + 1, start=train + 1)}
    for split, part in made.items():
        for n, photo in enumerate(part):
            save(photo, os.path.join(root, "images", split))
            if not (split == "train" and n in unlabelled):
                _write(os.path.join(root, "labels", split, photo.stem + ".txt"), yolo_lines(photo))
    _write(os.path.join(root, name + ".yaml"),
           "# Ultralytics YOLO, dataset %s\npath: ../datasets/%s # dataset root dir\n"
           "train: images/train # train images (relative to 'path')\n"
           "val: images/val # val images (relative to 'path')\ntest: # test images (optional)\n\n"
           "# Classes\nnames:\n%s" % (name, name, "".join("  %d: %s\n" % (i, c)
                                                           for i, c in enumerate(CLASSES))))
    return made


# A job around an export ---------------------------------------------------------------------

FILE_CHANNEL = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                "RecordWrapperType": "None"}


def job(base, hyperparameters, channels):
    """A SageMaker job tree under ``base``: ``channels`` {name: a function laying an export out in
    that channel's folder}, hyperparameters.json (strings, as SageMaker sends them) and
    inputdataconfig.json naming the channels."""
    import json

    for name, lay_out in channels.items():
        lay_out(os.path.join(base, "input", "data", name))
    config_dir = os.path.join(base, "input", "config")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "hyperparameters.json"), "w") as handle:
        json.dump({k: str(v) for k, v in hyperparameters.items()}, handle)
    with open(os.path.join(config_dir, "inputdataconfig.json"), "w") as handle:
        json.dump({name: FILE_CHANNEL for name in channels}, handle)
    return base
