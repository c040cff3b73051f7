"""Each labelling tool's export as the tool writes it: a small sample per tool in tests/samples/
(written from the tool's exporter code and docs, the source named in tests/samples/README.md),
and the fixture writers of tests/exports.py, tests/builtin_exports.py and tests/ground_truth.py
checked against it -- byte for byte where the tool's output is deterministic, otherwise parsed
and compared with the exact keys, key order and value types. A fixture that drifts from what the
tool writes fails here, not in a user's job."""

import json
import os
import shutil

from PIL import Image

import builtin_exports
import exports
import ground_truth
from detector_training.data.readers import voc_exports

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")


def sample(*parts, mode="r"):
    with open(os.path.join(SAMPLES, *parts), mode) as handle:
        return handle.read()


def written(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


# CVAT "Pascal VOC 1.1" ----------------------------------------------------------------------

CVAT_VOC = "cvat_voc_1_1"
CVAT_BOXES = [("circle", 40.5, 12.25, 140.5, 63.0), ("square", 0.0, 100.0, 320.0, 240.0)]


def test_the_cvat_voc_fixture_writes_the_sample_byte_for_byte(tmp_path):
    first = exports.Photo("frame_0001.jpg", Image.new("RGB", (320, 240)), [])
    assert exports.cvat_xml(first, edges=CVAT_BOXES, occluded=(1,)) == sample(
        CVAT_VOC, "Annotations", "frame_0001.xml")
    second = exports.Photo("frame_0002.jpg", Image.new("RGB", (320, 240)), [])
    assert exports.cvat_xml(second, edges=[]) == sample(CVAT_VOC, "Annotations", "frame_0002.xml")
    exports.cvat_voc(str(tmp_path), subsets=(("default", 2),), labels=("circle", "square"))
    for part in (("ImageSets", "Main", "default.txt"), ("labelmap.txt",)):
        assert written(os.path.join(tmp_path, *part), "rb") == sample(CVAT_VOC, *part, mode="rb"), part
    # a box-only task: no per-label lists, no Segmentation/Layout/Action lists (as the sample)
    assert os.listdir(tmp_path / "ImageSets") == ["Main"]
    assert os.listdir(tmp_path / "ImageSets" / "Main") == ["default.txt"]


def test_the_cvat_voc_sample_is_read_at_the_edges_cvat_shows(tmp_path):
    """The sample as CVAT's zip unpacks (its JPEGs added): each box at the float edges CVAT drew
    it with, not one pixel up and left as the official VOC's 1-based indices would be."""
    root = tmp_path / "task"
    shutil.copytree(os.path.join(SAMPLES, CVAT_VOC), root)
    (root / "JPEGImages").mkdir()
    for name in ("frame_0001.jpg", "frame_0002.jpg"):
        Image.new("RGB", (320, 240)).save(root / "JPEGImages" / name)
    export = voc_exports.find_export(str(root))
    assert export.layout == voc_exports.CVAT and export.classes == ("circle", "square")
    read = export.read()
    boxes = {os.path.basename(i.path): sorted((b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in i.boxes)
             for i in read.images}
    assert boxes == {"frame_0001.jpg": sorted(CVAT_BOXES), "frame_0002.jpg": []}


# CVAT "COCO 1.0" ----------------------------------------------------------------------------

def test_the_cvat_coco_fixture_writes_the_sample_byte_for_byte(tmp_path):
    builtin_exports.cvat_coco(str(tmp_path), {"default": builtin_exports.sample_objects(3)})
    path = os.path.join("annotations", "instances_default.json")
    assert written(os.path.join(tmp_path, path), "rb") == sample("cvat_coco_1_0", path, mode="rb")
    assert sorted(os.listdir(tmp_path / "images" / "default")) == [
        "img_000.jpg", "img_001.jpg", "img_002.jpg"]


# Label Studio "COCO" ------------------------------------------------------------------------

def test_the_label_studio_fixture_writes_the_sample_byte_for_byte(tmp_path):
    """Byte for byte at the sample's export time (``info`` holds the export's year and
    ``str(datetime.now())``, the one part of the file that differs between two exports)."""
    builtin_exports.label_studio_coco(str(tmp_path), builtin_exports.sample_objects(3))
    assert written(tmp_path / "result.json", "rb") == sample("label_studio_coco", "result.json", mode="rb")
    stored = json.loads(sample("label_studio_coco", "result.json"))
    assert sorted(os.listdir(tmp_path / "images")) == sorted(
        os.path.basename(i["file_name"]) for i in stored["images"])


# SageMaker Ground Truth output manifest -----------------------------------------------------

def _shape(value):
    """``value`` with every leaf replaced by its type, and every mapping by its keys in order:
    what two JSON documents must share to be written alike."""
    if isinstance(value, dict):
        return [(key, _shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__


def test_the_ground_truth_fixture_writes_the_sample_s_lines():
    """Ground Truth's own serialisation of a line is not documented (its pages show the JSON
    pretty-printed): the lines are compared parsed, with the same keys in the same order and the
    same value types."""
    made = [ground_truth.line(ground_truth.BUCKET_PREFIX + "batch-1/img-000.jpg", 500, 400,
                              [(0, 111, 134, 61, 128), (5, 161, 250, 30, 30)]),
            ground_truth.line(ground_truth.BUCKET_PREFIX + "batch-1/img-001.jpg", 500, 400, []),
            ground_truth.line(ground_truth.BUCKET_PREFIX + "batch-1/img-002.jpg", 500, 400,
                              [(7, 20, 40, 100, 80)], adjusted=True)]
    lines = [json.loads(line) for line in sample("ground_truth", "output.manifest").splitlines()]
    assert made == lines
    assert [_shape(m) for m in made] == [_shape(s) for s in lines]


# SageMaker's built-in Object Detection algorithm --------------------------------------------

def test_the_builtin_json_fixture_writes_the_docs_annotation_byte_for_byte(tmp_path):
    boxes = [(0, 111, 134, 61, 128), (0, 161, 250, 79, 143), (1, 101, 185, 42, 130)]
    builtin_exports.builtin_json_split(str(tmp_path), "train", [("sample_image1", (500, 400), boxes)],
                                       {0: "dog", 1: "cat"}, folder="your_image_directory")
    path = os.path.join("train_annotation", "sample_image1.json")
    assert written(os.path.join(tmp_path, path), "rb") == sample("builtin_json", path, mode="rb")
    assert os.path.isfile(tmp_path / "train" / "your_image_directory" / "sample_image1.jpg")


def test_the_builtin_recordio_fixture_writes_the_sample_lst_rec_and_idx(tmp_path):
    """The .lst as GluonCV's tutorial writes it, then what ``im2rec.py --pack-label
    --pass-through`` packs from it: the sample's .rec and .idx were built from the documented
    framing with struct, the fixture packs with MXNet's own recordio."""
    items = builtin_exports.sample_objects(3)
    entries = [(n, builtin_exports.detection_label(boxes, size, 4, extra=size), name + ".jpg")
               for n, (name, size, boxes) in enumerate(items)]
    builtin_exports.write_lst(str(tmp_path / "train.lst"), entries)
    assert written(tmp_path / "train.lst", "rb") == sample("builtin_recordio", "train.lst", mode="rb")
    root = os.path.join(SAMPLES, "builtin_recordio")
    builtin_exports.pack_rec(os.path.join(root, "train.lst"), os.path.join(root, "images"),
                             str(tmp_path / "train"))
    for name in ("train.rec", "train.idx"):
        assert written(tmp_path / name, "rb") == sample("builtin_recordio", name, mode="rb"), name
