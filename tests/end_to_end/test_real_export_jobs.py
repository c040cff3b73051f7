"""Whole jobs on the three real exports of ../shared/data/real-exports/, each unpacked as its tool
wrote it (every file, nothing subsampled) into the 'train' channel with no 'dataset' hyperparameter:
the job recognises the format, trains one epoch of the smallest network at a small image size,
and writes a model whose classes.json is the export's own class list; its data check counts what
the export's files hold, counted here from the files themselves (XML objects, COCO annotations,
YOLO label lines)."""

import glob
import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter

import pytest
import yaml

import exports
from conftest import TINY, real_export, run_rank_job

# YOLOv3 on mobilenet 0.25 at 64 px: the cheapest network and size to train and to validate;
# one epoch, two data workers beside the training process (its augmentation of the full-size
# photos, not the network, is most of an epoch here).
REAL = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
            network="yolo3_mobilenet0.25_voc", short="64", max_size="64", batch_size="16",
            epochs="1", num_workers="2", log_interval="50")


def labelimg_counts(root):
    """(class names in first-seen order, images, {class: objects}) of the labelImg export."""
    counts, order = Counter(), []
    for path in sorted(glob.glob(os.path.join(root, "annotations", "*.xml"))):
        for name in ET.parse(path).getroot().iter("name"):
            counts[name.text] += 1
            order += [name.text] if name.text not in order else []
    return sorted(order), len(os.listdir(os.path.join(root, "images"))), dict(counts)


def roboflow_coco_counts(root):
    """The categories in id order, the training images and objects per class of train/."""
    with open(os.path.join(root, "train", "_annotations.coco.json")) as handle:
        document = json.load(handle)
    names = {c["id"]: c["name"] for c in document["categories"]}
    counts = Counter(names[a["category_id"]] for a in document["annotations"])
    return [names[i] for i in sorted(names)], len(document["images"]), dict(counts)


def roboflow_yolo_counts(root):
    """data.yaml's names, the training images and the objects per class of train/labels."""
    with open(os.path.join(root, "data.yaml")) as handle:
        names = yaml.safe_load(handle)["names"]
    counts = Counter()
    for path in glob.glob(os.path.join(root, "train", "labels", "*.txt")):
        with open(path) as handle:
            counts.update(names[int(line.split()[0])] for line in handle if line.strip())
    return names, len(os.listdir(os.path.join(root, "train", "images"))), dict(counts)


# export -> (the format and what the job says it recognised, the counter of the export's files)
EXPORTS = {
    "raccoon-labelimg-voc": ("custom", "labelImg, XML in a separate save folder", labelimg_counts),
    "foosball-roboflow-coco": ("coco", "; ".join("Roboflow COCO (%s/_annotations.coco.json)" % split
                                                 for split in ("test", "train", "valid")),
                               roboflow_coco_counts),
    "aquarium-roboflow-yolov5": ("yolo", "Ultralytics YOLO (data.yaml)", roboflow_yolo_counts),
}


def checked_training(log):
    """(images, negatives, {class: objects}) of the data check's training line in ``log``."""
    found = re.search(r"data check: training: .*?, (\d+) images \((\d+) negatives\), objects per "
                      r"class: (.*)", log)
    assert found, log[-3000:]
    objects = dict((name, int(count)) for name, count in
                   (part.rsplit(" ", 1) for part in found.group(3).split(", ")))
    return int(found.group(1)), int(found.group(2)), objects


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_real_export_trains_one_epoch_with_its_own_classes(job_dir, name):
    fmt, recognised, count = EXPORTS[name]
    base = exports.job(str(job_dir), REAL, {"train": lambda d: real_export(name, d)})
    classes, images, objects = count(os.path.join(base, "input", "data", "train"))
    result = run_rank_job(base)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "dataset=%s recognised in channel 'train': %s" % (fmt, recognised) in result.stdout
    checked_images, _negatives, checked_objects = checked_training(result.stdout)
    assert checked_images == images
    assert checked_objects == objects
    model = os.path.join(base, "model")
    assert json.load(open(os.path.join(model, "classes.json"))) == classes
    assert json.load(open(os.path.join(model, "config.json")))["dataset"] == fmt
    assert glob.glob(os.path.join(model, "*.params"))
    assert json.load(open(os.path.join(model, "validation.json")))["images"] > 0
