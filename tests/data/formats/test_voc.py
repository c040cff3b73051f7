"""The VOC XML formats (voc, custom): GluonCV's VOC reader on a VOCdevkit tree."""

import pytest

from detector_training.data.formats import build_datasets
from detector_training.job.config import from_hyperparameters
from detector_training.errors import DataError
from detector_training.data.synthetic_voc import generate


def test_unknown_class_in_annotations_is_a_clear_error(tmp_path):
    generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0, seed=2)
    config = from_hyperparameters({"dataset": "custom", "classes": "cat,dog",
                                   "train_splits": "2007_trainval"})
    with pytest.raises(DataError) as err:
        build_datasets(config, str(tmp_path))
    assert "no training image has an object of the classes cat, dog" in str(err.value)


def test_images_without_configured_classes_are_left_out(tmp_path):
    generate(str(tmp_path), train_2007=30, test_2007=10, train_2012=0, seed=4)
    full = build_datasets(from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval"}),
                          str(tmp_path))
    only = build_datasets(from_hyperparameters({"dataset": "custom", "classes": "circle",
                                                "train_splits": "2007_trainval"}), str(tmp_path))
    assert only.classes == ("circle",)
    assert 0 < len(only.train) < len(full.train) == 30
    assert len(only.aspect_ratios) == len(only.train)
    for i in range(len(only.train)):
        _, label = only.train[i]
        assert len(label) and (label[:, 4] == 0).all()


def test_missing_split_file_is_a_clear_error(tmp_path):
    generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0, seed=2)
    config = from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval,2012_trainval"})
    with pytest.raises(DataError) as err:
        build_datasets(config, str(tmp_path))
    assert "VOC2012" in str(err.value)
