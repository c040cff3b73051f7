"""Pascal VOC XML in the folder shapes labelling tools export it, recognised and read.

* a VOCdevkit tree: ``VOCdevkit/VOC<year>/{Annotations,JPEGImages,ImageSets/Main}``, splits
  named ``<year>_<name>`` (Pascal VOC itself, and the custom data this project always read);
* CVAT's "Pascal VOC 1.1": ``Annotations/``, ``JPEGImages/``, ``ImageSets/Main/<subset>.txt``
  (``default`` unless the task has subsets; ``<label>_<subset>.txt`` per class beside them) and
  ``labelmap.txt`` (a comment line, ``background``, then ``label:color:parts:actions``), with no
  ``VOCdevkit/VOC<year>`` wrapper; the same folders without ``labelmap.txt`` are read alike;
* Roboflow's "Pascal VOC": ``train/``, ``valid/``, ``test/``, each XML beside its image;
* labelImg's: each XML beside its image (its default), or XMLs in a separate save folder.

The image of an annotation is found from its ``<filename>``, else by the same stem with any
common image extension (``images.ImageIndex``). Split names become roles: ``train``,
``validation`` (``val``, ``valid``), ``test``; ``default`` and a layout without splits are
``train``. Each split is read into a cleaned LabelledSet (``labelled.clean``).
"""

import os
import re
from dataclasses import dataclass, field

from detector_training.data.labelled import LabelledImage, LabelledSet, Drops, clean
from detector_training.data.readers.images import Frame, ImageIndex, is_image_name, read_header
from detector_training.data.readers.voc_xml import read_annotation
from detector_training.data.acquire.voc_tree import find_year_dirs
from detector_training.errors import DataError

VOCDEVKIT = "VOCdevkit tree"
CVAT = "CVAT Pascal VOC 1.1"
VOC_FOLDERS = "Pascal VOC folders (Annotations, JPEGImages, ImageSets/Main)"
ROBOFLOW = "Roboflow Pascal VOC"
LABELIMG_BESIDE = "labelImg, XML beside each image"
LABELIMG_SEPARATE = "labelImg, XML in a separate save folder"

ROLES = {"train": "train", "training": "train", "default": "train", "trainval": "train",
         "val": "validation", "valid": "validation", "validation": "validation",
         "test": "test", "testing": "test"}
ROBOFLOW_SPLITS = ("train", "valid", "test")
LABELMAP = "labelmap.txt"
BACKGROUND = "background"
MAX_LIST_BYTES = 64 << 20  # a split file of a million ids is about 20 MB

NO_IMAGE = "annotation whose image is not in the data"
NO_ANNOTATION = "listed image without an annotation file"
UNLABELLED = "image without an annotation (not used)"
SIZE_DIFFERS = "annotation's <size> differs from the image (the image's used)"
FRAME_UNDECIDED = ("EXIF-tagged image whose <size> tells no frame (read in the frame the "
                   "export's other <size>s tell, else as stored)")

_VOC_ROOT = re.compile(rb"<annotation[\s>]")


def role(split):
    """The role of a split name: train, validation, test, or the name itself (lower case)."""
    return ROLES.get(split.lower(), split.lower())


@dataclass
class VocExport:
    """An export found in a folder: its ``layout``, the folder it ``root``s at, its ``splits``
    ({name: [annotation paths]}, names as the export has them), the folders its images are in,
    the class order it declares (CVAT's labelmap), and its images no annotation refers to."""

    layout: str
    root: str
    splits: dict
    image_roots: tuple
    classes: tuple = ()
    lower_names: bool = False  # a VOCdevkit's names are read in lower case, as GluonCV reads them
    one_based: bool = True  # corners as 1-based pixel indices (VOC's); CVAT writes 0-based edges
    unlisted_ok: bool = False  # a VOCdevkit's JPEGImages holds every split's images
    _index: object = field(default=None, repr=False)
    _annotations: dict = field(default_factory=dict, repr=False)  # each file parsed once
    _upright: bool = field(default=None, repr=False)  # the frame most <size>s tell (when needed)

    def annotation(self, xml_path):
        """The file's Annotation, parsed once by this export (a split's read, and the other
        splits' images counted as referenced, share it)."""
        if xml_path not in self._annotations:
            self._annotations[xml_path] = read_annotation(xml_path, self.one_based)
        return self._annotations[xml_path]

    def roles(self):
        """{role: [split names]}, e.g. {'train': ['train'], 'validation': ['valid']}."""
        found = {}
        for name in self.splits:
            found.setdefault(role(name), []).append(name)
        return found

    def index(self):
        if self._index is None:
            self._index = ImageIndex(self.image_roots[0])
            for extra in self.image_roots[1:]:
                for path in ImageIndex(extra).paths:
                    self._index.add(path)
        return self._index

    def read(self, splits=None, frame=Frame.BY_SIZE):
        """The images of ``splits`` (names; None: every split) as one cleaned LabelledSet. Each
        image's boxes are in
        the ``frame``; BY_SIZE: the one its XML's <size> matches (see :func:`_settle_frames`)."""
        names = list(self.splits) if splits is None else [splits] if isinstance(splits, str) else list(splits)
        for name in names:
            if name not in self.splits:
                year, _, subset = name.partition("_")
                listed = ("VOC%s/ImageSets/Main/%s.txt is missing: " % (year, subset)
                          if self.layout == VOCDEVKIT else "")
                raise DataError("%sthe %s in %s has no split '%s'; it has %s."
                                % (listed, self.layout, self.root, name,
                                   ", ".join(sorted(self.splits)) or "none"),
                                "name one of its splits.")
        index = self.index()
        drops, adjusted, images, used, read = Drops(), Drops(), [], set(), []
        for name in names:
            for xml_path in self.splits[name]:
                found = _read_one(xml_path, index, drops, adjusted, self.lower_names,
                                  parse=self.annotation, frame=frame)
                if found is not None:
                    read.append(found)
                    images.append(found[0])
                    used.add(found[0].path)
        _settle_frames(read, adjusted, lambda: self._upright_by_size(index))
        layout = self.layout
        if self.layout in (LABELIMG_BESIDE, LABELIMG_SEPARATE) and images:
            beside = all(os.path.dirname(i.path) == os.path.dirname(i.where) for i in images)
            layout = LABELIMG_BESIDE if beside else LABELIMG_SEPARATE
        if not self.unlisted_ok and set(names) >= {n for n in self.splits if role(n) == "train"}:
            # Counted with the training split: the images no split's annotation refers to.
            referenced = used | self._referenced([n for n in self.splits if n not in names], index)
            for path in index.paths:
                if path not in referenced:
                    drops.add(UNLABELLED, path)
        return clean(LabelledSet(images, self.classes, drops, layout, adjusted))

    def _upright_by_size(self, index):
        """Whether most of the export's tagged photos (every split's) whose <size> tells the frame
        are labelled upright; read once, only when an image's <size> tells none."""
        if self._upright is None:
            votes = []
            for paths in self.splits.values():
                for xml_path in paths:
                    try:
                        found = _read_one(xml_path, index, Drops(), Drops(), False,
                                          parse=self.annotation)
                    except DataError:
                        continue
                    if found is not None and found[1].turns and found[0].oriented is not None:
                        votes.append(found[0].oriented)
            self._upright = sum(votes) > len(votes) / 2.0
        return self._upright

    def _referenced(self, names, index):
        """The image paths the annotations of the splits ``names`` refer to (a broken one is
        that split's problem, reported when it is read)."""
        referenced = set()
        for name in names:
            for xml_path in self.splits[name]:
                try:
                    found = _read_one(xml_path, index, Drops(), Drops(), False, quiet=True,
                                      parse=self.annotation)
                except DataError:
                    continue
                if found is not None:
                    referenced.add(found[0].path)
        return referenced


def _read_one(xml_path, index, drops, adjusted, lower_names, quiet=False, parse=read_annotation,
              frame=Frame.BY_SIZE):
    """(LabelledImage, its header, the <size> stated) of one annotation, None when it or its
    image is missing (counted); the image's ``oriented`` is None where ``frame`` leaves it
    undecided (settled by :func:`_settle_frames`). ``quiet``: only the image's path."""
    if not os.path.isfile(xml_path):
        drops.add(NO_ANNOTATION, xml_path)
        return None
    annotation = parse(xml_path)
    path = index.find(annotation.filename, xml_path, annotation.folder)
    if path is None:
        drops.add(NO_IMAGE, "%s (%s)" % (xml_path, annotation.filename or "no <filename>"))
        return None
    if quiet:
        return LabelledImage(path), None, None
    header = read_header(path)
    oriented = frame.oriented(header, annotation.size)
    boxes = annotation.objects
    if lower_names:
        for box in boxes:
            box.label = box.label.lower()
    image = LabelledImage(path, boxes, header.size(bool(oriented)), xml_path, header.orientation,
                          oriented)
    if oriented is not None:
        _check_size(image, annotation.size, adjusted)
    return image, header, annotation.size


def _check_size(image, stated, adjusted):
    if stated and tuple(int(round(v)) for v in stated) != image.size:
        adjusted.add(SIZE_DIFFERS, "%s (%dx%d, the image is %dx%d)" % (
            image.where, stated[0], stated[1], image.size[0], image.size[1]))


def _settle_frames(read, adjusted, upright):
    """The frame of each tagged image its <size> left undecided (a tag that keeps width and
    height, 2-4, or a size matching neither frame): ``upright()``, the one most of the export's
    decided images are in (one labelling tool shows every photo the same way), else as stored
    (labelImg shows the stored pixels; the official VOC images carry no tag)."""
    undecided = [(image, header, stated) for image, header, stated in read if image.oriented is None]
    if not undecided:
        return
    oriented = upright()
    for image, header, stated in undecided:
        image.oriented, image.size = oriented, header.size(oriented)
        adjusted.add(FRAME_UNDECIDED, image.where)
        _check_size(image, stated, adjusted)


def _real_dir(path):
    return os.path.isdir(path) and not os.path.islink(path)


def _subdirs(directory):
    return [os.path.join(directory, d) for d in sorted(os.listdir(directory))
            if _real_dir(os.path.join(directory, d)) and not d.startswith(".")]


def _read_list(path):
    with open(path, "rb") as handle:
        data = handle.read(MAX_LIST_BYTES + 1)
    if len(data) > MAX_LIST_BYTES:
        raise DataError("split file %s is larger than %d MiB." % (path, MAX_LIST_BYTES >> 20),
                        "split it into smaller subsets.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DataError("split file %s line %d is not UTF-8 text." % (path, line),
                        "write one image id per line.") from exc
    return text.splitlines()


def subset_files(main):
    """{subset: path} of ImageSets/Main, without the per-class ``<label>_<subset>.txt`` files."""
    stems = {name[:-4]: os.path.join(main, name) for name in os.listdir(main)
             if name.endswith(".txt") and os.path.isfile(os.path.join(main, name))}
    return {stem: path for stem, path in sorted(stems.items())
            if not any(stem.endswith("_" + other) and stem != other for other in stems)}


def _listed(base, list_path):
    """Annotation paths of the ids in a split file (the first word of each line; an id listed
    twice stays twice here: the cleaner keeps its image once and counts it)."""
    return [os.path.join(base, "Annotations", *line.split()[0].split("/")) + ".xml"
            for line in _read_list(list_path) if line.split()]


def read_labelmap(path):
    """The class names of CVAT's labelmap.txt in order, without ``background`` and comments."""
    names = []
    for number, line in enumerate(_read_list(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split(":", 1)[0].strip()
        if not name:
            raise DataError("%s line %d has no label name before ':'." % (path, number),
                            "write each label as name:r,g,b:: (CVAT's labelmap format).")
        if name.lower() != BACKGROUND:
            names.append(name)
    return tuple(names)


def _xml_files(directory, recursive=True):
    found = []
    for folder, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, n) for n in sorted(names)
                  if n.lower().endswith(".xml") and not n.startswith(".")]
        if not recursive:
            break
    return found


def _is_voc_annotation(path):
    with open(path, "rb") as handle:
        return bool(_VOC_ROOT.search(handle.read(4096)))


def _devkit(directory):
    years = find_year_dirs(directory)
    if not years:
        return None
    splits = {}
    for year_name, base in sorted(years.items()):
        main = os.path.join(base, "ImageSets", "Main")
        for subset, list_path in (subset_files(main).items() if _real_dir(main) else ()):
            splits["%s_%s" % (year_name[3:], subset)] = _listed(base, list_path)
    image_roots = tuple(os.path.join(b, "JPEGImages") for _, b in sorted(years.items())
                        if _real_dir(os.path.join(b, "JPEGImages")))
    return VocExport(VOCDEVKIT, os.path.dirname(next(iter(years.values()))), splits,
                     image_roots or tuple(years.values()), lower_names=True, unlisted_ok=True)


def _voc_folders(directory):
    for base in [directory] + _subdirs(directory):
        annotations = os.path.join(base, "Annotations")
        main = os.path.join(base, "ImageSets", "Main")
        labelmap = os.path.join(base, LABELMAP)
        if not _real_dir(annotations) or not (
                _real_dir(main) or os.path.isfile(labelmap) or _real_dir(os.path.join(base, "JPEGImages"))):
            continue
        subsets = subset_files(main) if _real_dir(main) else {}
        if subsets:
            splits = {name: _listed(base, path) for name, path in subsets.items()}
        else:
            splits = {"default": _xml_files(annotations)}
        classes = read_labelmap(labelmap) if os.path.isfile(labelmap) else ()
        images = os.path.join(base, "JPEGImages")
        cvat = os.path.isfile(labelmap)
        return VocExport(CVAT if cvat else VOC_FOLDERS, base, splits,
                         (images if _real_dir(images) else base,), classes,
                         one_based=not cvat)  # datumaro's exporter: xmin = x, xmax = x + w
    return None


def _roboflow(directory):
    for base in [directory] + _subdirs(directory):
        splits = {}
        for sub in _subdirs(base):
            name = os.path.basename(sub)
            if name.lower() in ROBOFLOW_SPLITS:
                xmls = _xml_files(sub, recursive=False)
                if xmls and _is_voc_annotation(xmls[0]):
                    splits[name] = xmls
        if splits:
            return VocExport(ROBOFLOW, base, splits, tuple(
                os.path.join(base, name) for name in splits))
    return None


def _labelimg(directory):
    xmls = _xml_files(directory)
    if not xmls or not _is_voc_annotation(xmls[0]):
        return None  # an XML that is not VOC among VOC ones is named when it is read
    folders = {os.path.dirname(p) for p in xmls}
    beside = all(any(is_image_name(n) for n in os.listdir(f)) for f in folders)
    return VocExport(LABELIMG_BESIDE if beside else LABELIMG_SEPARATE, directory,
                     {"default": xmls}, (directory,))


def find_export(directory):
    """The VOC XML export in ``directory`` (the first of: VOCdevkit tree, CVAT/VOC folders,
    Roboflow, labelImg), or None when it holds no Pascal VOC annotation."""
    if not os.path.isdir(directory):  # the channel itself may be a link (the data check links it)
        return None
    for finder in (_devkit, _voc_folders, _roboflow, _labelimg):
        found = finder(directory)
        if found is not None and any(found.splits.values()):
            return found
    return None
