"""Whole jobs on COCO exports of labelling tools put in the 'train' channel as each tool wrote
them, without 'dataset' or paths named: CVAT "COCO 1.0" (one subset, validation carved by image
id), Roboflow "COCO" (train/ and valid/, two Horovod ranks), Label Studio "COCO" exported on
Windows, and a Mask R-CNN on CVAT's polygons. The export's class names reach classes.json."""

import json
import os
import re

import builtin_exports as bx
import ground_truth as gt
from conftest import TINY, run_rank_job, two_rank_job_finishes

EXPORT = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
              epochs="1", batch_size="2")


def job(base, build, hyperparameters=EXPORT):
    build(os.path.join(base, "input", "data", "train"))
    gt.write_config(base, hyperparameters, {"train": gt.FILE_CHANNEL})
    return base


def finished(base, result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return json.load(open(os.path.join(base, "model", "validation.json")))


def classes_of(base):
    return json.load(open(os.path.join(base, "model", "classes.json")))


def test_one_rank_trains_on_a_cvat_export_carving_validation_by_image_id(job_dir):
    base = job(str(job_dir), lambda root: bx.cvat_coco(root, {"default": bx.sample_objects(10)}))
    result = run_rank_job(base)
    validation = finished(base, result)
    assert "dataset=coco recognised in channel 'train': CVAT COCO 1.0" in result.stdout
    assert re.search(r"coco validation: CVAT COCO 1.0 .*instances_default.json\), 1 images carved",
                     result.stdout)
    assert classes_of(base) == ["dog", "cat"]
    assert validation["images"] == 1


def test_two_ranks_train_on_a_roboflow_export_with_its_valid_split(job_dir):
    base = job(str(job_dir), lambda root: bx.roboflow_coco(
        root, {"train": bx.sample_objects(6), "valid": bx.sample_objects(3), "test": bx.sample_objects(2)}))
    out, validation = two_rank_job_finishes(base)
    assert "Roboflow COCO" in out
    assert classes_of(base) == ["dog", "cat"]  # the placeholder category 0 is no class
    assert validation["images"] == 3


def test_one_rank_trains_on_a_label_studio_export_from_windows(job_dir):
    base = job(str(job_dir), lambda root: bx.label_studio_coco(root, bx.sample_objects(8),
                                                                windows=True))
    validation = finished(base, run_rank_job(base))
    assert classes_of(base) == ["cat", "dog"] and validation["images"] == 1


def test_a_mask_rcnn_trains_on_a_cvat_export_with_polygons(job_dir):
    # CPU-sized as test_mask_rcnn_jobs.py's: the ResNet-18 FPN network, tiny images, few RoIs.
    mask = dict(EXPORT, network="mask_rcnn_fpn_resnet18_v1b_coco", short="96", max_size="144",
                rcnn_num_samples="64", lr="0.005", lr_base_batch_size="2", lr_warmup="4")
    base = job(str(job_dir), lambda root: bx.cvat_coco(
        root, {"Train": bx.sample_objects(6), "Validation": bx.sample_objects(2)}, polygons=True), mask)
    validation = finished(base, run_rank_job(base))
    assert classes_of(base) == ["dog", "cat"] and validation["images"] == 2
