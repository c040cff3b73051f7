"""The container's data check from the launcher, in the SDK's environment (no MXNet there):
check_data(path), detector-launch check-data, and launch() checking local-folder inputs before
anything is sent."""

import json
import logging
import sys

import pytest
from PIL import Image

from sagemaker_launch import JobSpec, LaunchError, check_data, check_inputs, launch
from sagemaker_launch.cli import main
from test_request import IMAGE, ROLE, stubbed_session


def coco_channel(folder, boxes=((10, 12, 20, 30), (40, 8, 16, 16)), broken=False):
    """A COCO-format channel as GluonCV lays it out: annotations/<split>.json, <split>/ images."""
    for split in ("instances_train2017", "instances_val2017"):
        images = folder / split.split("_", 1)[1]
        images.mkdir(parents=True)
        Image.new("RGB", (64, 48), "gray").save(images / "a.jpg")
        document = {"images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
                    "annotations": [{"id": n, "image_id": 1, "category_id": 1 + n % 2,
                                     "bbox": list(box), "iscrowd": 0}
                                    for n, box in enumerate(boxes)],
                    "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}
        (folder / "annotations").mkdir(exist_ok=True)
        text = json.dumps(document)
        (folder / "annotations" / (split + ".json")).write_text(text[:40] if broken else text)
    return folder


def test_check_data_reports_a_local_folder_without_mxnet(tmp_path):
    assert "mxnet" not in sys.modules
    report = check_data(str(coco_channel(tmp_path / "data" / "coco")))
    assert report.ok and report.dataset == "coco"
    assert dict(report.splits[0].objects) == {"cat": 1, "dog": 1}
    assert "mxnet" not in sys.modules and "gluoncv" not in sys.modules


def test_detector_launch_check_data_prints_the_report_and_fails_on_a_problem(tmp_path, capsys):
    good = coco_channel(tmp_path / "good" / "coco")
    assert main(["check-data", str(good)]) == 0
    assert "| cat | 1 |" in capsys.readouterr().out
    bad = coco_channel(tmp_path / "bad" / "coco", broken=True)
    assert main(["check-data", str(bad.parent), "--hp", "classes=cat"]) == 1
    assert "instances_train2017.json" in capsys.readouterr().out


def test_launch_refuses_local_data_that_would_stop_the_job_before_sending(tmp_path):
    session, captured, _ = stubbed_session()
    bad = coco_channel(tmp_path / "coco", broken=True)
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge")
    with pytest.raises(LaunchError) as err:
        launch(spec, {"coco": "file://%s" % bad}, wait=False, session=session)
    assert "instances_train2017.json" in str(err.value) and "data_check=False" in str(err.value)
    assert captured == {}


def test_check_inputs_checks_local_folders_together_and_skips_s3(tmp_path, caplog):
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="local",
                   hyperparameters={"classes": "dog"})
    good = coco_channel(tmp_path / "coco")
    assert check_inputs(spec, {"coco": "s3://b/coco/", "pretrained": str(tmp_path)}) is None
    with caplog.at_level(logging.INFO, logger="sagemaker_launch"):
        report = check_inputs(spec, {"coco": "file://%s" % good, "pretrained": "s3://b/w/"})
    assert report.ok and dict(report.splits[0].objects) == {"dog": 1}
    assert "left out: object of a class not trained (cat): 1" in caplog.text
