"""A small generated dataset in the COCO layout GluonCV reads, with its own categories.

``annotations/instances_train2017.json`` and ``annotations/instances_val2017.json`` with the images
under ``train2017/`` and ``val2017/`` (so the COCO presets' split names work unchanged), made of the
same shapes as :mod:`detector_training.data.generated.synthetic_voc`. Like a labelling tool's export it has categories of
its own (ids 1, 3, 5: not contiguous, not COCO's 80); training entries name their image with
``file_name`` only, validation entries also carry a ``coco_url`` (as COCO's own files do), and the
last validation image has no object at all. Every object has its instance mask: the outline of
its shape as a polygon, or (one training image in three) as compressed RLE, the way labelling
tools export brush masks; so the same data trains Faster R-CNN (boxes) and Mask R-CNN (masks).
"""

import json
import os
import random

from detector_training.data.generated.synthetic_voc import STYLES, _background, make_image, shape_of, shape_polygon

TRAIN_SPLIT = "instances_train2017"
VAL_SPLIT = "instances_val2017"


def category_ids(classes):
    return [2 * i + 1 for i in range(len(classes))]


def polygon_area(polygon):
    """The area inside a polygon (COCO's ``area`` of an object is its mask's)."""
    return round(abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1)
                         in zip(polygon, polygon[1:] + polygon[:1]))) / 2.0, 2)


def segmentation(polygon, width, height, rle=False):
    """A COCO ``segmentation``: [x0, y0, x1, y1, ...] as one polygon, or its compressed RLE."""
    flat = [round(float(v), 2) for point in polygon for v in point]
    if not rle:
        return [flat]
    import pycocotools.mask as cocomask

    encoded = cocomask.merge(cocomask.frPyObjects([flat], height, width))
    return {"size": [height, width], "counts": encoded["counts"].decode("ascii")}


def write_split(root, split, count, classes, rng, with_url=False, empty_last=False, first_id=1,
                rle_every=0, style="shapes"):
    """Write ``count`` images under ``root/<folder>`` and ``annotations/<split>.json``; with
    ``rle_every`` n, the masks of every n-th image are RLE. ``style``: synthetic_voc's STYLES."""
    folder = split.split("_", 1)[1] if split.startswith("instances_") else split
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    ids = dict(zip(classes, category_ids(classes)))
    images, annotations = [], []
    for n in range(count):
        image_id = first_id + n
        if empty_last and n == count - 1:
            width, height = 160, 120
            img, objects = _background(rng, width, height), []
        else:
            img, objects = make_image(rng, list(classes), style)
        name = "%012d.jpg" % image_id
        img.save(os.path.join(root, folder, name), quality=90)
        entry = {"id": image_id, "file_name": name, "width": img.width, "height": img.height}
        if with_url:
            entry["coco_url"] = "http://images.example.invalid/%s/%s" % (folder, name)
        images.append(entry)
        rle = bool(rle_every) and n % rle_every == rle_every - 1
        for cls, x0, y0, x1, y1 in objects:  # pixel-inclusive corners -> COCO [x, y, w, h]
            w, h = x1 - x0 + 1, y1 - y0 + 1
            polygon = shape_polygon(shape_of(cls, classes, style), (x0, y0, x1, y1))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": ids[cls], "bbox": [x0, y0, w, h],
                                "area": polygon_area(polygon), "iscrowd": 0,
                                "segmentation": segmentation(polygon, img.width, img.height, rle)})
    document = {"info": {"description": "generated shapes"}, "licenses": [], "images": images,
                "annotations": annotations,
                "categories": [{"id": ids[c], "name": c, "supercategory": "shape"} for c in classes]}
    with open(os.path.join(root, "annotations", split + ".json"), "w") as handle:
        json.dump(document, handle)
    return document


def generate(root, n_train=48, n_val=24, classes=None, seed=0, style="shapes"):
    """Create the COCO-layout dataset under ``root`` and return ``root``. ``classes`` defaults to
    the style's shape names (synthetic_voc's STYLES)."""
    classes = tuple(classes or STYLES[style].shapes)
    rng = random.Random(seed)
    write_split(root, TRAIN_SPLIT, n_train, classes, rng, rle_every=3, style=style)
    write_split(root, VAL_SPLIT, n_val, classes, rng, with_url=True, empty_last=n_val > 1,
                first_id=100000, style=style)
    return root

