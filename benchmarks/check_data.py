"""How fast the data check (detector-check-data) reads labelled data, against a bare baseline in
the same run: walking the same folders and parsing the same annotation files (XML with the
standard library's parser, JSON with json.load), nothing else. Two sizes show how the time grows.

    .venv/bin/python benchmarks/check_data.py [--sizes 10000,100000] [--layouts voc,coco]

Generated data: tiny JPEG files with real headers (one 16x12 image's bytes, written once per
image), one to three boxes each. ``voc``: a VOCdevkit tree (Annotations/, JPEGImages/,
ImageSets/Main/trainval.txt) checked as dataset=custom, a tenth carved for validation;
``coco``: one COCO-format JSON and its image folder (and a ten-image validation file). Prints one line per layout and size, and a Markdown table for benchmarks/README.md.
"""

import argparse
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from xml.etree import ElementTree

from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "container"))

from detector_training.job.check_data import check  # noqa: E402

CLASSES = ("cat", "dog", "bird")
WIDTH, HEIGHT = 16, 12


def jpeg_bytes():
    buffer = io.BytesIO()
    Image.new("RGB", (WIDTH, HEIGHT), "gray").save(buffer, "JPEG")
    return buffer.getvalue()


def boxes(rng):
    return [(rng.choice(CLASSES), 1, 1, rng.randint(4, WIDTH), rng.randint(4, HEIGHT))
            for _ in range(rng.randint(1, 3))]


def voc_tree(root, count, seed=0):
    """A VOCdevkit/VOC2007 tree of ``count`` images under ``root`` (a channel folder)."""
    rng, image = random.Random(seed), jpeg_bytes()
    year = os.path.join(root, "VOCdevkit", "VOC2007")
    for folder in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(year, folder))
    names = []
    for n in range(count):
        name = "%06d" % n
        names.append(name)
        with open(os.path.join(year, "JPEGImages", name + ".jpg"), "wb") as handle:
            handle.write(image)
        objects = "".join(
            "<object><name>%s</name><difficult>0</difficult><bndbox><xmin>%d</xmin><ymin>%d</ymin>"
            "<xmax>%d</xmax><ymax>%d</ymax></bndbox></object>" % box for box in boxes(rng))
        with open(os.path.join(year, "Annotations", name + ".xml"), "w") as handle:
            handle.write("<annotation><folder>VOC2007</folder><filename>%s.jpg</filename><size>"
                         "<width>%d</width><height>%d</height><depth>3</depth></size>%s"
                         "</annotation>" % (name, WIDTH, HEIGHT, objects))
    with open(os.path.join(year, "ImageSets", "Main", "trainval.txt"), "w") as handle:
        handle.write("\n".join(names) + "\n")
    return {"dataset": "custom", "train_splits": "2007_trainval", "val_fraction": "0.1"}


def coco_tree(root, count, seed=0):
    """annotations/instances_train2017.json and train2017/ of ``count`` images under ``root``."""
    rng, image = random.Random(seed), jpeg_bytes()
    os.makedirs(os.path.join(root, "train2017"))
    os.makedirs(os.path.join(root, "annotations"))
    images, annotations = [], []
    for n in range(count):
        name = "%06d.jpg" % n
        with open(os.path.join(root, "train2017", name), "wb") as handle:
            handle.write(image)
        images.append({"id": n, "file_name": name, "width": WIDTH, "height": HEIGHT})
        for label, x1, y1, x2, y2 in boxes(rng):
            annotations.append({"id": len(annotations), "image_id": n, "iscrowd": 0,
                                "category_id": CLASSES.index(label) + 1,
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1)})
    categories = [{"id": i + 1, "name": c} for i, c in enumerate(CLASSES)]
    with open(os.path.join(root, "annotations", "instances_train2017.json"), "w") as handle:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, handle)
    # COCO validates on its own file (no carving): ten of the images, a negligible share.
    os.makedirs(os.path.join(root, "val2017"))
    for entry in images[:10]:
        shutil.copy(os.path.join(root, "train2017", entry["file_name"]), os.path.join(root, "val2017"))
    with open(os.path.join(root, "annotations", "instances_val2017.json"), "w") as handle:
        json.dump({"images": images[:10], "annotations": [a for a in annotations
                                                          if a["image_id"] < 10],
                   "categories": categories}, handle)
    return {"dataset": "coco"}


def bare_pass(channels_dir):
    """The baseline: walk every folder, parse every .xml and .json file; nothing else."""
    files = 0
    for folder, _dirs, names in os.walk(channels_dir):
        for name in names:
            files += 1
            path = os.path.join(folder, name)
            if name.endswith(".xml"):
                ElementTree.parse(path)
            elif name.endswith(".json"):
                with open(path, "rb") as handle:
                    json.load(handle)
    return files


LAYOUTS = {"voc": ("train", voc_tree), "coco": ("coco", coco_tree)}


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def measure(layout, count, scratch):
    channel_name, build = LAYOUTS[layout]
    channels = os.path.join(scratch, "%s-%d" % (layout, count))
    hyperparameters = build(os.path.join(channels, channel_name), count)
    bare_pass(channels)  # the same warm page cache for both
    bare, _ = timed(bare_pass, channels)
    checked, report = timed(check, channels, hyperparameters)
    shutil.rmtree(channels)
    if not report.ok or not report.splits:
        raise SystemExit("%s: the check did not read the data: %s" % (
            layout, "; ".join([p.text() for p in report.problems] + report.notes)))
    images = report.splits[0].images  # the training split
    assert images == count, (images, count)
    return checked, bare, images


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--layouts", default="voc,coco")
    parser.add_argument("--scratch", help="where the data is generated (default: a temporary folder)")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="check-data-bench-", dir=args.scratch)
    rows = []
    try:
        for layout in args.layouts.split(","):
            for count in (int(s) for s in args.sizes.split(",")):
                checked, bare, images = measure(layout, count, scratch)
                rows.append((layout, images, checked, bare))
                print("%s %d images: check %.2f s (%.0f images/s), bare walk+parse %.2f s, ratio "
                      "%.2f" % (layout, images, checked, images / checked, bare, checked / bare),
                      flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\n| layout | images | check (s) | per 1000 images (s) | bare walk + parse (s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for layout, images, checked, bare in rows:
        print("| %s | %d | %.2f | %.3f | %.2f | %.2f |" % (layout, images, checked,
                                                          1000 * checked / images, bare,
                                                          checked / bare))


if __name__ == "__main__":
    main()
