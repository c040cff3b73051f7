"""Whole jobs on labelling tools' exports, each laid out as the tool writes it and put in the
channels a user would: no 'dataset' hyperparameter (the channel's content names it), the class
names from the data into classes.json, the validation split the export (or its channel) gives,
one rank for every layout and two Horovod ranks for one layout of each format."""

import json
import os

import pytest

import exports
from conftest import TINY, run_rank_job, two_rank_job_finishes

EXPORT = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
              epochs="1", batch_size="2", log_interval="1")

# layout -> (channels, format, what the recognition says, classes.json, validation images)
LAYOUTS = {
    "labelimg_beside": ({"train": lambda d: exports.labelimg_beside(d, count=8)}, "custom",
                        "labelImg, XML beside each image", list(exports.CLASSES), 1),
    "labelimg_separate": ({"train": lambda d: exports.labelimg_separate(d, count=6),
                           "validation": lambda d: exports.labelimg_separate(d, count=2, seed=4)},
                          "custom", "labelImg, XML in a separate save folder",
                          list(exports.CLASSES), 2),
    "cvat": ({"train": lambda d: exports.cvat_voc(d, subsets=(("Train", 6), ("Validation", 2)),
                                                  labels=("square", "circle"))},
             "custom", "CVAT Pascal VOC 1.1", ["square", "circle"], 2),
    "roboflow_voc": ({"train": lambda d: exports.roboflow_voc(d, splits=(("train", 6), ("valid", 2),
                                                                         ("test", 1)))},
                     "custom", "Roboflow Pascal VOC", list(exports.CLASSES), 2),
    "ultralytics": ({"train": lambda d: exports.ultralytics_yolo(d, train=6, val=2)}, "yolo",
                    "Ultralytics YOLO (shapes.yaml)", list(exports.CLASSES), 2),
    "roboflow_yolo": ({"train": lambda d: exports.roboflow_yolo(d, splits=(("train", 6),
                                                                          ("valid", 2)),
                                                               negatives=(1,))},
                      "yolo", "Roboflow YOLOv8 (data.yaml)", list(exports.CLASSES), 2),
}


def check_job(base, out, layout):
    _channels, name, found, classes, val_images = LAYOUTS[layout]
    assert "dataset=%s recognised in channel 'train': %s" % (name, found) in out
    model = os.path.join(base, "model")
    assert json.load(open(os.path.join(model, "classes.json"))) == classes
    assert json.load(open(os.path.join(model, "config.json")))["dataset"] == name
    validation = json.load(open(os.path.join(model, "validation.json")))
    assert validation["images"] == val_images
    return validation


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_one_rank_trains_on_each_export(job_dir, layout):
    base = exports.job(str(job_dir), EXPORT, LAYOUTS[layout][0])
    result = run_rank_job(base)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    check_job(base, result.stdout, layout)


@pytest.mark.parametrize("layout", ["cvat", "roboflow_yolo"])
def test_two_ranks_train_on_an_export_of_each_format(job_dir, layout):
    base = exports.job(str(job_dir), EXPORT, LAYOUTS[layout][0])
    out, _ = two_rank_job_finishes(base)
    check_job(base, out, layout)
