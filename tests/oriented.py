"""Photos as phones store them: the pixels sideways (or mirrored) and an EXIF orientation tag
(0x0112, 1-8) saying how to turn them upright, for the tests of "orientation as the labeller saw
it". The stored pixels are made here from the EXIF 2.3 definition of each tag (where the stored
0th row and 0th column lie in the upright picture), not with Pillow's ``exif_transpose`` that the
decoder uses, so that a decoded picture equal to the upright one checks that decoder."""

import os

import numpy as np
from PIL import Image

ORIENTATIONS = tuple(range(1, 9))
TAG = 0x0112
# JPEG's loss, as the mean absolute difference per channel value; a picture turned wrong (its
# quadrants of different colours swapped) differs by about a hundred.
JPEG_LOSS = 4.0

STORED = {  # the stored pixels of an upright picture, by tag
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # 0th row at the top, 0th column at the right: mirrored
    3: lambda a: a[::-1, ::-1],  # bottom, right: upside down
    4: lambda a: a[::-1],  # bottom, left
    5: lambda a: a.transpose(1, 0, 2),  # left, top
    6: lambda a: np.rot90(a, 1),  # right, top: a phone held upright (shown turned clockwise)
    7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # right, bottom
    8: lambda a: np.rot90(a, -1),  # left, bottom
}


def upright(size=(64, 48)):
    """An RGB picture (height, width, 3) that no turn or mirror maps onto itself: four flat
    quadrants of different colours."""
    width, height = size
    picture = np.zeros((height, width, 3), dtype=np.uint8)
    picture[:height // 2, :width // 2] = (220, 30, 30)
    picture[:height // 2, width // 2:] = (30, 200, 40)
    picture[height // 2:, :width // 2] = (40, 40, 210)
    picture[height // 2:, width // 2:] = (230, 220, 40)
    return picture


def stored(picture, orientation):
    return np.ascontiguousarray(STORED[orientation](np.asarray(picture)))


def save(path, picture, orientation, fmt=None):
    """``picture`` (upright, an array or a PIL image) written to ``path`` as a phone stores it
    with the tag ``orientation`` (1: written as it is, with the tag 1)."""
    exif = Image.Exif()
    exif[TAG] = orientation
    image = Image.fromarray(stored(np.asarray(Image.fromarray(np.asarray(picture)).convert("RGB")),
                                   orientation))
    fmt = fmt or ("PNG" if str(path).lower().endswith(".png") else "JPEG")
    extra = dict(quality=95, subsampling=0) if fmt == "JPEG" else {}
    image.save(path, fmt, exif=exif.tobytes(), **extra)
    return path


def tag_in_place(root, suffixes=(".jpg", ".jpeg")):
    """Every JPEG under ``root`` rewritten as a phone stores its picture, the tags 1-8 in turn
    (by sorted path); {path: tag}."""
    paths = sorted(os.path.join(folder, name) for folder, _dirs, names in os.walk(root)
                   for name in names if name.lower().endswith(suffixes))
    tags = {}
    for number, path in enumerate(paths):
        with Image.open(path) as image:
            picture = np.asarray(image.convert("RGB"))
        tags[path] = ORIENTATIONS[number % len(ORIENTATIONS)]
        save(path, picture, tags[path], "JPEG")
    return tags


def same_picture(decoded, expected):
    """Whether two RGB arrays are the same picture, but for JPEG's loss."""
    decoded, expected = np.asarray(decoded), np.asarray(expected)
    return decoded.shape == expected.shape and \
        np.abs(decoded.astype(float) - expected.astype(float)).mean() <= JPEG_LOSS
