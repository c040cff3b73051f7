"""Images without boxes (negatives): every format keeps them under skip_empty=false (VOC files
without <object>, COCO images without annotations, manifest lines with "annotations": []) and
leaves them out by default, counting them in the log; every family takes them to a training step
with finite losses and nothing to find in them (no positive targets)."""

import json
import os
import xml.etree.ElementTree as ET

import mxnet as mx
import numpy as np
import pytest

import ground_truth as gt
from detector_training import families
from detector_training.core.distributed import World
from detector_training.core.engine import MetricSums
from detector_training.data.readers.coco_format import annotation_file
from detector_training.data.common import Datasets
from detector_training.data.negatives import is_negative
from detector_training.data.generated.synthetic_coco import TRAIN_SPLIT, VAL_SPLIT, generate as generate_coco
from detector_training.data.generated.synthetic_voc import generate as generate_voc
from detector_training.job.config import from_hyperparameters

FASTER = {"network": "faster_rcnn_resnet18_v1b_voc", "short": "128", "max_size": "176"}
YOLO = {"network": "yolo3_mobilenet0.25_voc", "short": "64"}
MASK = {"network": "mask_rcnn_fpn_resnet18_v1b_coco", "short": "96", "max_size": "144"}
SSD = {"network": "ssd_512_mobilenet1.0_voc", "short": "64"}


def config(fmt, network, **hps):
    base = {"pretrained_base": "false", "num_workers": "0"}
    if fmt == "voc":
        base.update(dataset="custom", train_splits="2007_trainval", val_splits="2007_test")
    elif fmt == "coco":
        base.update(dataset="coco", train_splits=TRAIN_SPLIT, val_splits=VAL_SPLIT)
    else:
        base.update(dataset="manifest")
    return from_hyperparameters(dict(base, **network, **hps))


def voc_data(root):
    """A VOC tree whose first training image has no <object>."""
    generate_voc(root, train_2007=6, test_2007=2, train_2012=0, seed=3)
    year = os.path.join(root, "VOCdevkit", "VOC2007")
    first = open(os.path.join(year, "ImageSets", "Main", "trainval.txt")).read().split()[0]
    path = os.path.join(year, "Annotations", first + ".xml")
    tree = ET.parse(path)
    for obj in list(tree.getroot().iter("object")):
        tree.getroot().remove(obj)
    tree.write(path)
    return root


def coco_data(root):
    """COCO-format data whose first training image has no annotation."""
    generate_coco(root, n_train=6, n_val=2, seed=3)
    path = annotation_file(root, TRAIN_SPLIT)
    document = json.load(open(path))
    first = min(image["id"] for image in document["images"])
    document["annotations"] = [a for a in document["annotations"] if a["image_id"] != first]
    json.dump(document, open(path, "w"))
    return root


def manifest_data(root):
    """A manifest whose line 2 has "annotations": [] (root: the channels folder)."""
    gt.file_mode_job(os.path.dirname(os.path.dirname(root)), {}, count=6, validation=2)
    return root


DATA = {"voc": voc_data, "coco": coco_data, "manifest": manifest_data}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    made = {}
    for fmt, make in DATA.items():
        folder = tmp_path_factory.mktemp(fmt)
        made[fmt] = make(str(folder / "input" / "data") if fmt == "manifest" else str(folder))
    return made


@pytest.mark.parametrize("fmt", sorted(DATA))
def test_every_format_keeps_negatives_only_when_asked_and_counts_them(roots, fmt, caplog):
    network = MASK if fmt == "coco" else FASTER
    with caplog.at_level("INFO", "detector_training"):
        kept = families.get(network["network"]).read_datasets(
            config(fmt, network, skip_empty="false"), roots[fmt])
        left = families.get(network["network"]).read_datasets(config(fmt, network), roots[fmt])
    assert len(kept.train) == len(left.train) + 1
    negatives = [i for i in range(len(kept.train)) if is_negative(kept.train[i][1])]
    assert len(negatives) == 1
    placeholder = kept.train[negatives[0]][1]
    assert placeholder.shape[0] == 1 and (placeholder == -1).all()
    assert not any(is_negative(left.train[i][1]) for i in range(len(left.train)))
    assert "training: 1 of %d images have no box of the trained classes: kept as negatives" \
        % len(kept.train) in caplog.text
    assert "training: 1 of %d images have no box of the trained classes: left out " \
        "(skip_empty=true)" % len(kept.train) in caplog.text


def negative_batch_losses(root, fmt, network, with_positive):
    """One training step of ``network`` on a batch of the negative twice, or the negative and a
    positive, read from ``fmt`` data: (losses, the batch)."""
    c = config(fmt, network, skip_empty="false")
    family = families.get(c.network)
    datasets = family.read_datasets(c, root)
    negative = next(i for i in range(len(datasets.train)) if is_negative(datasets.train[i][1]))
    positive = next(i for i in range(len(datasets.train)) if i != negative)
    pair = datasets.train.subset([negative, positive if with_positive else negative])
    shard = Datasets(train=pair, val=None, classes=datasets.classes,
                     aspect_ratios=[datasets.aspect_ratios[negative]] * 2)
    net = family.build_network(c, datasets.classes, 2, False, None, mx.cpu())
    family.fit_to_data(net, c, datasets)
    data = family.train_loader(c, net, shard, World(), 2, 1, 0)
    batch = data.first_batch()
    family.materialize(net, batch, mx.cpu())
    sums = MetricSums()
    sums.add_step(family.make_step(net, c, mx.cpu())(batch))
    return MetricSums.values_from_flat(family.loss_names, sums.flat(family.loss_names)), batch


# The losses that only positives make: zero for a batch of negatives.
POSITIVE_ONLY = {"faster_rcnn": ("rpn_smoothl1_loss", "rcnn_smoothl1_loss"),
                 "yolo3": ("center_loss", "scale_loss", "cls_loss"),
                 "mask_rcnn": ("rpn_smoothl1_loss", "rcnn_smoothl1_loss", "rcnn_mask_loss"),
                 # GluonCV's multibox loss mines hard negatives in proportion to an image's positives
                 "ssd": ("cross_entropy", "smooth_l1")}


@pytest.mark.parametrize("fmt, network", [("manifest", FASTER), ("voc", YOLO), ("coco", MASK),
                                          ("coco", SSD)],
                         ids=["faster_rcnn-manifest", "yolo3-voc", "mask_rcnn-coco", "ssd-coco"])
def test_a_negative_reaches_a_training_step_with_finite_losses(roots, fmt, network):
    family = families.get(network["network"])
    losses, batch = negative_batch_losses(roots[fmt], fmt, network, with_positive=False)
    assert set(losses) == set(family.loss_names) and all(np.isfinite(v) for v in losses.values()), losses
    for name in POSITIVE_ONLY[family.name]:
        assert losses[name] == 0.0, (name, losses)  # nothing to find: no positive anchor or RoI
    if family.name in ("yolo3", "ssd"):
        assert batch[1].sum().asscalar() == 0  # objectness targets; SSD: every anchor background
    mixed, _ = negative_batch_losses(roots[fmt], fmt, network, with_positive=True)
    assert all(np.isfinite(v) for v in mixed.values()) and any(
        mixed[name] > 0 for name in POSITIVE_ONLY[family.name]), mixed


def test_a_negatives_placeholder_stays_a_placeholder_through_the_rcnn_transform():
    """GluonCV's transform scales and flips the placeholder row like a box; the R-CNN sampler
    would then take it (its coordinates no longer sum below -1) for an object."""
    from detector_training.data.negatives import KeepNegatives, negative_label
    from detector_training.families.faster_rcnn import clear_label

    c = config("manifest", FASTER)
    family = families.get(c.network)
    net = family.build_network(c, ("a", "b"), 1, False, None, mx.cpu())
    train_transform = family.transforms()[0]
    transform = KeepNegatives(train_transform(128, 176, net, ashape=net.ashape), clear_label)
    image = mx.nd.zeros((120, 160, 3), dtype="uint8")
    for _ in range(8):
        outputs = transform(image, negative_label())
        assert (np.asarray(outputs[1]) == -1).all()
        rpn_classes = outputs[2] if isinstance(outputs[2], list) else [outputs[2]]
        assert all((np.asarray(t) <= 0).all() for t in rpn_classes)  # background or ignored: no object
