"""detector-check-data: the format found, images and objects per class and split, what was left
out and why, the problems that would stop the job (file named, exit code 1), without MXNet."""

import json
import os
import subprocess
import sys

import pytest
from PIL import Image

import ground_truth
from detector_training.data import formats
from detector_training.data.generated.synthetic_coco import generate as generate_coco
from detector_training.job import check_data
from detector_training.job.check_data import check, main

PACKAGE_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "container")


@pytest.fixture
def coco_channels(tmp_path):
    channels = tmp_path / "data"
    generate_coco(str(channels / "coco"), 6, 3, seed=1)
    return channels


def coco_counts(path):
    """(images, {class: boxes}) of a COCO file, counted here the plain way."""
    document = json.load(open(path))
    names = {c["id"]: c["name"] for c in document["categories"]}
    counts = {}
    for ann in document["annotations"]:
        if not ann.get("iscrowd"):
            counts[names[ann["category_id"]]] = counts.get(names[ann["category_id"]], 0) + 1
    return len(document["images"]), counts


def test_coco_channels_folder_reports_format_images_and_objects_per_split(coco_channels):
    report = check(str(coco_channels))
    assert report.ok, report.problems
    assert report.dataset == "coco" and "channel 'coco'" in report.found
    notes = coco_channels / "coco" / "annotations"
    for split, name in zip(report.splits, ("instances_train2017", "instances_val2017")):
        images, counts = coco_counts(notes / (name + ".json"))
        assert split.images == images
        assert {k: v for k, v in split.objects.items() if v} == counts
    assert [s.what for s in report.splits] == ["training", "validation"]
    assert report.splits[1].negatives == 1  # the generator leaves one validation image empty


def test_one_channel_folder_is_checked_as_its_channel_and_named_as_given(coco_channels):
    report = check(str(coco_channels / "coco"))
    assert report.ok and report.dataset == "coco"
    text = report.markdown()
    assert "detector-check-data-" not in text  # the temporary channel folder never shows
    assert str(coco_channels / "coco" / "annotations" / "instances_train2017.json") in text


def test_classes_not_asked_for_are_counted_as_left_out(coco_channels):
    report = check(str(coco_channels), {"classes": "circle"})
    assert report.ok, report.problems
    train = report.splits[0]
    _, counts = coco_counts(coco_channels / "coco" / "annotations" / "instances_train2017.json")
    assert list(train.objects) == ["circle"] and train.objects["circle"] == counts["circle"]
    assert train.drops.counts()["object of a class not trained (square)"] == counts["square"]
    assert "| object of a class not trained (square) | %d |" % counts["square"] in report.markdown()


def test_a_broken_annotation_file_is_a_problem_naming_it_and_exit_code_1(coco_channels, capsys):
    path = coco_channels / "coco" / "annotations" / "instances_train2017.json"
    path.write_text(path.read_text()[:200])
    assert main([str(coco_channels)]) == 1
    out = capsys.readouterr().out
    assert "## Problems" in out and str(path) in out and "Fix:" in out


def test_a_missing_image_is_a_problem_naming_it(coco_channels):
    folder = coco_channels / "coco" / "train2017"
    victim = sorted(os.listdir(folder))[0]
    os.remove(folder / victim)
    report = check(str(coco_channels))
    assert not report.ok and victim in report.problems[0].cause


def test_no_box_of_the_asked_classes_stops_the_job(tmp_path):
    ground_truth.file_mode_job(str(tmp_path), {}, count=4)
    report = check(str(tmp_path / "input" / "data"), {"classes": "nothing-like-it"})
    assert not report.ok
    assert "no training image" in report.problems[0].cause
    assert "nothing-like-it" in report.problems[0].cause


def test_ground_truth_manifest_lines_are_reported_with_their_class_map(tmp_path):
    records = ground_truth.file_mode_job(str(tmp_path), {}, count=6, validation=2)
    report = check(str(tmp_path / "input" / "data"))
    assert report.ok, report.problems
    assert report.dataset == "manifest"
    train, val = report.splits
    assert (train.images, val.images) == (6, 2)
    expected = sum(len(r[ground_truth.ATTRIBUTE]["annotations"]) for r in records[:6])
    assert sum(train.objects.values()) == expected
    assert train.negatives == 1  # the generator's empty image (empty=(1,))


def test_a_broken_manifest_line_is_named_with_file_and_line(tmp_path):
    ground_truth.file_mode_job(str(tmp_path), {}, count=4)
    manifest = tmp_path / "input" / "data" / "train" / "output.manifest"
    with open(manifest, "a") as handle:
        handle.write('{"source-ref": "s3://b/x.jpg", "broken\n')
    report = check(str(tmp_path / "input" / "data"))
    assert not report.ok
    assert "train/output.manifest line" in report.problems[0].cause


def test_nothing_recognised_lists_what_was_seen(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "notes.txt").write_text("hello")
    assert main([str(tmp_path)]) == 1
    report = check(str(tmp_path))
    assert "no data format recognised" in report.problems[0].cause
    assert "notes.txt" in report.problems[0].cause
    assert not check(str(tmp_path / "absent")).ok


def test_a_registered_format_is_checked_through_its_own_reader(tmp_path):
    from detector_training.data.formats import LabelledFormat
    from detector_training.data.labelled import Box, LabelledImage, LabelledSet

    class OneFile(LabelledFormat):
        name, title, channels = "onefile", "one-file boxes", ("train",)

        def recognise(self, channel):
            return "boxes.txt" if "boxes.txt" in channel.names() else None

        def read_labelled(self, data_root, split, config):
            folder = self.channel_path(data_root, split)
            if folder is None:
                return None
            labelled = LabelledSet(layout="one file")
            for line in open(os.path.join(folder, "boxes.txt")).read().split("\n"):
                if line:
                    name, label = line.split()
                    labelled.images.append(LabelledImage(name, [Box(1, 1, 5, 9, label)]
                                                         if label != "-" else []))
            labelled.drops.add("box with no area", "boxes.txt line 9")
            return labelled

    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "boxes.txt").write_text("a.jpg cat\nb.jpg dog\nc.jpg cat\nd.jpg -\n")
    formats.register(OneFile)
    try:
        report = check(str(tmp_path))
    finally:
        formats.unregister("onefile")
    assert report.ok and report.dataset == "onefile"
    train = report.splits[0]
    assert dict(train.objects) == {"cat": 2, "dog": 1} and train.negatives == 1
    assert train.box_sides == [pytest.approx((4 * 8) ** 0.5)] * 3
    assert "| box with no area | 1 | boxes.txt line 9 |" in report.markdown()
    assert any("validation: 0.1 of the training images" in n for n in report.notes)


def test_the_report_files_are_written_whole(coco_channels, tmp_path):
    out = tmp_path / "out"
    assert main([str(coco_channels), "--output", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["data_report.md", "data_report.png"]
    assert (out / "data_report.md").read_text().startswith("# Data report")
    with Image.open(out / "data_report.png") as picture:
        assert picture.format == "PNG" and picture.size[0] > 300


def test_runs_without_mxnet_or_gluoncv(coco_channels, tmp_path):
    code = ("import sys; sys.modules['mxnet'] = None; sys.modules['gluoncv'] = None\n"
            "from detector_training.job.check_data import main\n"
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, str(coco_channels), "--output",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "dataset=coco" in done.stdout and (tmp_path / "out" / "data_report.png").exists()


def test_channel_names_decide_between_a_channels_folder_and_one_channel(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "validation").mkdir()
    assert check_data.is_channels_folder(str(tmp_path))
    (tmp_path / "images").mkdir()  # a manifest's images beside it
    assert check_data.is_channels_folder(str(tmp_path))
    (tmp_path / "valid").mkdir()  # Roboflow's split folder: an export, one channel
    assert not check_data.is_channels_folder(str(tmp_path))
    only_images = tmp_path / "label-studio"
    (only_images / "images").mkdir(parents=True)  # Label Studio's export: one channel
    assert not check_data.is_channels_folder(str(only_images))


# --- every export layout the tests can build, as its tool writes it ---------------------------

def _items(count):
    import builtin_exports

    return builtin_exports.sample_objects(count)


def _export_cases():
    import builtin_exports as built
    import exports

    return {
        "labelImg, XML beside each image": (
            lambda root: exports.labelimg_beside(os.path.join(root, "train")), "custom", (6, None)),
        "labelImg, separate save folder": (
            lambda root: exports.labelimg_separate(os.path.join(root, "train")), "custom", (6, None)),
        "CVAT Pascal VOC 1.1": (
            lambda root: exports.cvat_voc(os.path.join(root, "train")), "custom", (6, None)),
        "Roboflow Pascal VOC": (
            lambda root: exports.roboflow_voc(os.path.join(root, "train")), "custom", (6, 3)),
        "Ultralytics YOLO": (
            lambda root: exports.ultralytics_yolo(os.path.join(root, "train")), "yolo", (6, 3)),
        "Roboflow YOLO": (
            lambda root: exports.roboflow_yolo(os.path.join(root, "train")), "yolo", (6, 3)),
        "built-in algorithm, image format": (
            lambda root: built.builtin_json_channels(root), "builtin", (6, 3)),
        "built-in algorithm, RecordIO": (
            lambda root: built.builtin_recordio_channels(root, root + "-work"), "builtin", (6, 3)),
        "CVAT COCO 1.0": (
            lambda root: built.cvat_coco(os.path.join(root, "train"), {"default": _items(4)}),
            "coco", (4, None)),
        "Roboflow COCO": (
            lambda root: built.roboflow_coco(os.path.join(root, "train"),
                                             {"train": _items(4), "valid": _items(2)}),
            "coco", (4, 2)),
        "Label Studio COCO": (
            lambda root: built.label_studio_coco(os.path.join(root, "train"), _items(4)),
            "coco", (4, None)),
    }


EXPORTS = ["labelImg, XML beside each image", "labelImg, separate save folder",
           "CVAT Pascal VOC 1.1", "Roboflow Pascal VOC", "Ultralytics YOLO", "Roboflow YOLO",
           "built-in algorithm, image format", "built-in algorithm, RecordIO", "CVAT COCO 1.0",
           "Roboflow COCO", "Label Studio COCO"]


@pytest.mark.parametrize("layout", EXPORTS)
def test_every_export_layout_is_reported_as_a_channels_folder_and_as_one_channel(tmp_path, layout):
    build, dataset, (n_train, n_val) = _export_cases()[layout]
    channels = tmp_path / "data"
    build(str(channels))
    for path in [channels] + ([channels / "train"] if dataset != "builtin" else []):
        report = check(str(path))
        assert report.ok, (path, report.problems)
        assert report.dataset == dataset
        assert [s.images for s in report.splits] == [n for n in (n_train, n_val) if n is not None]
        assert sum(report.splits[0].objects.values()) > 0
        if n_val is None:
            assert any("carved" in note for note in report.notes)


def test_a_broken_builtin_annotation_file_is_a_problem_naming_it(tmp_path):
    build, _dataset, _sizes = _export_cases()["built-in algorithm, image format"]
    build(str(tmp_path / "data"))
    victim = sorted((tmp_path / "data" / "train_annotation").glob("*.json"))[1]
    victim.write_text(victim.read_text()[:30])
    assert main([str(tmp_path / "data")]) == 1
    report = check(str(tmp_path / "data"))
    assert victim.name in report.problems[0].cause and report.problems[0].fix


@pytest.mark.parametrize("layout, damage, named", [
    ("labelImg, XML beside each image", "truncate_xml", ".xml"),
    ("labelImg, XML beside each image", "word_for_number", "line"),
    ("Ultralytics YOLO", "bad_yolo_line", "line 1"),
])
def test_a_broken_export_file_is_a_problem_naming_it(tmp_path, layout, damage, named):
    build, _dataset, _sizes = _export_cases()[layout]
    channels = tmp_path / "data"
    build(str(channels))
    if damage == "bad_yolo_line":
        victim = sorted(p for p in (channels / "train").rglob("*.txt") if "labels" in p.parts
                        and p.read_text().strip())[0]
        victim.write_text("0 0.5 half 0.2 0.2\n")
    else:
        victim = sorted((channels / "train").rglob("*.xml"))[0]
        text = victim.read_text()
        victim.write_text(text[:len(text) // 2] if damage == "truncate_xml"
                          else text.replace("<xmin>", "<xmin>left", 1))
    assert main([str(channels)]) == 1
    report = check(str(channels))
    assert victim.name in report.problems[0].cause and named in report.problems[0].cause


def test_an_entity_bomb_is_refused_naming_the_file(tmp_path):
    build, _dataset, _sizes = _export_cases()["labelImg, XML beside each image"]
    build(str(tmp_path / "data"))
    victim = sorted((tmp_path / "data" / "train").rglob("*.xml"))[0]
    victim.write_text('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
                      "<annotation><filename>&b;</filename></annotation>")
    report = check(str(tmp_path / "data"))
    assert not report.ok and victim.name in report.problems[0].cause


def test_a_vocdevkit_in_the_voc_channel_is_checked_as_the_job_reads_it(tmp_path):
    from detector_training.data.generated.synthetic_voc import generate as generate_voc

    generate_voc(str(tmp_path / "voc"), train_2007=8, test_2007=4, train_2012=0, seed=1)
    asked = {"dataset": "custom", "train_splits": "2007_trainval"}
    for report in (check_data.check_channels({"voc": str(tmp_path / "voc")}, asked),
                   check(str(tmp_path / "voc"), asked), check(str(tmp_path), asked)):
        assert report.ok, report.problems
        assert report.dataset == "custom" and [s.images for s in report.splits] == [8, 4]


def test_cvat_masks_are_counted_as_objects_and_coco_crowds_as_left_out(tmp_path, coco_channels):
    import builtin_exports as built
    from detector_training.data.readers.coco_exports import MASK_OBJECT

    built.cvat_coco(str(tmp_path / "cvat" / "train"), {"default": _items(4)}, masks=True)
    report = check(str(tmp_path / "cvat"))
    assert report.ok, report.problems
    assert sum(report.splits[0].objects.values()) == 5 and not report.splits[0].drops
    assert "| %s | 5 |" % MASK_OBJECT in report.markdown()
    notes = coco_channels / "coco" / "annotations" / "instances_train2017.json"
    document = json.load(open(notes))
    document["annotations"][0]["iscrowd"] = 1  # COCO proper: a crowd region, not an object
    notes.write_text(json.dumps(document))
    report = check(str(coco_channels))
    assert report.splits[0].drops.counts() == {"crowd box (left out of training)": 1}
    assert "| crowd box (left out of training) | 1 |" in report.markdown()


def test_an_empty_validation_split_is_reported_as_carved_not_as_a_problem(tmp_path):
    import builtin_exports as built

    built.roboflow_coco(str(tmp_path / "train"), {"train": _items(6), "valid": []})
    report = check(str(tmp_path))
    assert report.ok, report.problems
    assert [s.what for s in report.splits] == ["training"]
    assert ("validation: Roboflow COCO, train/valid/_annotations.coco.json has no image; 0.1 of "
            "the training images are carved as the validation split instead (seed 233)") \
        in report.notes
