"""Detector families: one module per family says how to build, feed, step and validate its
networks (see base.py for the seam). ``get(network)`` returns the family that builds a network."""

import importlib

from detector_training.job.config import family_of

FAMILIES = {"faster_rcnn": ("detector_training.families.faster_rcnn", "FasterRCNN"),
            "mask_rcnn": ("detector_training.families.mask_rcnn", "MaskRCNN"),
            "yolo3": ("detector_training.families.yolo3", "YOLOv3")}


def get(network):
    """The DetectorFamily instance for a network name (a model-zoo name in FAMILY_NETWORKS)."""
    module_name, class_name = FAMILIES[family_of(network)]
    return getattr(importlib.import_module(module_name), class_name)()


def all_families():
    return [get_by_name(name) for name in FAMILIES]


def get_by_name(name):
    module_name, class_name = FAMILIES[name]
    return getattr(importlib.import_module(module_name), class_name)()


def build_network(config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
    """The configured network, built by its family (for tools and tests that need only that)."""
    return get(config.network).build_network(config, classes, per_rank_batch, pretrained_base,
                                             pretrained_dirs, ctx)
