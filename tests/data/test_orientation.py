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
from conftest import real_export
from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_coco import generate as generate_coco
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


# --- VOC XML: the frame each XML's <size> matches --------------------------------------------

def _labelimg(root, tags, upright_labelled):
    """A labelImg export of photos (none square) stored with ``tags``, their XML written for the
    picture the labeller saw: the upright one (``upright_labelled``: as CVAT shows it), else the
    stored pixels (as labelImg shows them). The pictures the labeller saw, by photo."""
    made = [p for p in exports.photos(12, seed=3) if p.image.width != p.image.height][:len(tags)]
    folder = os.path.join(root, "train", "photos")
    os.makedirs(folder)
    for photo, tag, upright in zip(made, tags, upright_labelled):
        path = os.path.join(folder, photo.name)
        if upright:  # the file holds the sideways pixels; the labeller saw them turned
            oriented.save(path, photo.image, tag)
        else:  # the file holds the pixels the labeller saw, tagged all the same
            exif = Image.Exif()
            exif[oriented.TAG] = tag
            photo.image.convert("RGB").save(path, "JPEG", quality=95, subsampling=0,
                                            exif=exif.tobytes())
        with open(os.path.join(folder, photo.stem + ".xml"), "w") as handle:
            handle.write(exports.labelimg_xml(photo, folder))
    return [np.asarray(p.image.convert("RGB")) for p in made], made


def _custom(root):
    config = from_hyperparameters({"dataset": "custom", "val_fraction": "0.5"})
    labelled = formats.get("custom").labelled(root, "train", config)
    datasets = build_datasets(config, root)
    return labelled, [datasets.train[i] for i in range(len(datasets.train))] + \
        [datasets.val[i] for i in range(len(datasets.val))]


@pytest.mark.parametrize("upright_labelled", [(True, True), (False, False), (True, False)])
def test_voc_xml_is_read_in_the_frame_its_size_matches(tmp_path, upright_labelled):
    seen, made = _labelimg(str(tmp_path), (6, 8), upright_labelled)
    labelled, samples = _custom(str(tmp_path))
    assert [im.oriented for im in labelled.images] == list(upright_labelled)
    assert [im.size for im in labelled.images] == [p.image.size for p in made]
    matched = []
    for image, label in samples:  # each decoded as the labeller saw it, its boxes on it
        match = [n for n in range(2) if oriented.same_picture(image.asnumpy(), seen[n])]
        assert len(match) == 1
        matched += match
        boxes = [[x0, y0, x1, y1] for _name, x0, y0, x1, y1 in made[match[0]].objects]
        assert np.allclose(np.asarray(label)[:, :4], boxes, atol=1)
    assert sorted(matched) == [0, 1]
    report = check_data.check(str(tmp_path), {"dataset": "custom"})
    upright = sum(upright_labelled)
    assert ("EXIF orientation: 2 of 2 images carry a tag other than 1; read upright (turned by "
            "the tag): %d, as stored: %d (per image, the frame its annotation's <size> matches)."
            % (upright, 2 - upright)) in report.markdown()


@pytest.mark.parametrize("upright_labelled", [True, False])
def test_a_tag_size_cannot_tell_follows_the_export_s_other_photos_else_stored(tmp_path,
                                                                             upright_labelled):
    # Tag 3 (upside down) keeps width and height: the <size> matches both frames.
    seen, _made = _labelimg(str(tmp_path), (3, 6), (upright_labelled, upright_labelled))
    labelled, _samples = _custom(str(tmp_path))
    assert [im.oriented for im in labelled.images] == [upright_labelled] * 2
    assert labelled.adjusted.counts() == {
        "EXIF-tagged image whose <size> tells no frame (read in the frame the export's other "
        "<size>s tell, else as stored)": 1}
    alone = str(tmp_path / "alone")
    _labelimg(alone, (3,), (False,))
    labelled = formats.get("custom").labelled(alone, "train",
                                              from_hyperparameters({"dataset": "custom"}))
    assert [im.oriented for im in labelled.images] == [False]  # labelImg shows the stored pixels


# --- real photos -------------------------------------------------------------------------------

def test_real_photos_stored_sideways_with_tag_6_read_as_the_upright_ones(tmp_path):
    """labelImg's raccoon export (upright photos), eight of them, and a copy of those stored as a
    phone held upright stores them (sideways, tag 6), the XML unchanged."""
    copies = {}
    for copy in ("upright", "sideways"):
        root = real_export("raccoon-labelimg-voc", tmp_path / copy / "train")
        kept = sorted(os.listdir(os.path.join(root, "annotations")))[:8]
        for name in os.listdir(os.path.join(root, "annotations")):
            if name not in kept:
                os.remove(os.path.join(root, "annotations", name))
                os.remove(os.path.join(root, "images", name[:-4] + ".jpg"))
        copies[copy] = str(tmp_path / copy)
    for name in os.listdir(os.path.join(copies["sideways"], "train", "images")):
        path = os.path.join(copies["sideways"], "train", "images", name)
        with Image.open(path) as image:
            picture = np.asarray(image.convert("RGB"))
        oriented.save(path, picture, 6)
    config = from_hyperparameters({"dataset": "custom", "val_fraction": "0.25"})
    want, got = build_datasets(config, copies["upright"]), build_datasets(config, copies["sideways"])
    assert len(got.train) + len(got.val) == 8
    for split in ("train", "val"):
        for position in range(len(getattr(want, split))):
            (want_image, want_label) = getattr(want, split)[position]
            (image, label) = getattr(got, split)[position]
            assert oriented.same_picture(image.asnumpy(), want_image.asnumpy()), (split, position)
            assert np.array_equal(label, want_label), (split, position)
    report = check_data.check(copies["sideways"], {"dataset": "custom"})
    assert report.ok and ("EXIF orientation: 8 of 8 images carry a tag other than 1; read upright "
                          "(turned by the tag): 8, as stored: 0") in report.markdown()


def _devkit(root, picture, tag):
    """A VOCdevkit/VOC2007 tree of one photo (trainval and test), a cat in it, the XML written
    for the stored pixels as the official annotations are; the photo stored with ``tag``."""
    base = os.path.join(root, "VOCdevkit", "VOC2007")
    for folder in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(base, folder))
    height, width = picture.shape[:2]
    exif = Image.Exif()
    exif[oriented.TAG] = tag
    Image.fromarray(picture).save(os.path.join(base, "JPEGImages", "000001.jpg"), "JPEG",
                                  quality=95, subsampling=0, exif=exif.tobytes())
    with open(os.path.join(base, "Annotations", "000001.xml"), "w") as handle:
        handle.write("<annotation><filename>000001.jpg</filename><size><width>%d</width>"
                     "<height>%d</height><depth>3</depth></size><object><name>cat</name>"
                     "<difficult>0</difficult><bndbox><xmin>2</xmin><ymin>3</ymin><xmax>20</xmax>"
                     "<ymax>12</ymax></bndbox></object></annotation>" % (width, height))
    for split in ("trainval", "test"):
        with open(os.path.join(base, "ImageSets", "Main", split + ".txt"), "w") as handle:
            handle.write("000001\n")


def test_the_official_voc_is_read_as_stored(tmp_path):
    """dataset=voc declares the stored frame (the official images carry no tag): a tag, were one
    there, would not turn the picture."""
    assert formats.get("voc").frame.oriented() is False
    picture = oriented.upright((64, 48))
    _devkit(str(tmp_path), picture, 6)
    datasets = build_datasets(from_hyperparameters(
        {"dataset": "voc", "train_splits": "2007_trainval", "val_splits": "2007_test"}),
        str(tmp_path))
    for dataset in (datasets.train, datasets.val):
        image, label = dataset[0]
        assert oriented.same_picture(image.asnumpy(), picture)
        assert np.array_equal(np.asarray(label)[0, :4], [1, 2, 19, 11])  # 1-based, read 0-based
