"""The coco format: its channel, its own configuration rules, its metric and its masks."""

from types import SimpleNamespace

import pytest

from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_coco import generate
from detector_training.errors import ConfigError, DataError
from detector_training.job.config import from_hyperparameters
from detector_training.job.sm_env import Environment
from detector_training.core.evaluation import COCO

WORLD = SimpleNamespace(rank=0, size=1, local_rank=0, is_main=True, is_local_main=True)


def test_the_data_root_is_the_first_coco_channel_or_the_channels_for_named_files(tmp_path):
    data = tmp_path / "input" / "data"
    generate(str(data / "training"), 2, 1)
    env = Environment.read(str(tmp_path), environ={})
    coco = formats.get("coco")
    assert coco.data_root(from_hyperparameters({"dataset": "coco"}), env, WORLD) == \
        str(data / "training")
    named = from_hyperparameters({"dataset": "coco",
                                  "train_annotation_file": "training/annotations/a.json",
                                  "val_annotation_file": "training/annotations/b.json"})
    assert coco.data_root(named, env, WORLD) == str(data)


def test_without_a_coco_channel_the_error_names_the_channels(tmp_path):
    (tmp_path / "input" / "data").mkdir(parents=True)
    env = Environment.read(str(tmp_path), environ={})
    with pytest.raises(DataError, match="no data channel: none of coco, train, training exists"):
        formats.get("coco").data_root(from_hyperparameters({"dataset": "coco"}), env, WORLD)


@pytest.mark.parametrize("hps, expected", [
    ({"val_splits": "a,b"}, "COCO validation reads one annotation file"),
    ({"val_fraction": "0.2", "train_splits": "a,b"},
     "val_fraction=0.2 carves the validation images from one COCO annotation file"),
])
def test_coco_refuses_what_its_metric_cannot_score(hps, expected):
    with pytest.raises(ConfigError, match=expected):
        from_hyperparameters(dict({"dataset": "coco"}, **hps))


def test_annotation_files_are_coco_s_alone():
    with pytest.raises(ConfigError, match="train_annotation_file is only used with dataset=coco"):
        from_hyperparameters({"dataset": "custom", "train_annotation_file": "a.json",
                              "val_annotation_file": "b.json"})


def test_coco_data_carries_the_coco_metric(tmp_path):
    generate(str(tmp_path), 3, 2)
    data = build_datasets(from_hyperparameters({"dataset": "coco"}), str(tmp_path))
    assert data.metric is COCO and len(data.val) == 2


@pytest.mark.parametrize("instances", [False, True])
def test_a_cvat_export_of_masks_trains_them_as_objects_with_their_masks(tmp_path, instances):
    import builtin_exports as bx

    items = bx.sample_objects(4)
    bx.cvat_coco(str(tmp_path / "train"), {"Train": items, "Validation": items[:2]}, masks=True)
    data = build_datasets(from_hyperparameters({"dataset": "coco"}), str(tmp_path), instances)
    assert len(data.train) == 4 and sum(len(data.train[i][1]) for i in range(4)) == 5
    truth = data.val.base.coco  # the ground truth COCO's metric scores
    assert len(truth.anns) == 2 and all(a["iscrowd"] == 0 for a in truth.anns.values())
    if instances:  # each object's mask, traced from its RLE: the box's pixels
        rings = data.train[0][2][0]
        _cls, left, top, w, h = items[0][2][0]
        xs, ys = rings[0][:, 0], rings[0][:, 1]
        assert (xs.min(), ys.min(), xs.max(), ys.max()) == (left + 0.5, top + 0.5,
                                                            left + w - 0.5, top + h - 0.5)


def test_an_empty_roboflow_valid_folder_is_carved_from_training_and_said(tmp_path, caplog):
    import builtin_exports as bx

    bx.roboflow_coco(str(tmp_path / "train"), {"train": bx.sample_objects(6), "valid": []})
    with caplog.at_level("INFO", logger="detector_training"):
        data = build_datasets(from_hyperparameters({"dataset": "coco"}), str(tmp_path))
    assert (len(data.train), len(data.val)) == (5, 1)
    assert ("validation: Roboflow COCO (train/valid/_annotations.coco.json) has no image; 0.1 of "
            "the training images are carved") in caplog.text


def test_an_empty_training_annotation_file_is_a_clear_error(tmp_path):
    import builtin_exports as bx

    bx.roboflow_coco(str(tmp_path / "train"), {"train": [], "valid": bx.sample_objects(2)})
    with pytest.raises(DataError, match=r"the training data \(Roboflow COCO "
                                        r"\(train/train/_annotations.coco.json\)\) has no image"):
        build_datasets(from_hyperparameters({"dataset": "coco"}), str(tmp_path))


def test_an_empty_validation_file_in_gluoncv_s_layout_is_carved_too(tmp_path, caplog):
    import json

    generate(str(tmp_path), 6, 2)
    path = tmp_path / "annotations" / "instances_val2017.json"
    document = json.loads(path.read_text())
    path.write_text(json.dumps(dict(document, images=[], annotations=[])))
    with caplog.at_level("INFO", logger="detector_training"):
        data = build_datasets(from_hyperparameters({"dataset": "coco"}), str(tmp_path))
    assert (len(data.train), len(data.val)) == (5, 1)
    assert "instances_val2017.json has no image; 0.1 of the training images are carved" in caplog.text
