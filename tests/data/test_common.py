"""The AutoGluon loop's conveniences, for every family: a validation split carved from the
training data (a stated fraction, seeded, logged) and a final fit on training plus validation."""

import logging

import pytest

from detector_training.job.config import from_hyperparameters
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_voc import generate
from detector_training.errors import ConfigError


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("voc"))
    generate(root, train_2007=20, test_2007=3, train_2012=0, seed=2)
    return root


def config(**overrides):
    return from_hyperparameters(dict({"dataset": "custom", "train_splits": "2007_trainval",
                                      "network": "yolo3_mobilenet0.25_voc"}, **overrides))


def image_paths(dataset):
    return [dataset._paths[i] for i in range(len(dataset))]  # pylint: disable=protected-access


def test_a_carved_split_is_the_stated_share_seeded_disjoint_and_logged(voc_root, caplog):
    with caplog.at_level(logging.INFO):
        a = build_datasets(config(val_fraction="0.25", seed="4"), voc_root)
    assert (len(a.train), len(a.val)) == (15, 5)
    assert "carved 5 of 20 training images (val_fraction=0.25, seed=4)" in caplog.text
    assert not set(image_paths(a.train)) & set(image_paths(a.val))
    assert all("/VOC2007/" in p for p in image_paths(a.val))  # from training, not 2007_test
    assert len(a.aspect_ratios) == 15 and len(a.val_aspect_ratios) == 5
    again = build_datasets(config(val_fraction="0.25", seed="4"), voc_root)
    other = build_datasets(config(val_fraction="0.25", seed="5"), voc_root)
    assert image_paths(again.val) == image_paths(a.val)
    assert image_paths(other.val) != image_paths(a.val)
    img, label = a.val[0]
    assert label.shape[1] >= 5 and img.shape[2] == 3


def test_without_a_fraction_the_named_validation_split_is_used(voc_root):
    data = build_datasets(config(), voc_root)
    assert (len(data.train), len(data.val)) == (20, 3)


def test_a_final_fit_trains_on_training_and_validation_images(voc_root, caplog):
    with caplog.at_level(logging.INFO):
        data = build_datasets(config(final_fit="true"), voc_root)
    assert (len(data.train), len(data.val)) == (23, 3)
    assert len(data.aspect_ratios) == 23
    assert "final fit: training on 20 training + 3 validation images" in caplog.text
    for i in range(3):  # the last training images are the validation ones
        assert (data.train[20 + i][1] == data.val[i][1]).all()
    carved = build_datasets(config(final_fit="true", val_fraction="0.2"), voc_root)
    assert (len(carved.train), len(carved.val)) == (20, 4)


def test_with_validation_takes_the_given_set_leaves_a_share_to_carve_or_carves_the_default():
    from detector_training.data.common import SubsetDataset, with_validation

    train = SubsetDataset(list(range(10)), range(10), ["%d.jpg" % i for i in range(10)])
    ratios = [1.0 + i for i in range(10)]
    given = with_validation(train, ratios, ("a",), "val", [2.0], 0.0, 0.5, 1)
    assert (given.train, given.val, given.val_aspect_ratios) == (train, "val", [2.0])
    later = with_validation(train, ratios, ("a",), None, None, 0.2, 0.5, 1)
    assert later.val is None and later.train is train  # build_datasets carves val_fraction
    carved = with_validation(train, ratios, ("a",), None, None, 0.0, 0.3, 1)
    assert (len(carved.train), len(carved.val)) == (7, 3)
    assert sorted(carved.aspect_ratios + carved.val_aspect_ratios) == ratios
