"""Class and file names with spaces and letters that are not ASCII, under a folder whose path has
both, in each kind of layout (Pascal VOC XML, a COCO export, the built-in algorithm's JSON; YOLO's
is a whole job in tests/end_to_end/test_names_and_large_photos.py): recognised, checked by the
data check with the names as written, and read into the datasets the families train on."""

import os

import pytest

import builtin_exports as bx
import exports
from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.job.check_data import check
from detector_training.job.config import from_hyperparameters

NAMES = {"circle": "café", "square": "熊猫"}
OTHER = "traffic light"


def labelimg(channels):
    """labelImg's XML beside each photo, photos named with spaces and accents."""
    folder = os.path.join(channels, "train", "mes photos")
    for number, photo in enumerate(exports.photos(4, seed=2)):
        photo.name = "été %d 熊猫.jpg" % number
        photo.objects = [(OTHER if i % 3 == 2 else NAMES[o[0]],) + tuple(o[1:])
                         for i, o in enumerate(photo.objects)]
        exports.save(photo, folder)
        exports._write(os.path.join(folder, photo.stem + ".xml"), exports.labelimg_xml(photo, folder))
    return "custom"


def _items():
    return [("photo %d – été 熊猫" % i, size, boxes)
            for i, (_name, size, boxes) in enumerate(bx.sample_objects(4))]


def cvat_coco(channels):
    bx.cvat_coco(os.path.join(channels, "train"), {"default": _items()},
                 class_names=("café", OTHER))
    return "coco"


def builtin_json(channels):
    bx.builtin_json_split(channels, "train", _items(), {0: "熊猫", 1: OTHER}, folder="mes images")
    bx.builtin_json_split(channels, "validation", _items()[:2], {0: "熊猫", 1: OTHER},
                          folder="mes images")
    return "builtin"


@pytest.mark.parametrize("layout", [labelimg, cvat_coco, builtin_json], ids=lambda f: f.__name__)
def test_names_with_spaces_and_other_letters_are_read_as_written(tmp_path, layout):
    channels = str(tmp_path / "données du job" / "input data")
    os.makedirs(channels)
    dataset = layout(channels)
    assert formats.recognise(channels)[0] == dataset
    report = check(channels)
    assert report.ok, report.problems
    names = set(report.classes)
    assert OTHER in names and names - {OTHER} and names <= {"café", "熊猫", OTHER}
    assert sum(report.splits[0].objects.values()) > 0 and not report.splits[0].drops
    assert all(name in report.markdown() for name in names)
    data = build_datasets(from_hyperparameters({"dataset": dataset}), channels)
    assert set(data.classes) == names
    image, label = data.train[0]  # a file whose name has spaces and accents, decoded
    assert image.shape[2] == 3 and len(label)
