"""The manifest format (a Ground Truth manifest): its options and what a family needs of it."""

import pytest

from detector_training.data import formats
from detector_training.errors import ConfigError
from detector_training.job.config import from_hyperparameters


def test_label_attribute_is_the_manifest_s_alone():
    assert formats.get("manifest").options == ("label_attribute",)
    assert from_hyperparameters({"dataset": "manifest", "label_attribute": "job"}).label_attribute \
        == "job"
    with pytest.raises(ConfigError, match="label_attribute is only used with dataset=manifest"):
        from_hyperparameters({"dataset": "coco", "label_attribute": "job"})


def test_a_mask_family_is_told_the_manifest_has_boxes_only():
    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"dataset": "manifest", "network": "mask_rcnn_fpn_resnet18_v1b_coco"})
    assert ("network=mask_rcnn_fpn_resnet18_v1b_coco trains on dataset=coco only, not "
            "dataset=manifest (a mask_rcnn network needs every object's mask; a Ground Truth "
            "bounding-box manifest has boxes only: train a faster_rcnn or yolo3 or ssd network on it)"
            in str(err.value))


def test_its_preset_is_a_custom_dataset_s():
    assert from_hyperparameters({"dataset": "manifest"}).resolved(1) == dict(
        from_hyperparameters({"dataset": "custom"}).resolved(1), dataset="manifest")
