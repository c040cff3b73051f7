"""YOLO text labels as Ultralytics and Roboflow export them.

A dataset YAML (``data.yaml``; any ``*.yaml``/``*.yml`` holding ``names`` or ``nc``) names the
classes (``names`` as a list or an ``{id: name}`` mapping, or only ``nc``: ``class_<i>``) and the
splits: ``train``, ``val``, ``test``, each a folder of images, a text file listing images, or a
list of those, relative to ``path``. ``path`` is where the dataset lay on the exporter's machine:
used when it resolves inside the folder, else the YAML's own folder is the root (a path such as
Roboflow's ``../train/images`` is also tried without its ``../``, as Ultralytics does). Each
image's labels are the ``.txt`` at its path with the last ``images`` folder replaced by
``labels``: one ``class cx cy w h`` line per object, fractions of the image (a polygon line
``class x1 y1 x2 y2 ...`` gives its enclosing box); no label file, or an empty one, is an image
without objects. The YAML is read by PyYAML's safe loader with no aliases, under a size limit.
"""

import logging
import math
import os
import re
from dataclasses import dataclass

import yaml

from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet, clean
from detector_training.data.readers.images import IMAGE_SUFFIXES, Frame, read_header
from detector_training.errors import DataError
from detector_training.safe_yaml import SafeLoader

LOG = logging.getLogger("detector_training")

MAX_YAML_BYTES = 1 << 20
MAX_LABEL_BYTES = 16 << 20
MAX_DEPTH = 16
YAML_SUFFIXES = (".yaml", ".yml")
SPLIT_KEYS = {"train": "train", "val": "validation", "test": "test"}
READ_KEYS = ("train", "val")  # the splits training reads; an absent test: is only noted
_WINDOWS_ABSOLUTE = re.compile(r"^[A-Za-z]:[\\/]")
# What Ultralytics also reads as images, counted when left out here.
OTHER_IMAGES = (".tif", ".tiff", ".webp", ".dng", ".mpo", ".pfm", ".heic")
OTHER_TYPE = "image of a type not read here (jpg, jpeg, png, bmp are)"
ULTRALYTICS = "Ultralytics YOLO"
ROBOFLOW = "Roboflow YOLOv8"
FIX = "write one 'class cx cy w h' line per object, the numbers as fractions of the image size."


class _Loader(SafeLoader):
    max_depth = MAX_DEPTH


def _read_bytes(path, limit, what):
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise DataError("%s %s is larger than %d MiB." % (what, path, limit >> 20),
                        "keep it under that size.")
    return data


def load_yaml(path):
    """The mapping in a dataset YAML, or a DataError naming the file and line."""
    data = _read_bytes(path, MAX_YAML_BYTES, "dataset YAML")
    try:
        loaded = yaml.load(data, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise DataError("dataset YAML %s line %d: %s." % (path, mark.line + 1 if mark else 0,
                                                          exc.problem or exc.context),
                        "write it as Ultralytics does: path, train, val and names.") from exc
    except yaml.YAMLError as exc:
        raise DataError("dataset YAML %s cannot be read (%s)." % (path, exc),
                        "write it as UTF-8 YAML.") from exc
    if not isinstance(loaded, dict):
        raise DataError("dataset YAML %s holds no mapping." % path,
                        "write it as Ultralytics does: path, train, val and names.")
    return loaded


def class_names(data, path):
    """The class names of a dataset YAML's ``names`` (list or {id: name}) or ``nc``."""
    names = data.get("names")
    fix = "give names as a list, or as a mapping of 0, 1, ... to names."
    if isinstance(names, list):
        found = tuple(str(n) for n in names)
    elif isinstance(names, dict):
        try:
            ids = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError) as exc:
            raise DataError("dataset YAML %s: the keys of 'names' are not class ids 0, 1, ...: %s."
                            % (path, ", ".join(map(str, list(names)[:5]))), fix) from exc
        if sorted(ids) != list(range(len(ids))):
            raise DataError("dataset YAML %s: the ids of 'names' are %s, not 0 to %d."
                            % (path, ", ".join(map(str, sorted(ids)[:10])), len(ids) - 1), fix)
        found = tuple(ids[i] for i in range(len(ids)))
    elif names is None and isinstance(data.get("nc"), int) and data["nc"] > 0:
        found = tuple("class_%d" % i for i in range(data["nc"]))
    else:
        raise DataError("dataset YAML %s has no class names ('names' or 'nc')." % path, fix)
    if isinstance(data.get("nc"), int) and data["nc"] != len(found):
        raise DataError("dataset YAML %s: nc is %d but 'names' has %d names."
                        % (path, data["nc"], len(found)), "make them agree, or leave nc out.")
    if not found:
        raise DataError("dataset YAML %s names no class." % path, fix)
    return found


def label_path(image_path):
    """Ultralytics' rule: the last 'images' folder becomes 'labels', the extension '.txt'."""
    images, labels = os.sep + "images" + os.sep, os.sep + "labels" + os.sep
    head, sep, tail = image_path.rpartition(images)
    moved = head + labels + tail if sep else image_path
    return os.path.splitext(moved)[0] + ".txt"


def parse_labels(data, path, size, names):
    """Boxes in pixels from the bytes of one label file (``size``: the image's width, height)."""
    width, height = size
    boxes = []
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError("label file %s line %d is not UTF-8 text."
                        % (path, data[:exc.start].count(b"\n") + 1), FIX) from exc
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        where = "%s line %d" % (path, number)
        try:
            values = [float(w) for w in words]
        except ValueError:
            values = [math.nan]
        if not all(math.isfinite(v) for v in values) or not (
                len(values) == 5 or (len(values) >= 7 and len(values) % 2 == 1)):
            raise DataError("%s is '%s', not 'class cx cy w h' (or 'class x1 y1 x2 y2 ...')."
                            % (where, line.strip()[:60]), FIX)
        cls = values[0]
        if cls != int(cls) or not 0 <= cls < len(names):
            raise DataError("%s: class %s is not one of the %d classes of the dataset YAML (0 to %d)."
                            % (where, words[0], len(names), len(names) - 1),
                            "fix the class id, or add the class to 'names'.")
        if len(values) == 5:
            cx, cy, w, h = values[1:]
            corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        else:
            xs, ys = values[1::2], values[2::2]
            corners = (min(xs), min(ys), max(xs), max(ys))
        boxes.append(Box(corners[0] * width, corners[1] * height, corners[2] * width,
                         corners[3] * height, names[int(cls)], where=where))
    return boxes


@dataclass
class YoloExport:
    """A YOLO dataset found in a folder: its YAML, root, class names and splits ({'train':
    [image folders or list files], 'validation': [...], ...})."""

    yaml_path: str
    root: str
    classes: tuple
    splits: dict
    layout: str = ULTRALYTICS

    def roles(self):
        return {name: [name] for name in self.splits}

    def image_paths(self, split, drops):
        """The images of a split, in order; files of other image types counted in ``drops``."""
        paths = []
        for source in self.splits[split]:
            if os.path.isdir(source):
                for folder, dirs, names in os.walk(source):
                    dirs.sort()
                    for name in sorted(names):
                        suffix = os.path.splitext(name)[1].lower()
                        if suffix in IMAGE_SUFFIXES:
                            paths.append(os.path.join(folder, name))
                        elif suffix in OTHER_IMAGES:
                            drops.add(OTHER_TYPE, os.path.join(folder, name))
            else:
                paths += self._listed(source)
        return paths

    def _listed(self, list_file):
        """The images a split's text file lists, relative to its folder (Ultralytics); an
        absolute line of the machine that wrote it found by its trailing parts in the dataset."""
        text = _read_bytes(list_file, MAX_LABEL_BYTES, "image list").decode("utf-8", "replace")
        base = os.path.dirname(list_file)
        paths = []
        for line in (line.strip() for line in text.splitlines()):
            if not line:
                continue
            absolute = os.path.isabs(line) or _WINDOWS_ABSOLUTE.match(line)
            tries = _candidates(line, self.root if absolute else base)
            paths.append(next((t for t in tries if os.path.isfile(t) and _inside(t, self.root)),
                              tries[0]))
        return paths

    def read(self, split, frame=Frame.ORIENTED):
        """One split as a cleaned LabelledSet, its boxes
        (fractions of the image) in pixels of the ``frame``."""
        if split not in self.splits:
            raise DataError("the YOLO dataset %s has no '%s' split; it has %s."
                            % (self.yaml_path, split, ", ".join(sorted(self.splits))),
                            "add it to the dataset YAML.")
        drops, images = Drops(), []
        for path in self.image_paths(split, drops):
            if not os.path.isfile(path):
                drops.add("listed image not in the data", path)
                continue
            header = read_header(path)
            oriented = bool(frame.oriented(header))
            size = header.size(oriented)
            labels = label_path(path)
            boxes = []
            if os.path.isfile(labels):
                boxes = parse_labels(_read_bytes(labels, MAX_LABEL_BYTES, "label file"), labels,
                                     size, self.classes)
            images.append(LabelledImage(path, boxes, size, labels, header.orientation, oriented))
        where = ", ".join(os.path.relpath(source, os.path.dirname(self.yaml_path))
                          for source in self.splits[split])
        return clean(LabelledSet(images, self.classes, drops, "%s, %s" % (self.layout, where)))


def _candidates(entry, base):
    """Where a path the dataset names may be inside it, in the order tried: relative to
    ``base``; Roboflow's web export's ``../train/images`` also without its ``../`` (as Ultralytics
    retries it); an absolute path of the machine that wrote it (Roboflow's ``Version.download()``
    rewrites ``train:``/``val:`` so, and Ultralytics list files may hold such lines) by its
    trailing parts under ``base``, the longest first. Never a path outside ``base``."""
    if os.path.isabs(entry) or _WINDOWS_ABSOLUTE.match(entry):
        parts = [p for p in re.split(r"[\\/]+", entry) if p and p not in (".", "..")]
        if parts and _WINDOWS_ABSOLUTE.match(entry):
            parts = parts[1:]  # the drive
        return [os.path.normpath(os.path.join(base, *parts[i:])) for i in range(len(parts))]
    tries = [os.path.normpath(os.path.join(base, entry))]
    if entry.startswith("../"):
        tries.append(os.path.normpath(os.path.join(base, entry[3:])))
    return tries


def _sources(value, root, yaml_path, key):
    """The existing folders/files a split entry names (a string or a list of them)."""
    entries = value if isinstance(value, list) else [value]
    found = []
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise DataError("dataset YAML %s: '%s' is %r, not a path." % (yaml_path, key, entry),
                            "give the split's image folder relative to the YAML.")
        tries = _candidates(entry, root)
        hit = next((t for t in tries if os.path.exists(t) and _inside(t, root)), None)
        if hit is None:
            raise DataError("dataset YAML %s: '%s: %s' is not in the data (looked for %s)."
                            % (yaml_path, key, entry, " and ".join(tries[:4])),
                            "upload the split's images with the YAML, or correct the path.")
        found.append(hit)
    return found


def _inside(path, root):
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)


def _yaml_files(directory):
    found = []
    for base in [directory] + sorted(os.path.join(directory, d) for d in os.listdir(directory)
                                     if os.path.isdir(os.path.join(directory, d))):
        names = sorted(n for n in os.listdir(base) if n.lower().endswith(YAML_SUFFIXES))
        names.sort(key=lambda n: n.lower() not in ("data.yaml", "data.yml"))
        found += [os.path.join(base, n) for n in names]
        if found:
            break
    return found


def find_export(directory):
    """The YOLO dataset in ``directory`` (its YAML at the top or one folder down), or None."""
    if not os.path.isdir(directory):
        return None
    for yaml_path in _yaml_files(directory):
        data = load_yaml(yaml_path)
        if "names" not in data and "nc" not in data:
            continue
        names = class_names(data, yaml_path)
        home = os.path.dirname(yaml_path)
        root = home
        stated = data.get("path")
        if isinstance(stated, str) and stated.strip():
            candidate = os.path.normpath(os.path.join(home, stated))
            if not os.path.isabs(stated) and os.path.isdir(candidate) and _inside(candidate, directory):
                root = candidate
        splits = {}
        for key, name in SPLIT_KEYS.items():
            if not data.get(key):
                continue
            try:
                splits[name] = _sources(data[key], root, yaml_path, key)
            except DataError as exc:
                if key in READ_KEYS:
                    raise
                # Training never reads it (Ultralytics checks only train and val): say so, go on.
                LOG.info("data: %s (not read by training: left out)", exc.cause.rstrip("."))
        if not splits:
            raise DataError("dataset YAML %s names no split (train, val, test)." % yaml_path,
                            "add 'train: <folder of training images>'.")
        return YoloExport(yaml_path, root, names, splits,
                          ROBOFLOW if "roboflow" in data else ULTRALYTICS)
    return None
