"""`detector-run` (`make run`) goes through `train`: hyperparameters such as processes_per_host act
as they do in the container."""

import os
import re
import subprocess

from conftest import BIN, ranks_finished


def test_detector_run_with_two_processes_per_host_trains_two_ranks(tmp_path):
    out_dir = tmp_path / "run"
    result = subprocess.run([os.path.join(BIN, "detector-run"), "--output", str(out_dir),
                             "--set", "processes_per_host=2", "--set", "epochs=1",
                             "--set", "val_interval=1"],
                            capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert re.search(r"job: .*processes_per_host=2 world=2", out), out[-4000:]
    assert ranks_finished(out) == ["0", "1"]
    assert re.search(r"validation: epoch=0 images=48 .*mAP=", out)
    assert "model directory: %s" % (out_dir / "model") in out
    assert {"model.params", "validation.json", "training_curves.png"} <= set(os.listdir(out_dir / "model"))


def test_the_demo_layers_the_defaults_of_the_family_of_the_network_asked_for():
    from detector_training.families.faster_rcnn import FasterRCNN
    from detector_training.families.mask_rcnn import MaskRCNN
    from detector_training.job.demo import run_hyperparameters, run_images

    assert run_hyperparameters({}) == FasterRCNN.demo_defaults
    mask = run_hyperparameters({"network": "mask_rcnn_fpn_resnet18_v1b_coco", "epochs": "1"})
    assert mask == {**FasterRCNN.demo_defaults, **MaskRCNN.demo_defaults, "epochs": "1"}
    assert mask["dataset"] == "coco" and mask["short"] == "128"  # the Faster R-CNN demo's size
    assert run_images(mask) == {"n_train": 48, "n_test": 24, "n_train_2012": 24}
    yolo = run_hyperparameters({"network": "yolo3_mobilenet0.25_voc"})
    assert yolo == {**FasterRCNN.demo_defaults, "network": "yolo3_mobilenet0.25_voc"}
    assert run_images(yolo) == run_images({}) == {"n_train": 120, "n_test": 48, "n_train_2012": 60}
