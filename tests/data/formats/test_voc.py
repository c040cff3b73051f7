"""The VOC XML formats on a VOCdevkit tree: voc (GluonCV's VOC reader) and custom (its VOCdevkit
case; its exports are in test_custom.py)."""

from types import SimpleNamespace

import numpy as np

import pytest

from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.job.config import from_hyperparameters
from detector_training.errors import ConfigError, DataError
from detector_training.data.generated.synthetic_voc import generate


def test_unknown_class_in_annotations_is_a_clear_error(tmp_path):
    generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0, seed=2)
    config = from_hyperparameters({"dataset": "custom", "classes": "cat,dog",
                                   "train_splits": "2007_trainval"})
    with pytest.raises(DataError) as err:
        build_datasets(config, str(tmp_path))
    assert "no training image of VOCdevkit tree has an object of the classes cat, dog" in str(err.value)


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


def job_env(tmp_path):
    from detector_training.job.sm_env import Environment

    (tmp_path / "input" / "data").mkdir(parents=True, exist_ok=True)
    return Environment.read(str(tmp_path), environ={"DETECTOR_WORK_DIR": str(tmp_path / "work")})


WORLD = SimpleNamespace(rank=0, size=1, local_rank=0, is_main=True, is_local_main=True)


def test_custom_reads_an_extracted_tree_in_the_channel_as_is(tmp_path):
    env = job_env(tmp_path)
    generate(str(tmp_path / "input" / "data" / "train"), 2, 1, 0)
    config = from_hyperparameters({"dataset": "custom"})
    assert formats.get("custom").data_root(config, env, WORLD) == env.channel_dir("train")


def test_custom_never_reaches_for_the_official_voc_tars(tmp_path, monkeypatch):
    """A CVAT-style export (no VOCdevkit) with dataset=custom: a clear error naming what the
    channel holds, and no source is tried (the official mirror is the default data_mirrors)."""
    from detector_training.data.acquire import sources

    def no_fetch(*args, **kwargs):
        raise AssertionError("a source was tried")

    for stage in ("stage_http", "stage_s3", "stage_channel_file"):
        monkeypatch.setattr(sources, stage, no_fetch)
    env = job_env(tmp_path)
    for folder in ("Annotations", "JPEGImages", "ImageSets"):
        (tmp_path / "input" / "data" / "train" / folder).mkdir(parents=True)
    config = from_hyperparameters({"dataset": "custom"})
    assert config.data_mirrors == ("official",)
    with pytest.raises(DataError) as err:
        formats.get("custom").data_root(config, env, WORLD)
    assert "dataset=custom: channel 'train' holds no Pascal VOC XML (no VOCdevkit/VOC<year> tree" \
        in str(err.value)
    assert "its top level: Annotations, ImageSets, JPEGImages" in str(err.value)
    assert "the official VOC tars are dataset=voc" in err.value.fix
    assert not (tmp_path / "work").exists()


def test_voc_takes_no_classes_and_both_take_voc_splits_only():
    with pytest.raises(ConfigError, match="classes is only used with dataset=custom or coco"):
        from_hyperparameters({"dataset": "voc", "classes": "a"})
    for dataset in ("voc", "custom"):
        with pytest.raises(ConfigError, match="train_splits=trainval: expected YEAR_NAME"):
            from_hyperparameters({"dataset": dataset, "train_splits": "trainval"})
    assert from_hyperparameters({"dataset": "coco", "train_splits": "trainval"}).train_splits == \
        ("trainval",)


def test_num_classes_other_than_vocs_20_is_refused_with_the_fix():
    import pytest

    from detector_training.errors import ConfigError
    from detector_training.job.config import from_hyperparameters

    assert from_hyperparameters({"dataset": "voc", "num_classes": "20"}).num_classes == 20
    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"dataset": "voc", "num_classes": "3"})
    assert "num_classes=3: dataset=voc has its 20 classes (dataset=custom trains your own)" in str(err.value)


def test_voc_reads_the_official_tree_as_gluoncvs_voc_reader_does(tmp_path):
    """dataset=voc reads through the labelled form (one parse of each annotation); its label rows
    are those GluonCV's VOCDetection gives for the same tree: the 20 classes in their order, the
    1-based corners made 0-based, the difficult flags."""
    from gluoncv.data import VOCDetection

    from detector_training.data.formats.voc import VOC_CLASSES

    assert VOC_CLASSES == tuple(VOCDetection.CLASSES)
    generate(str(tmp_path), train_2007=6, test_2007=3, train_2012=2, seed=7,
             classes=("person", "dog", "aeroplane"))
    data = build_datasets(from_hyperparameters({"dataset": "voc"}), str(tmp_path))
    assert data.classes == VOC_CLASSES and (len(data.train), len(data.val)) == (8, 3)
    theirs = {"train": VOCDetection(root=str(tmp_path / "VOCdevkit"), splits=[(2007, "trainval"), (2012, "trainval")]),
              "val": VOCDetection(root=str(tmp_path / "VOCdevkit"), splits=[(2007, "test")])}
    for split, ours in (("train", data.train), ("val", data.val)):
        assert len(ours) == len(theirs[split])
        for i in range(len(ours)):
            image, label = ours[i]
            their_image, their_label = theirs[split][i]
            assert image.shape == their_image.shape
            np.testing.assert_allclose(label, their_label)
    assert {int(c) for i in range(len(data.train)) for c in data.train[i][1][:, 4]} <= {0, 11, 14}
