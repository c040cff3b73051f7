"""Orientation as the labeller saw it: photos stored sideways with an EXIF orientation tag (each
of 1-8), labelled upright as the labelling tools show them, train, validate and are checked as
the upright photos are; VOC XML is read in the frame its <size> matches, and the data report says
which."""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

import builtin_exports
import exports
import ground_truth
import oriented
from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.data.synthetic_coco import generate as generate_coco
from detector_training.job import check_data
from detector_training.job.config import from_hyperparameters

ITEMS = builtin_exports.sample_objects(8, (64, 48))


def _recordio(channels, work):
    builtin_exports.builtin_recordio_split(work, os.path.join(channels, "train"), "train", ITEMS)


def _manifest(channels, _work):
    records = ground_truth.generate(os.path.join(channels, "images"), 8, empty=(), adjusted=())
    ground_truth.write_manifest(os.path.join(channels, "train", "output.manifest"), records)


# dataset, hyperparameters, how the upright export is laid out in a channels folder
EXPORTS = {
    "yolo (Ultralytics)": ("yolo", {}, lambda c, w: exports.ultralytics_yolo(
        os.path.join(c, "train"), train=8, val=3, unlabelled=())),
    "custom (labelImg)": ("custom", {}, lambda c, w: exports.labelimg_beside(
        os.path.join(c, "train"), count=8)),
    "custom (CVAT)": ("custom", {}, lambda c, w: exports.cvat_voc(
        os.path.join(c, "train"), subsets=(("train", 8), ("val", 3)))),
    "coco (Roboflow export)": ("coco", {}, lambda c, w: builtin_exports.roboflow_coco(
        os.path.join(c, "train"), {"train": ITEMS, "valid": ITEMS[:3]})),
    "coco (GluonCV layout)": ("coco", {}, lambda c, w: generate_coco(os.path.join(c, "coco"), 8, 3)),
    "manifest (Ground Truth)": ("manifest", {"val_fraction": "0.25"}, _manifest),
    "builtin (JSON)": ("builtin", {}, lambda c, w: builtin_exports.builtin_json_channels(
        c, n_train=8, n_val=3)),
    "builtin (RecordIO)": ("builtin", {"val_fraction": "0.25"}, _recordio),
}


def _pair(tmp_path, layout, tag_records=False, monkeypatch=None):
    """(upright channels, tagged channels): the same export twice, the second's photos stored
    sideways with the tags 1-8 in turn (RecordIO: the records packed from such photos)."""
    upright, tagged = str(tmp_path / "upright"), str(tmp_path / "tagged")
    layout(upright, str(tmp_path / "work-upright"))
    if tag_records:  # the image files are packed into records as they are written
        original, written = builtin_exports.write_image, []

        def write_tagged(path, size=(64, 48), mode="RGB", seed=0):
            original(path, size, mode, seed)
            written.append(path)
            with Image.open(path) as image:
                picture = np.asarray(image.convert("RGB"))
            return oriented.save(path, picture, oriented.ORIENTATIONS[(len(written) - 1) % 8])

        monkeypatch.setattr(builtin_exports, "write_image", write_tagged)
        layout(tagged, str(tmp_path / "work-tagged"))
    else:
        shutil.copytree(upright, tagged)
        oriented.tag_in_place(tagged)
    return upright, tagged


def _tags(folder):
    found = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            if name.lower().endswith((".jpg", ".jpeg")):
                with Image.open(os.path.join(root, name)) as image:
                    found.append(image.getexif().get(oriented.TAG, 1))
    return found


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_tagged_photos_train_and_validate_as_the_upright_ones(tmp_path, monkeypatch, name):
    dataset, hyperparameters, layout = EXPORTS[name]
    upright, tagged = _pair(tmp_path, layout, name == "builtin (RecordIO)", monkeypatch)
    if name != "builtin (RecordIO)":
        assert set(_tags(tagged)) == set(oriented.ORIENTATIONS)  # every tag is exercised
    config = from_hyperparameters(dict(hyperparameters, dataset=dataset))
    root = "coco" if name == "coco (GluonCV layout)" else ""  # the format's data root: its channel
    want = build_datasets(config, os.path.join(upright, root))
    got = build_datasets(config, os.path.join(tagged, root))
    assert got.classes == want.classes
    assert got.aspect_ratios == pytest.approx(want.aspect_ratios)
    for split in ("train", "val"):
        expected, read = getattr(want, split), getattr(got, split)
        assert len(read) == len(expected) > 0
        for position in range(len(expected)):
            (want_image, want_label), (image, label) = expected[position][:2], read[position][:2]
            assert oriented.same_picture(image.asnumpy(), want_image.asnumpy()), (split, position)
            assert np.array_equal(np.asarray(label), np.asarray(want_label)), (split, position)


@pytest.mark.parametrize("name", sorted(n for n in EXPORTS if "RecordIO" not in n))
def test_the_data_check_sizes_tagged_photos_upright_and_counts_their_tags(tmp_path, monkeypatch,
                                                                          name):
    dataset, hyperparameters, layout = EXPORTS[name]
    upright, tagged = _pair(tmp_path, layout)
    config = from_hyperparameters(dict(hyperparameters, dataset=dataset))
    fmt = formats.get(dataset)
    want, got = fmt.labelled(upright, "train", config), fmt.labelled(tagged, "train", config)
    assert [im.size for im in got.images] == [im.size for im in want.images]
    assert [[(b.xmin, b.ymin, b.xmax, b.ymax) for b in im.boxes] for im in got.images] == \
        [[(b.xmin, b.ymin, b.xmax, b.ymax) for b in im.boxes] for im in want.images]
    report = check_data.check(tagged, dict(hyperparameters, dataset=dataset))
    assert report.ok, report.markdown()
    line = report.splits[0].orientation
    if name == "coco (GluonCV layout)":  # a COCO file's images are not opened: sizes are its own
        assert line.startswith("EXIF orientation: not read")
        return
    tags = [im.orientation for im in got.images]
    assert ("EXIF orientation: %d of %d images carry a tag other than 1; read upright (turned by "
            "the tag): %d, as stored: 0 (%s)." % (sum(t != 1 for t in tags), len(tags),
                                                  sum(t != 1 for t in tags), fmt.frame.value)) == line
    assert line in report.markdown()


def test_the_recordio_data_check_reads_tagged_records_upright(tmp_path, monkeypatch):
    _upright, tagged = _pair(tmp_path, EXPORTS["builtin (RecordIO)"][2], True, monkeypatch)
    report = check_data.check(tagged, {"dataset": "builtin", "val_fraction": "0.25"})
    assert report.splits[0].orientation.startswith(
        "EXIF orientation: 7 of 8 images carry a tag other than 1; read upright (turned by the "
        "tag): 7, as stored: 0")
