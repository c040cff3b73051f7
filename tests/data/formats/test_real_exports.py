"""Real exports exactly as their tools wrote them (../shared/data/real-exports/, read from there):
recognised with their own class lists, counted by the data check, read by the job."""

import json
import re

import pytest

from conftest import real_export
from detector_training.data import formats
from detector_training.errors import DataError
from detector_training.job.check_data import check
from detector_training.job.config import from_hyperparameters


def foosball(tmp_path):
    """Roboflow's "COCO" export of foosball frames as the 'train' channel (train/, valid/, test/,
    each with _annotations.coco.json beside its JPEGs; category 0 is a real class)."""
    channels = tmp_path / "data"
    real_export("foosball-roboflow-coco", channels / "train")
    return channels


def test_the_roboflow_coco_export_is_recognised_with_its_own_classes(tmp_path):
    channels = foosball(tmp_path)
    name, channel, _where = formats.recognise(str(channels))
    assert (name, channel) == ("coco", "train")
    report = check(str(channels))
    assert report.ok, report.problems
    document = json.load(open(channels / "train" / "train" / "_annotations.coco.json"))
    names = {c["id"]: c["name"] for c in document["categories"]}
    train = report.splits[0]
    assert sorted(train.objects) == sorted(names.values())
    for category_id, name in names.items():
        assert train.objects[name] == sum(1 for a in document["annotations"]
                                          if a["category_id"] == category_id), name


def test_an_annotation_of_no_category_is_refused_by_the_job_and_the_data_check_alike(tmp_path):
    channels = foosball(tmp_path)
    path = channels / "train" / "train" / "_annotations.coco.json"
    document = json.load(open(path))
    document["annotations"][3]["category_id"] = 7
    path.write_text(json.dumps(document))
    expected = ("annotations[3] (image %s) has category_id 7, which no category has"
                % document["annotations"][3]["image_id"])
    report = check(str(channels))
    assert not report.ok and expected in report.problems[0].cause
    with pytest.raises(DataError, match=re.escape(expected)):
        formats.get("coco").read(from_hyperparameters({"dataset": "coco"}), str(channels))


def test_val_fraction_carves_the_export_s_validation_from_its_training_file(tmp_path):
    channels = foosball(tmp_path)
    document = json.load(open(channels / "train" / "train" / "_annotations.coco.json"))
    config = from_hyperparameters({"dataset": "coco", "val_fraction": "0.2"})
    datasets = formats.build_datasets(config, str(channels))
    expected = int(round(0.2 * len(document["images"])))
    assert len(datasets.val) == expected  # not the export's valid/ subset
    val_files = {p.rsplit("/", 2)[-2] for p in datasets.val.base._items}
    assert val_files == {"train"}
    assert len(datasets.val.base._coco[0].getImgIds()) == expected
