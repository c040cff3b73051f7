"""Whole COCO-format jobs with their own categories: one rank through `train`, two Horovod ranks;
validation on every rank, COCO mAP and AP50 in the lines the metric definitions match."""

import json
import os
import re
import subprocess

from conftest import BIN, make_job, two_rank_job_finishes

from detector_training.job.metrics import definitions_for

COCO = {"dataset": "coco", "train_splits": "instances_train2017", "val_splits": "instances_val2017",
        "epochs": "1", "batch_size": "2"}


def check_metric_lines(out):
    for definition in definitions_for("faster_rcnn"):
        assert re.search(definition["Regex"], out), definition["Name"]
    headline = re.search(r"validation: epoch=0 images=(\d+) time=\S+ mAP=(\S+) AP50=(\S+)", out)
    assert headline, out[-3000:]
    images, coco_map, ap50 = int(headline.group(1)), float(headline.group(2)), float(headline.group(3))
    assert 0.0 <= coco_map <= ap50 <= 1.0  # fractions, AP at 0.5:0.95 never above AP at 0.5
    return images


def test_one_rank_coco_job_with_its_own_categories(job_dir):
    base = make_job(job_dir, COCO, n_train=6, n_test=3)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, SAGEMAKER_BASE_DIR=base, PYTHONUNBUFFERED="1"))
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    assert check_metric_lines(out) == 3
    model = os.path.join(base, "model")
    assert json.load(open(os.path.join(model, "classes.json"))) == ["circle", "square", "triangle"]
    validation = json.load(open(os.path.join(model, "validation.json")))
    assert set(validation["per_class"]) == {"circle", "square", "triangle"}
    assert 0.0 <= validation["mAP"] <= validation["AP50"] <= 1.0 and validation["images"] == 3
    for name in ("circle", "square", "triangle"):
        assert re.search(r"validation: epoch=0 class=%s AP=[0-9.]+" % name, out)


def test_two_horovod_ranks_train_and_validate_a_coco_job_together(job_dir):
    base = make_job(job_dir, dict(COCO, classes="square,triangle"), n_train=5, n_test=3)
    out, validation = two_rank_job_finishes(base)
    assert check_metric_lines(out) == 3  # both ranks' shards combined
    assert set(validation["per_class"]) == {"square", "triangle"} and validation["images"] == 3
