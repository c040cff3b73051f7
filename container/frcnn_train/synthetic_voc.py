"""A small generated dataset in the exact Pascal VOC layout.

``VOCdevkit/VOC2007`` (trainval + test) and ``VOCdevkit/VOC2012`` (trainval), with JPEG images,
VOC XML annotations and ``ImageSets/Main`` split files, so every code path that reads real VOC
reads this too. Objects are simple filled shapes on textured backgrounds; image sizes and aspect
ratios vary so the aspect-ratio bucketing of the sampler has something to sort.
"""

import argparse
import os
import random
from xml.etree import ElementTree as ET

from PIL import Image, ImageDraw, ImageFilter

SHAPES = ("circle", "square", "triangle")
_SIZES = ((160, 120), (120, 160), (176, 128), (144, 144), (200, 120))


def _background(rng, width, height):
    base = tuple(rng.randint(60, 200) for _ in range(3))
    img = Image.new("RGB", (width, height), base)
    draw = ImageDraw.Draw(img)
    for _ in range(12):  # soft clutter so the background is not trivially flat
        x, y = rng.randint(0, width), rng.randint(0, height)
        r = rng.randint(4, 20)
        tint = tuple(max(0, min(255, c + rng.randint(-40, 40))) for c in base)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tint)
    return img.filter(ImageFilter.GaussianBlur(2))


def _draw(draw, shape, box, colour):
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon([((x0 + x1) / 2.0, y0), (x1, y1), (x0, y1)], fill=colour)


def _overlaps(box, boxes):
    return any(not (box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1]) for b in boxes)


def make_image(rng, classes):
    """One image and its objects as (name, xmin, ymin, xmax, ymax), pixel-inclusive, 0-based."""
    width, height = rng.choice(_SIZES)
    img = _background(rng, width, height)
    draw = ImageDraw.Draw(img)
    objects, boxes = [], []
    for _ in range(rng.randint(1, 3)):
        side = rng.randint(max(24, min(width, height) // 5), min(width, height) // 2)
        for _attempt in range(10):
            x0 = rng.randint(0, width - side - 1)
            y0 = rng.randint(0, height - side - 1)
            box = (x0, y0, x0 + side, y0 + side)
            if not _overlaps(box, boxes):
                break
        else:
            continue
        name = rng.choice(classes)
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        _draw(draw, SHAPES[classes.index(name) % len(SHAPES)], box, colour)
        boxes.append(box)
        objects.append((name,) + box)
    return img, objects


def annotation_xml(image_id, folder, width, height, objects):
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = folder
    ET.SubElement(root, "filename").text = image_id + ".jpg"
    size = ET.SubElement(root, "size")
    for tag, value in (("width", width), ("height", height), ("depth", 3)):
        ET.SubElement(size, tag).text = str(value)
    ET.SubElement(root, "segmented").text = "0"
    for name, x0, y0, x1, y1 in objects:
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = name
        ET.SubElement(obj, "pose").text = "Unspecified"
        ET.SubElement(obj, "truncated").text = "0"
        ET.SubElement(obj, "difficult").text = "0"
        bnd = ET.SubElement(obj, "bndbox")
        # VOC coordinates are 1-based.
        for tag, value in (("xmin", x0 + 1), ("ymin", y0 + 1), ("xmax", x1 + 1), ("ymax", y1 + 1)):
            ET.SubElement(bnd, tag).text = str(value)
    return ET.tostring(root, encoding="unicode")


def write_year(devkit, year, splits, classes, rng, id_format):
    """Write VOC<year> with the given {split_name: count}; returns {split_name: [ids]}."""
    base = os.path.join(devkit, "VOC%d" % year)
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    written, counter = {}, 0
    for split, count in splits.items():
        ids = []
        for _ in range(count):
            counter += 1
            image_id = id_format % counter
            img, objects = make_image(rng, list(classes))
            img.save(os.path.join(base, "JPEGImages", image_id + ".jpg"), quality=90)
            xml = annotation_xml(image_id, "VOC%d" % year, img.width, img.height, objects)
            with open(os.path.join(base, "Annotations", image_id + ".xml"), "w") as handle:
                handle.write(xml)
            ids.append(image_id)
        written[split] = ids
    main = os.path.join(base, "ImageSets", "Main")
    if "trainval" in written:  # real VOC also ships train/val halves of trainval
        ids = written["trainval"]
        half = len(ids) // 2
        written.setdefault("train", ids[:half])
        written.setdefault("val", ids[half:])
    for split, ids in written.items():
        with open(os.path.join(main, split + ".txt"), "w") as handle:
            handle.write("".join(i + "\n" for i in ids))
    return written


def generate(root, train_2007=48, test_2007=24, train_2012=24, classes=SHAPES, seed=0):
    """Create ``root/VOCdevkit/{VOC2007,VOC2012}`` and return the VOCdevkit path."""
    rng = random.Random(seed)
    devkit = os.path.join(root, "VOCdevkit")
    write_year(devkit, 2007, {"trainval": train_2007, "test": test_2007}, classes, rng, "%06d")
    if train_2012:
        write_year(devkit, 2012, {"trainval": train_2012}, classes, rng, "2008_%06d")
    return devkit


def cli(argv=None):
    parser = argparse.ArgumentParser(description="Generate a small VOC-format dataset of shapes.")
    parser.add_argument("root", help="directory that receives VOCdevkit/")
    parser.add_argument("--train-2007", type=int, default=48)
    parser.add_argument("--test-2007", type=int, default=24)
    parser.add_argument("--train-2012", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(generate(args.root, args.train_2007, args.test_2007, args.train_2012, seed=args.seed))
