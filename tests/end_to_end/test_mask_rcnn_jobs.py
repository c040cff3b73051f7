"""Whole Mask R-CNN jobs on generated COCO-format instances (polygon and RLE masks): one rank
through `train`, two Horovod ranks, SIGTERM mid-epoch and resume; the model directory, the log
lines every metric definition matches, and `detector-predict` drawing masks."""

import json
import os
import re
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import BIN, make_job, stop_mid_epoch_and_resume, train_env, two_rank_job_finishes

from detector_training.families.mask_rcnn import MaskRCNN
from detector_training.job.metrics import definitions_for

# Tiny images and few sampled RoIs: GluonCV's ResNet-18 FPN Mask R-CNN from scratch, CPU-sized.
MASK = {"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco",
        "train_splits": "instances_train2017", "val_splits": "instances_val2017", "short": "96",
        "max_size": "144", "rcnn_num_samples": "64", "lr": "0.005", "lr_base_batch_size": "2",
        "lr_warmup": "4", "epochs": "1", "batch_size": "2"}


def check_lines(out):
    """Every metric definition matches; the validation line has box and mask AP as fractions."""
    for definition in definitions_for("mask_rcnn"):
        assert re.search(definition["Regex"], out), definition["Name"]
    summary = re.search(r"\[Epoch 0\] summary: .*", out).group(0)
    for name in MaskRCNN().log_names:
        assert re.search(r" %s=[0-9.]+" % name, summary), name  # finite numbers
    line = re.search(r"validation: epoch=0 images=(\d+) time=\S+ mAP=(\S+) AP50=(\S+) "
                     r"mask_mAP=(\S+) mask_AP50=(\S+)", out)
    assert line, out[-3000:]
    images, box_map, box_ap50, mask_map, mask_ap50 = int(line.group(1)), *map(float, line.groups()[1:])
    assert 0.0 <= box_map <= box_ap50 <= 1.0 and 0.0 <= mask_map <= mask_ap50 <= 1.0
    return images


def test_one_rank_mask_job_writes_its_model_and_predict_draws_masks(job_dir, tmp_path):
    base = make_job(job_dir, MASK, n_train=4, n_test=3)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                            timeout=900, env=train_env(base))
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    assert check_lines(out) == 3
    assert re.search(r"validation: epoch=0 class=circle AP=[0-9.]+ mask_AP=[0-9.]+", out)
    model = os.path.join(base, "model")
    for name in ("model.params", "model-best.params", "model-symbol.json", "model-0000.params",
                 "classes.json", "config.json", "history.json", "training_curves.png"):
        assert os.path.isfile(os.path.join(model, name)), name
    validation = json.load(open(os.path.join(model, "validation.json")))
    assert set(validation["mask_per_class"]) == {"circle", "square", "triangle"}
    assert validation["images"] == 3 and 0.0 <= validation["mask_mAP"] <= 1.0
    history = json.load(open(os.path.join(model, "history.json")))
    assert {"rcnn_mask_loss", "mask_acc", "mask_fg_acc", "mAP", "mask_mAP"} <= set(history[0])
    table = open(os.path.join(model, "per_class_ap.md")).read()
    assert "| class | AP | mask AP |\n| --- | ---: | ---: |\n" in table
    config = json.load(open(os.path.join(model, "config.json")))
    assert config["no_wd"] is True and config["rcnn_num_samples"] == 64  # the family's preset

    # detector-predict on a validation image: masks in the JSON, at the image's size, drawn.
    image = os.path.join(base, "input", "data", "coco", "val2017", "000000100000.jpg")
    picture, detections = str(tmp_path / "masks.png"), str(tmp_path / "masks.json")
    drawn = subprocess.run([os.path.join(BIN, "detector-predict"), model, image, "--output", picture,
                            "--threshold", "0", "--json", detections],
                           capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    found = json.load(open(detections))
    width, height = Image.open(image).size
    assert found and all(d["mask"]["size"] == [height, width] for d in found)
    from detector_training.predict import draw

    boxes_only = str(tmp_path / "boxes.png")
    draw(image, [{k: v for k, v in d.items() if k != "mask"} for d in found], boxes_only)
    with_masks = np.asarray(Image.open(picture), dtype=np.int32)
    assert (with_masks != np.asarray(Image.open(boxes_only), dtype=np.int32)).any()


def test_two_horovod_ranks_train_and_validate_a_mask_job_together(job_dir):
    base = make_job(job_dir, dict(MASK, classes="circle,triangle"), n_train=5, n_test=3)
    out, validation = two_rank_job_finishes(base)
    assert check_lines(out) == 3  # both ranks' shards combined
    assert set(validation["per_class"]) == set(validation["mask_per_class"]) == {"circle", "triangle"}


@pytest.mark.timeout(2400)  # two jobs, each with its own deadlines (stop_mid_epoch_and_resume)
# Two ranks only: one rank's stop and resume is the same checkpoint code for every family
# (tests/end_to_end/test_job_contract.py runs it with one rank and with two).
@pytest.mark.parametrize("processes", [2])
def test_sigterm_mid_epoch_checkpoints_a_mask_job_and_the_next_run_resumes(job_dir, processes):
    base = make_job(job_dir, dict(MASK, epochs="1", batch_size=str(processes), log_interval="1",
                                  processes_per_host=str(processes)), n_train=24, n_test=2)
    # 24 images: enough steps left in epoch 0 when the stop arrives, even on a busy machine.
    _took, _out, result = stop_mid_epoch_and_resume(base, processes, 24 // processes, epochs=1)
    assert check_lines(result.stdout) == 2  # epoch 0 finished after the resume, both images validated
    assert os.path.isfile(os.path.join(base, "model", "model-symbol.json"))
