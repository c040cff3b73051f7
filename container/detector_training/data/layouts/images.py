"""Image files for annotations: found by name or stem in one walk of a folder, sized from their
headers (Pillow's lazy open reads the header only; decoding happens when a sample is loaded)."""

import os

from PIL import Image, UnidentifiedImageError

from detector_training.errors import DataError, one_line

# The extensions an annotation's image is looked up with (any case), in the order tried.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
# Pillow's guard against decompression bombs: a header may state any size.
MAX_PIXELS = 200_000_000


def is_image_name(name):
    return os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def image_size(source, where=None):
    """(width, height) from an image's header (a path, or a binary stream such as a record's
    image bytes; nothing is decoded), or a DataError naming ``where`` (default: the path)."""
    where = source if where is None else where
    try:
        with Image.open(source) as image:
            width, height = image.size
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError,
            ValueError) as exc:
        raise DataError("image %s cannot be read (%s)." % (where, one_line(exc)[:200]),
                        "replace the file with an intact JPEG, PNG or BMP, or remove it and its "
                        "annotation.") from exc
    if width <= 0 or height <= 0 or width * height > MAX_PIXELS:
        raise DataError("image %s states a size of %dx%d pixels." % (where, width, height),
                        "use images of at most %d pixels." % MAX_PIXELS)
    return width, height


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
