"""YOLO text labels as Ultralytics and Roboflow export them: the dataset YAML's forms, the
images/labels rule, negatives, and broken lines named by file and line."""

import os

import pytest

import exports
from detector_training.data import labelled
from detector_training.data.readers import yolo_labels as yolo
from detector_training.errors import DataError


def _boxes(labelled_set):
    return {os.path.basename(i.path): sorted((b.label, round(b.xmin, 3), round(b.ymin, 3),
                                              round(b.xmax, 3), round(b.ymax, 3)) for b in i.boxes)
            for i in labelled_set.images}


def _expected(made):
    return {p.name: sorted((n, float(x0), float(y0), float(x1), float(y1))
                           for n, x0, y0, x1, y1 in p.objects) for p in made}


def _close(got, expected):
    assert set(got) == set(expected)
    for name, boxes in expected.items():
        assert len(got[name]) == len(boxes)
        for a, b in zip(got[name], boxes):
            assert a[0] == b[0] and a[1:] == pytest.approx(b[1:], abs=0.01)


def test_roboflow_yolov8_export_with_its_parent_relative_paths(tmp_path):
    made = exports.roboflow_yolo(str(tmp_path), negatives=(2,))
    export = yolo.find_export(str(tmp_path))
    assert export.layout == yolo.ROBOFLOW and export.classes == exports.CLASSES
    assert export.roles() == {"train": ["train"], "validation": ["validation"], "test": ["test"]}
    train = export.read("train")
    expected = _expected(made["train"])
    expected[made["train"][2].name] = []  # an empty label file: a negative
    _close(_boxes(train), expected)
    _close(_boxes(export.read("validation")), _expected(made["valid"]))
    assert not train.drops


def test_ultralytics_dataset_with_names_mapping_and_a_path_from_elsewhere(tmp_path):
    made = exports.ultralytics_yolo(str(tmp_path))
    export = yolo.find_export(str(tmp_path))
    assert export.layout == yolo.ULTRALYTICS and export.root == str(tmp_path)
    assert export.classes == exports.CLASSES and set(export.splits) == {"train", "validation"}
    train = export.read("train")
    expected = _expected(made["train"])
    expected[made["train"][2].name] = []  # no label file: a negative
    _close(_boxes(train), expected)
    grey = [i for i in train.images if os.path.basename(i.path) == made["train"][1].name][0]
    assert grey.size == made["train"][1].image.size


def test_the_yaml_one_folder_down_and_path_relative_to_it(tmp_path):
    exports.ultralytics_yolo(str(tmp_path / "shapes"))
    text = (tmp_path / "shapes" / "shapes.yaml").read_text()
    os.rename(tmp_path / "shapes" / "shapes.yaml", tmp_path / "shapes.yaml")
    (tmp_path / "shapes.yaml").write_text(text.replace("path: ../datasets/shapes", "path: shapes"))
    export = yolo.find_export(str(tmp_path))
    assert export.root == str(tmp_path / "shapes") and len(export.read("train").images) == 6


def test_a_split_given_as_a_list_file_and_names_from_nc(tmp_path):
    made = exports.ultralytics_yolo(str(tmp_path), unlabelled=())
    (tmp_path / "train.txt").write_text("".join("./images/train/%s\n" % p.name for p in made["train"][:3]))
    (tmp_path / "data.yaml").write_text("train: train.txt\nval: images/val\nnc: 2\n")
    export = yolo.find_export(str(tmp_path))  # data.yaml is taken before shapes.yaml
    assert export.classes == ("class_0", "class_1")
    assert len(export.read("train").images) == 3


def test_polygon_lines_give_their_enclosing_box_and_classes_filter(tmp_path):
    boxes = yolo.parse_labels(b"0 0.1 0.2 0.5 0.2 0.3 0.6\n\n1 0.5 0.5 0.2 0.2\n", "a.txt",
                              (100, 50), ("cat", "dog"))
    assert [(b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in boxes] == [
        ("cat", 10.0, 10.0, 50.0, 30.0), ("dog", pytest.approx(40.0), 20.0, 60.0, 30.0)]
    assert boxes[1].where == "a.txt line 3"


@pytest.mark.parametrize("line, match", [
    ("0 0.5 0.5 0.2", r"a.txt line 2 is '0 0.5 0.5 0.2', not 'class cx cy w h'"),
    ("cat 0.5 0.5 0.2 0.2", r"a.txt line 2 is 'cat 0.5"),
    ("0 0.5 nan 0.2 0.2", r"not 'class"),
    ("2 0.5 0.5 0.2 0.2", r"a.txt line 2: class 2 is not one of the 2 classes"),
    ("0.5 0.5 0.5 0.2 0.2", r"class 0.5 is not one of"),
])
def test_a_bad_label_line_names_file_and_line(line, match):
    with pytest.raises(DataError, match=match):
        yolo.parse_labels(("1 0.5 0.5 0.1 0.1\n%s\n" % line).encode(), "a.txt", (10, 10), ("a", "b"))


def test_fractions_past_the_edge_are_clipped_and_counted(tmp_path):
    made = exports.roboflow_yolo(str(tmp_path), splits=(("train", 1),))
    label = tmp_path / "train" / "labels" / (made["train"][0].stem + ".txt")
    label.write_text(label.read_text() + "0 0.95 0.5 0.3 0.2\n0 1.2 0.5 0.1 0.1\n0 0.5 0.5 0 0.1\n")
    read = yolo.find_export(str(tmp_path)).read("train")
    assert read.adjusted.counts() == {labelled.CLIPPED: 1}
    assert read.drops.counts() == {labelled.OUTSIDE: 1, labelled.NO_AREA: 1}
    width = made["train"][0].image.size[0]
    assert max(b.xmax for b in read.images[0].boxes) == width


def test_other_image_types_are_counted_not_read(tmp_path):
    exports.ultralytics_yolo(str(tmp_path))
    (tmp_path / "images" / "train" / "scan.tif").write_bytes(b"II*\x00")
    read = yolo.find_export(str(tmp_path)).read("train")
    assert read.drops.counts() == {yolo.OTHER_TYPE: 1} and len(read.images) == 6


@pytest.mark.parametrize("text, match", [
    ("train: images/train\nnames: [a, b\n", r"data.yaml line 3"),
    ("train: images/train\nnames: &n [a]\nval: *n\n", r"aliases \(\*n\) are not accepted"),
    ("train: images/train\nnames: {0: a, 2: b}\n", r"ids of 'names' are 0, 2"),
    ("train: images/train\nnc: 3\nnames: [a, b]\n", r"nc is 3 but 'names' has 2"),
    ("names: [a]\ntest: \n", r"names no split \(train, val, test\)"),
    ("train: images/nowhere\nnames: [a]\n", r"'train: images/nowhere' is not in the data"),
    ("train: ../../etc\nnames: [a]\n", r"is not in the data"),
    ("- a\n- b\n", r"holds no mapping"),
])
def test_a_bad_dataset_yaml_is_named(tmp_path, text, match):
    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "data.yaml").write_text(text)
    with pytest.raises(DataError, match=match):
        yolo.find_export(str(tmp_path))


def test_a_yaml_without_names_is_not_a_yolo_dataset(tmp_path):
    assert yolo.find_export(str(tmp_path)) is None
    (tmp_path / "config.yaml").write_text("epochs: 3\n")
    assert yolo.find_export(str(tmp_path)) is None


def test_the_label_path_replaces_the_last_images_folder():
    assert yolo.label_path("/d/images/train/a.b.jpg") == "/d/labels/train/a.b.txt"
    assert yolo.label_path("/images/x/images/train/a.png") == "/images/x/labels/train/a.txt"
    assert yolo.label_path("/d/train/a.jpg") == "/d/train/a.txt"


def test_a_roboflow_download_s_absolute_paths_resolve_inside_the_data_and_an_absent_test_is_noted(
        tmp_path, caplog):
    """Roboflow's Python package (Version.download()) rewrites data.yaml's train/val to absolute
    paths of the machine it ran on; the real aquarium export, so rewritten, with a test: folder
    that was not uploaded (training never reads it)."""
    import logging

    from conftest import real_export

    root = real_export("aquarium-roboflow-yolov5", tmp_path / "aquarium")
    (tmp_path / "aquarium" / "data.yaml").write_text(
        "names:\n- fish\n- jellyfish\n- penguin\n- puffin\n- shark\n- starfish\n- stingray\nnc: 7\n"
        "test: /content/Aquarium-1/test-not-uploaded/images\n"
        "train: /content/Aquarium-1/train/images\nval: C:\\Users\\me\\Aquarium-1\\valid\\images\n")
    with caplog.at_level(logging.INFO, logger="detector_training"):
        export = yolo.find_export(root)
    assert export.splits["train"] == [os.path.join(root, "train", "images")]
    assert export.splits["validation"] == [os.path.join(root, "valid", "images")]
    assert "test" not in export.splits
    assert "'test: /content/Aquarium-1/test-not-uploaded/images' is not in the data" in caplog.text
    assert "not read by training: left out" in caplog.text
    assert len(export.read("train").images) == len(os.listdir(os.path.join(root, "train", "images")))


def test_an_absent_train_split_still_stops_the_job(tmp_path):
    exports.ultralytics_yolo(str(tmp_path))
    (tmp_path / "data.yaml").write_text("train: /elsewhere/images/nothing\nval: images/val\nnc: 3\n")
    with pytest.raises(DataError, match="'train: /elsewhere/images/nothing' is not in the data"):
        yolo.find_export(str(tmp_path))


def test_train_as_a_list_and_a_list_file_of_absolute_lines_from_another_machine(tmp_path):
    made = exports.ultralytics_yolo(str(tmp_path), unlabelled=())
    lines = "".join("/home/someone/datasets/shapes/images/train/%s\n" % p.name for p in made["train"][:3])
    (tmp_path / "train.txt").write_text(lines)
    (tmp_path / "data.yaml").write_text("train: [train.txt, images/val]\nval: images/val\nnc: 3\n")
    export = yolo.find_export(str(tmp_path))
    train = export.read("train")
    assert len(train.images) == 3 + len(made["val"]) and not train.drops
    assert all(i.path.startswith(str(tmp_path)) for i in train.images)
