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
