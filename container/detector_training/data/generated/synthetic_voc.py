"""A small generated dataset in the exact Pascal VOC layout.

``VOCdevkit/VOC2007`` (trainval + test) and ``VOCdevkit/VOC2012`` (trainval), with JPEG images,
VOC XML annotations and ``ImageSets/Main`` split files, so every code path that reads real VOC
reads this too. Objects are simple filled shapes on textured backgrounds; image sizes and aspect
ratios vary so the aspect-ratio bucketing of the sampler has something to sort. A *style* says
which shapes, colours and object sizes: ``shapes`` (the demo's, the default) and ``other``
(different shapes, palette and sizes, for measuring how a detector learns beyond the demo).
"""

import argparse
import hashlib
import io
import os
import random
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from xml.etree import ElementTree as ET

from PIL import Image, ImageDraw, ImageFilter

from detector_training.data.acquire.voc_tree import VOC_TAR_MB

SHAPES = ("circle", "square", "triangle")
_SIZES = ((160, 120), (120, 160), (176, 128), (144, 144), (200, 120))


@dataclass(frozen=True)
class Style:
    """How the objects of a generated dataset look. Class i is drawn as ``shapes[i % len]``."""

    shapes: tuple
    side_divisors: tuple  # an object's longer side lies in [short // a, short // b] pixels
    min_side: int
    max_objects: int
    palette: tuple = ()  # object colours to pick from; empty: any RGB colour
    aspect: tuple = ()  # (lo, hi) width / height of an object's box; empty: square boxes
    colour_by_class: bool = False  # class i is drawn in palette[i % len] (else a random pick)


# Sky-, earth- and signal-like colours, unlike the demo's uniformly random ones.
_OTHER_PALETTE = ((20, 20, 20), (245, 245, 245), (200, 30, 30), (30, 90, 200), (240, 200, 20),
                  (40, 150, 60))
STYLES = {
    "shapes": Style(SHAPES, (5, 2), 24, 3),
    "other": Style(("ellipse", "cross", "diamond"), (8, 3), 14, 4, _OTHER_PALETTE, (0.6, 1.6)),
    # Each class its own shape and colour: a class a short recipe learns soon, so a detector
    # that mixes classes up scores low (the learning floors' data).
    "colours": Style(SHAPES, (5, 2), 24, 3, ((220, 40, 40), (40, 170, 60), (40, 70, 220)),
                     colour_by_class=True),
}


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
    if shape in ("circle", "ellipse"):
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "cross":  # a plus sign whose bars are a third of the box wide
        dx, dy = (x1 - x0) / 3.0, (y1 - y0) / 3.0
        draw.rectangle((x0, y0 + dy, x1, y1 - dy), fill=colour)
        draw.rectangle((x0 + dx, y0, x1 - dx, y1), fill=colour)
    elif shape == "diamond":
        xm, ym = (x0 + x1) / 2.0, (y0 + y1) / 2.0
        draw.polygon([(xm, y0), (x1, ym), (xm, y1), (x0, ym)], fill=colour)
    else:
        draw.polygon([((x0 + x1) / 2.0, y0), (x1, y1), (x0, y1)], fill=colour)


def shape_polygon(shape, box, points=32):
    """The outline _draw fills for ``box`` (pixel-inclusive corners), as [(x, y)] in COCO's
    continuous coordinates (pixel i spans [i, i + 1)); circles and ellipses as a ``points``-gon."""
    import math

    x0, y0, x1, y1 = box
    left, top, right, bottom = x0, y0, x1 + 1, y1 + 1
    xm, ym = (left + right) / 2.0, (top + bottom) / 2.0
    if shape in ("circle", "ellipse"):
        rx, ry = (right - left) / 2.0, (bottom - top) / 2.0
        return [(xm + rx * math.cos(2 * math.pi * k / points), ym + ry * math.sin(2 * math.pi * k / points))
                for k in range(points)]
    if shape == "square":
        return [(left, top), (right, top), (right, bottom), (left, bottom)]
    if shape == "cross":  # the plus sign of two bars a third of the box wide
        dx, dy = (right - left) / 3.0, (bottom - top) / 3.0
        return [(left + dx, top), (right - dx, top), (right - dx, top + dy), (right, top + dy),
                (right, bottom - dy), (right - dx, bottom - dy), (right - dx, bottom),
                (left + dx, bottom), (left + dx, bottom - dy), (left, bottom - dy),
                (left, top + dy), (left + dx, top + dy)]
    if shape == "diamond":
        return [(xm, top), (right, ym), (xm, bottom), (left, ym)]
    return [(xm, top), (right, bottom), (left, bottom)]


def _overlaps(box, boxes):
    return any(not (box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1]) for b in boxes)


def shape_of(name, classes, style="shapes"):
    """The shape a class is drawn as in a style."""
    shapes = STYLES[style].shapes
    return shapes[list(classes).index(name) % len(shapes)]


def make_image(rng, classes, style="shapes"):
    """One image and its objects as (name, xmin, ymin, xmax, ymax), pixel-inclusive, 0-based."""
    look = STYLES[style]
    width, height = rng.choice(_SIZES)
    img = _background(rng, width, height)
    draw = ImageDraw.Draw(img)
    objects, boxes = [], []
    short = min(width, height)
    for _ in range(rng.randint(1, look.max_objects)):
        side = rng.randint(max(look.min_side, short // look.side_divisors[0]), short // look.side_divisors[1])
        box_w = box_h = side
        if look.aspect:  # the longer side is `side`
            ratio = rng.uniform(*look.aspect)
            box_w, box_h = (side, max(8, int(side / ratio))) if ratio >= 1 else (max(8, int(side * ratio)), side)
        for _attempt in range(10):
            x0 = rng.randint(0, width - box_w - 1)
            y0 = rng.randint(0, height - box_h - 1)
            box = (x0, y0, x0 + box_w, y0 + box_h)
            if not _overlaps(box, boxes):
                break
        else:
            continue
        name = rng.choice(classes)
        if look.colour_by_class:
            colour = look.palette[list(classes).index(name) % len(look.palette)]
        elif look.palette:
            colour = rng.choice(look.palette)
        else:
            colour = tuple(rng.randint(0, 255) for _ in range(3))
        _draw(draw, shape_of(name, classes, style), box, colour)
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


def write_year(devkit, year, splits, classes, rng, id_format, style="shapes"):
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
            img, objects = make_image(rng, list(classes), style)
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


def generate(root, train_2007=48, test_2007=24, train_2012=24, classes=None, seed=0, style="shapes"):
    """Create ``root/VOCdevkit/{VOC2007,VOC2012}`` and return the VOCdevkit path. ``classes``
    defaults to the style's shape names."""
    classes = tuple(classes or STYLES[style].shapes)
    rng = random.Random(seed)
    devkit = os.path.join(root, "VOCdevkit")
    write_year(devkit, 2007, {"trainval": train_2007, "test": test_2007}, classes, rng, "%06d", style)
    if train_2012:
        write_year(devkit, 2012, {"trainval": train_2012}, classes, rng, "2008_%06d", style)
    return devkit


_TAR_MTIME = 1194307200  # 2007-11-06


def _tar_info(name, size=0, is_dir=False):
    info = tarfile.TarInfo(name)
    info.mtime = _TAR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if is_dir:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o644
    return info


def file_sha1(path):
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_voc_tars(directory, train_2007=48, test_2007=24, train_2012=24, seed=0, pad_bytes=0,
                  pad_file_bytes=110_000, classes=None):
    """Write the three VOC tars (for tests, benchmarks and demo jobs), built from :func:`detector_training.data.generated.synthetic_voc.generate`, into
    ``directory`` and return {tar name: sha1}.

    Members are ``VOCdevkit/VOC2007/...`` and ``VOCdevkit/VOC2012/...`` as in the real tars (2007
    trainval: its images, annotations and trainval/train/val lists; 2007 test: the test images and
    test.txt; 2012: all of VOC2012). ``pad_bytes`` adds random-content ``pad_*.jpg`` files (listed in
    no split) shared out like the real tar sizes, for transfer benchmarks. Deterministic per seed.
    """
    os.makedirs(directory, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".gen-", dir=directory)
    try:
        devkit = generate(work, train_2007, test_2007, train_2012, classes=tuple(classes or SHAPES), seed=seed)

        def ids(year, split):
            path = os.path.join(devkit, "VOC%d" % year, "ImageSets", "Main", split + ".txt")
            with open(path) as handle:
                return [line.strip() for line in handle if line.strip()]

        plan = [("VOCtrainval_06-Nov-2007.tar", 2007, ids(2007, "trainval"), ("trainval", "train", "val")),
                ("VOCtest_06-Nov-2007.tar", 2007, ids(2007, "test"), ("test",))]
        if train_2012:
            plan.append(("VOCtrainval_11-May-2012.tar", 2012, ids(2012, "trainval"), ("trainval", "train", "val")))
        rng = random.Random(seed + 7919)
        pool = rng.randbytes(8 << 20) if pad_bytes else b""
        weights = sum(VOC_TAR_MB[p[0]] for p in plan)
        checksums = {}
        for name, year, image_ids, splits in plan:
            base = "VOCdevkit/VOC%d" % year
            target = os.path.join(directory, name)
            tmp = target + ".tmp"
            with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as archive:
                for folder in ("VOCdevkit", base, base + "/Annotations", base + "/ImageSets",
                               base + "/ImageSets/Main", base + "/JPEGImages"):
                    archive.addfile(_tar_info(folder, is_dir=True))
                src = os.path.join(devkit, "VOC%d" % year)
                for image_id in image_ids:
                    for sub, ext in (("Annotations", ".xml"), ("JPEGImages", ".jpg")):
                        path = os.path.join(src, sub, image_id + ext)
                        with open(path, "rb") as handle:
                            archive.addfile(_tar_info("%s/%s/%s%s" % (base, sub, image_id, ext),
                                                      os.path.getsize(path)), handle)
                for split in splits:
                    path = os.path.join(src, "ImageSets", "Main", split + ".txt")
                    with open(path, "rb") as handle:
                        archive.addfile(_tar_info("%s/ImageSets/Main/%s.txt" % (base, split),
                                                  os.path.getsize(path)), handle)
                share = pad_bytes * VOC_TAR_MB[name] // weights if pad_bytes else 0
                index = 0
                while share > 0:
                    size = min(share, max(1, int(pad_file_bytes * (0.5 + rng.random()))))
                    start = rng.randrange(0, len(pool) - size) if size < len(pool) else 0
                    data = pool[start:start + size] if size <= len(pool) else rng.randbytes(size)
                    tag = name.split("_")[0][3:].lower()  # trainval / test: unique across the tars
                    archive.addfile(_tar_info("%s/JPEGImages/pad_%d_%s_%07d.jpg" % (base, year, tag, index),
                                              len(data)), io.BytesIO(data))
                    share -= len(data)
                    index += 1
            os.replace(tmp, target)
            checksums[name] = file_sha1(target)
        return checksums
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cli(argv=None):
    parser = argparse.ArgumentParser(description="Generate a small VOC-format dataset of shapes.")
    parser.add_argument("root", help="directory that receives VOCdevkit/")
    parser.add_argument("--train-2007", type=int, default=48)
    parser.add_argument("--test-2007", type=int, default=24)
    parser.add_argument("--train-2012", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--style", choices=sorted(STYLES), default="shapes",
                        help="shapes (the demo's circles, squares, triangles) or other (ellipses, "
                             "crosses, diamonds; own palette, smaller objects)")
    args = parser.parse_args(argv)
    print(generate(args.root, args.train_2007, args.test_2007, args.train_2012, seed=args.seed,
                   style=args.style))
