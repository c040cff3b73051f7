"""Image files for annotations: found by name or stem in one walk of a folder, sized from their
headers (Pillow's lazy open reads the header only; decoding happens when a sample is loaded), and
decoded by :func:`decode`, the one decoder of the training readers, the evaluation, ``serve`` and
``detector-predict``.

A photo may be stored sideways with an EXIF orientation tag (1-8) saying how to turn it upright;
browsers and most labelling tools show it upright and the labeller's boxes are in that frame.
Which frame a format's labels are in is the format's :class:`Frame`; Pillow reads the tag (from
the header) and turns the picture (``ImageOps.exif_transpose``)."""

import enum
import os
from dataclasses import dataclass

from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from detector_training.errors import DataError, one_line

# The extensions an annotation's image is looked up with (any case), in the order tried.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
# The formats decode() reads (Pillow's names).
IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "TIFF", "WEBP")
# Pillow's guard against decompression bombs: a header may state any size.
MAX_PIXELS = 200_000_000
ORIENTATION = 0x0112  # the EXIF tag; 1 (or none) is upright as stored
TURNED = (5, 6, 7, 8)  # the tags whose upright picture swaps width and height


class Frame(enum.Enum):
    """The picture a labelling tool showed, so the one its boxes and sizes are in."""

    STORED = "the stored pixel grid (an EXIF orientation tag not applied)"
    ORIENTED = "upright: turned by the EXIF orientation tag, as the labelling tool showed it"
    BY_SIZE = "per image, the frame its annotation's <size> matches"

    def oriented(self, header=None, stated=None):
        """Whether an image of ``header`` is read turned by its tag, for labels stating the
        (width, height) ``stated``: None when this frame leaves it undecided (BY_SIZE without a
        header, with a tag that keeps width and height, or with a size matching neither frame)."""
        if self is Frame.STORED:
            return False
        if self is Frame.ORIENTED:
            return True
        if header is None:
            return None
        if not header.tagged:
            return True
        if stated and header.turns:
            stated = tuple(int(round(v)) for v in stated)
            if stated == header.size(True):
                return True
            if stated == header.size(False):
                return False
        return None


@dataclass(frozen=True)
class Header:
    """What an image's header says: its stored (width, height) and its EXIF orientation (1: no
    tag, or one that is not 1-8, which Pillow does not apply either)."""

    width: int
    height: int
    orientation: int = 1

    @property
    def tagged(self):
        return self.orientation != 1

    @property
    def turns(self):
        """Whether the upright picture swaps width and height."""
        return self.orientation in TURNED

    def size(self, oriented):
        """(width, height) of the upright picture (``oriented``), else as stored."""
        return (self.height, self.width) if oriented and self.turns else (self.width, self.height)


def _orientation(image):
    """The EXIF orientation of an opened image, from its header only (Pillow's base reading: a
    PNG's own ``getexif`` decodes the pixels to look for a tag after them)."""
    value = Image.Image.getexif(image).get(ORIENTATION, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def is_image_name(name):
    return os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def read_header(source, where=None):
    """The :class:`Header` of an image (a path, or a binary stream such as a record's image
    bytes; nothing is decoded), or a DataError naming ``where`` (default: the path)."""
    where = source if where is None else where
    try:
        with Image.open(source, formats=IMAGE_FORMATS) as image:  # those decode() reads
            width, height = image.size
            orientation = _orientation(image)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError,
            ValueError) as exc:
        raise DataError("image %s cannot be read (%s)." % (where, one_line(exc)[:200]),
                        "replace the file with an intact JPEG, PNG or BMP, or remove it and its "
                        "annotation.") from exc
    if width <= 0 or height <= 0 or width * height > MAX_PIXELS:
        raise DataError("image %s states a size of %dx%d pixels." % (where, width, height),
                        "use images of at most %d pixels." % MAX_PIXELS)
    return Header(width, height, orientation)


def image_size(source, where=None, oriented=True):
    """(width, height) from an image's header: of the upright picture (``oriented``), else as
    stored (see :func:`read_header`)."""
    return read_header(source, where).size(oriented)


class UnreadableImage(ValueError):
    """Bytes :func:`decode` does not decode; the message says why (each caller names the image
    in its own error)."""


def decode(source, oriented=True, max_pixels=MAX_PIXELS):
    """The image in ``source`` (a path or a binary file object) as an RGB uint8 array of shape
    (height, width, 3), decoded by Pillow, turned upright by its EXIF orientation tag when
    ``oriented`` (one transpose, only for a tagged image). Grey-scale, palette, RGBA, CMYK and
    16-bit images are converted (16-bit values scaled to 8 bits), not refused; more than
    ``max_pixels`` (read from the header, before any pixel is decoded), a format outside
    IMAGE_FORMATS and a truncated file are an UnreadableImage (GluonCV sets Pillow's
    LOAD_TRUNCATED_IMAGES process-wide when ``gluoncv.data`` is imported, which would fill the
    missing part with grey)."""
    import numpy as np

    previous = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with Image.open(source, formats=IMAGE_FORMATS) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise UnreadableImage("image too large: %d x %d pixels is more than the %d allowed"
                                      % (width, height, max_pixels))
            turn = oriented and _orientation(img) != 1
            img.load()
            if turn:
                ImageOps.exif_transpose(img, in_place=True)
            if img.mode in ("I;16", "I;16L", "I;16B", "I"):  # 16-bit grey: scale, do not clip
                grey = np.asarray(img, dtype=np.float64).clip(0, 65535) / 257.0
                return np.repeat(np.rint(grey).astype(np.uint8)[:, :, None], 3, axis=2)
            # An RGB image is not converted: convert() would copy it (a 24-megapixel photo is
            # 96 MB in Pillow, 4 bytes a pixel), besides the array made of it.
            return np.asarray(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)
    except UnreadableImage:
        raise
    except UnidentifiedImageError:
        raise UnreadableImage("not an image: the bytes are none of %s"
                              % ", ".join(IMAGE_FORMATS)) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadableImage("cannot decode the image: %s" % one_line(exc)) from None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = previous


def decode_nd(source, oriented):
    """:func:`decode` as the MXNet NDArray (height, width, 3) of uint8 that GluonCV's dataset
    readers give (what the training and validation readers return)."""
    import mxnet as mx

    return mx.nd.array(decode(source, oriented), dtype="uint8")


def _trail(path, depth=3):
    """The last ``depth`` folder names above a file, innermost first."""
    parts = os.path.normpath(os.path.dirname(path)).split(os.sep)
    return parts[::-1][:depth]


class ImageIndex:
    """Every image file under ``root`` (links not followed), by file name and by stem."""

    def __init__(self, root, skip=()):
        self.root = root
        self._by_name, self._by_stem = {}, {}
        self.paths = []
        skip = {os.path.normpath(s) for s in skip}
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(folder, d)) not in skip)
            for name in sorted(names):
                if is_image_name(name):
                    self.add(os.path.join(folder, name))

    def add(self, path):
        name = os.path.basename(path)
        self.paths.append(path)
        self._by_name.setdefault(name, []).append(path)
        self._by_stem.setdefault(os.path.splitext(name)[0], []).append(path)

    def named(self, name):
        """The image files called ``name``."""
        return list(self._by_name.get(name, ()))

    def stemmed(self, stem):
        """The image files whose name without its extension is ``stem``."""
        return list(self._by_stem.get(stem, ()))

    def find(self, filename, annotation, folder=""):
        """The image an annotation file describes: by its stated ``filename`` (the name only: a
        path from the labeller's machine means nothing here), else by the same stem (of the
        filename, then of the annotation file) with any image extension. Among several, the one
        in the annotation's folder, else the one whose folders match the annotation's (and the
        ``folder`` it names) most closely. None when there is none; a DataError when two match
        equally well."""
        name = os.path.basename(filename.replace("\\", "/")) if filename else ""
        stems = [os.path.splitext(name)[0]] if name else []
        stems.append(os.path.splitext(os.path.basename(annotation))[0])
        candidates = self._by_name.get(name, []) if name else []
        for stem in stems:
            if candidates:
                break
            candidates = self._by_stem.get(stem, [])
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        return self._closest(candidates, annotation, folder)

    @staticmethod
    def _closest(candidates, annotation, folder):
        home = os.path.dirname(os.path.abspath(annotation))
        beside = [c for c in candidates if os.path.dirname(os.path.abspath(c)) == home]
        if len(beside) == 1:
            return beside[0]
        trail = _trail(annotation)

        def score(candidate):
            theirs = _trail(candidate)
            matched = sum(1 for a, b in zip(trail, theirs) if a == b)
            return matched + (0.5 if folder and theirs and theirs[0] == folder else 0)

        scored = sorted(((score(c), c) for c in candidates), reverse=True)
        if scored[0][0] > scored[1][0]:
            return scored[0][1]
        raise DataError("annotation %s matches several images equally: %s."
                        % (annotation, ", ".join(c for s, c in scored if s == scored[0][0])),
                        "keep one image of that name, or keep each annotation beside its image.")
