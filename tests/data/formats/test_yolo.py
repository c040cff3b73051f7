"""dataset=yolo on Ultralytics and Roboflow YOLO datasets as they are exported: recognised in the
channel, the YAML's splits as training and validation, negatives kept."""

import os

import pytest

import exports
from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters


def _channels(tmp_path):
    return tmp_path / "input" / "data"


def test_both_exports_are_recognised_as_yolo(tmp_path):
    exports.roboflow_yolo(str(_channels(tmp_path) / "train"))
    assert formats.recognise(str(_channels(tmp_path))) == (
        "yolo", "train", "Roboflow YOLOv8 (data.yaml)")
    exports.ultralytics_yolo(str(tmp_path / "u" / "train" / "shapes"))
    assert formats.recognise(str(tmp_path / "u")) == (
        "yolo", "train", "Ultralytics YOLO (%s)" % os.path.join("shapes", "shapes.yaml"))


def test_roboflow_train_and_valid_with_an_empty_label_file_kept_as_a_negative(tmp_path):
    exports.roboflow_yolo(str(_channels(tmp_path) / "train"), negatives=(1,))
    datasets = build_datasets(from_hyperparameters({"dataset": "yolo", "skip_empty": "false"}),
                              str(_channels(tmp_path)))
    assert datasets.classes == exports.CLASSES
    assert (len(datasets.train), len(datasets.val)) == (6, 3)
    _, label = datasets.train[1]
    assert (label[:, 4] < 0).all()  # the negative's placeholder row
    skipped = build_datasets(from_hyperparameters({"dataset": "yolo", "skip_empty": "true"}),
                             str(_channels(tmp_path)))
    assert len(skipped.train) == 5


def test_ultralytics_val_validates_and_a_validation_channel_wins(tmp_path):
    exports.ultralytics_yolo(str(_channels(tmp_path) / "train"), train=6, val=3)
    datasets = build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))
    assert (len(datasets.train), len(datasets.val)) == (5, 3)  # the photo without labels skipped
    image, label = datasets.train[1]  # the grey photo
    assert image.shape[2] == 3 and len(label)
    exports.roboflow_yolo(str(_channels(tmp_path) / "validation"), splits=(("valid", 2),))
    datasets = build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))
    assert len(datasets.val) == 2


def test_a_bad_label_line_stops_the_read_naming_file_and_line(tmp_path):
    made = exports.ultralytics_yolo(str(_channels(tmp_path) / "train"))
    label = _channels(tmp_path) / "train" / "labels" / "train" / (made["train"][0].stem + ".txt")
    label.write_text(label.read_text() + "7 0.5 0.5 0.1 0.1\n")
    with pytest.raises(DataError, match=r"%s.txt line \d+: class 7 is not one of the 2 classes"
                       % made["train"][0].stem):
        build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))


def test_no_yaml_in_the_named_channel_is_a_clear_error(tmp_path):
    (_channels(tmp_path) / "train").mkdir(parents=True)
    with pytest.raises(DataError, match="holds no YOLO dataset YAML"):
        build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))


def test_a_yaml_without_a_train_split_in_the_train_channel_is_named(tmp_path):
    exports.roboflow_yolo(str(_channels(tmp_path) / "train"), splits=(("valid", 2),))
    with pytest.raises(DataError, match=r"data.yaml names no 'train' split \(it has validation\)"):
        build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))


def _empty_split(root, split):
    """The export with its ``split`` folder's images and labels removed (the folders kept)."""
    for part in ("images", "labels"):
        folder = os.path.join(root, split, part)
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))


def test_an_empty_val_folder_is_carved_from_training_and_said_in_the_log(tmp_path, caplog):
    root = str(_channels(tmp_path) / "train")
    exports.roboflow_yolo(root)
    _empty_split(root, "valid")
    with caplog.at_level("INFO", logger="detector_training"):
        datasets = build_datasets(from_hyperparameters({"dataset": "yolo"}),
                                  str(_channels(tmp_path)))
    assert (len(datasets.train), len(datasets.val)) == (5, 1)
    assert "validation: Roboflow YOLOv8, valid/images has no image" in caplog.text
    assert "0.1 of the training images are carved as the validation split instead" in caplog.text


def test_an_empty_train_folder_is_a_clear_error(tmp_path):
    root = str(_channels(tmp_path) / "train")
    exports.roboflow_yolo(root)
    _empty_split(root, "train")
    with pytest.raises(DataError,
                       match=r"the training data \(Roboflow YOLOv8, train/images\) has no image"):
        build_datasets(from_hyperparameters({"dataset": "yolo"}), str(_channels(tmp_path)))
