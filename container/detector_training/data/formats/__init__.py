"""Data formats: one module each (voc.py, coco.py, manifest.py)."""

from detector_training.data.common import carve_validation, final_fit
from detector_training.data.formats.coco import _coco_datasets
from detector_training.data.formats.ground_truth import _manifest_datasets
from detector_training.data.formats.voc import _voc_datasets


def build_datasets(config, data_root, instances=False):
    """Training and validation datasets for the configured dataset kind; with ``val_fraction`` the
    validation images are carved from the training ones, with ``final_fit`` the training set is
    training plus validation images (shared by every family). ``instances``: COCO-format data with
    each object's mask (a family that segments asks for them)."""
    if config.dataset == "coco":
        datasets = _coco_datasets(config, data_root, instances)
    elif config.dataset == "manifest":
        datasets = _manifest_datasets(config, data_root)
    else:
        datasets = _voc_datasets(config, data_root)
    if config.val_fraction > 0:
        datasets = carve_validation(datasets, config.val_fraction, config.seed)
    if config.final_fit:
        datasets = final_fit(datasets)
    return datasets
