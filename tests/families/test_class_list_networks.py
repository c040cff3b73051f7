"""The families' one model-zoo builder (DetectorFamily.build_network): a network whose GluonCV
builder takes the class list (SSD's and YOLOv3's ``*_custom``, declared in
``class_list_networks``) is built with the job's classes; the others are built as published and
their head reset to the classes."""

import gluoncv.model_zoo
import mxnet as mx
import pytest

from detector_training import families
from detector_training.job.config import TrainConfig

CLASSES = ("cat", "dog", "bird")


def test_each_declared_class_list_network_is_one_of_its_family_s_networks():
    declared = [(f, n) for f in families.all_families() for n in f.class_list_networks]
    assert {f.name for f, _ in declared} == {"ssd", "yolo3"}
    assert all(n in f.networks for f, n in declared)


@pytest.mark.parametrize("network, takes_classes", [
    ("yolo3_mobilenet0.25_custom", True), ("yolo3_mobilenet0.25_voc", False),
    ("ssd_512_mobilenet1.0_custom", True)])
def test_a_class_list_network_is_built_with_the_classes_by_its_own_builder(monkeypatch, network,
                                                                           takes_classes):
    calls = []
    real = gluoncv.model_zoo.get_model

    def recording(name, **kwargs):
        calls.append((name, kwargs.get("classes")))
        return real(name, **kwargs)

    monkeypatch.setattr(gluoncv.model_zoo, "get_model", recording)
    config = TrainConfig(network=network, dataset="custom", short=(128,), nms_threshold=0.3)
    net = families.get(network).build_network(config, CLASSES, 1, False, None, mx.cpu())
    assert tuple(net.classes) == CLASSES
    # (SSD's builders get their base network from the zoo too)
    assert [c for c in calls if c[0] == network] == [(network, list(CLASSES) if takes_classes else None)]
