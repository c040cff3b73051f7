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
    from detector_training.families.yolo3 import YOLOv3
    from detector_training.job.demo import run_hyperparameters, run_images

    assert run_hyperparameters({}) == FasterRCNN.demo_defaults
    mask = run_hyperparameters({"network": "mask_rcnn_fpn_resnet18_v1b_coco", "epochs": "1"})
    assert mask == {**FasterRCNN.demo_defaults, **MaskRCNN.demo_defaults, "epochs": "1"}
    assert mask["dataset"] == "coco" and mask["short"] == "128"  # the Faster R-CNN demo's size
    assert run_images(mask) == {"n_train": 48, "n_test": 24, "n_train_2012": 24}
    yolo = run_hyperparameters({"network": "yolo3_mobilenet0.25_voc"})
    assert yolo == {**FasterRCNN.demo_defaults, **YOLOv3.demo_defaults}
    assert yolo["short"] == "128" and yolo["dataset"] == "custom"
    # another network of a family: its family's recipe, that network
    darknet = run_hyperparameters({"network": "yolo3_darknet53_voc"})
    assert darknet == dict(yolo, network="yolo3_darknet53_voc")
    assert run_images(yolo) == run_images({}) == {"n_train": 120, "n_test": 48, "n_train_2012": 60}


def test_make_run_takes_a_network_and_each_familys_shorthand_names_its_demo_network():
    """`make run NETWORK=...` (and run-mask, run-ssd, run-yolo) run detector-run with that network
    in its own folder; `make run` alone the default. Dry runs (-n): the recipe each gets is the
    test above's."""
    from detector_training import families

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def command(*args):
        out = subprocess.run(["make", "-n", "--no-print-directory"] + list(args),
                             cwd=root, capture_output=True, text=True, timeout=60).stdout
        return [line for line in out.splitlines() if "detector-run" in line][-1]

    assert command("run").endswith("detector-run --output out/run")
    assert command("run", "NETWORK=ssd_300_vgg16_atrous_voc").endswith(
        "detector-run --output out/run-ssd_300_vgg16_atrous_voc --set network=ssd_300_vgg16_atrous_voc")
    for target, family in (("run-mask", "mask_rcnn"), ("run-ssd", "ssd"), ("run-yolo", "yolo3")):
        network = families.get_by_name(family).demo_defaults["network"]
        assert command(target).endswith("--output out/run-%s --set network=%s" % (network, network))
