"""The family registry (families/__init__.py): every network has a family."""


import pytest
from detector_training import families
from detector_training.job.config import (
    FAMILY_NETWORKS,
    NETWORKS,
    family_of,
    from_hyperparameters,
)
from detector_training.errors import ConfigError


def test_every_network_has_a_family_and_config_names_them_all():
    assert set(NETWORKS) == {n for names in FAMILY_NETWORKS.values() for n in names}
    for network in NETWORKS:
        family = families.get(network)
        assert family.name == family_of(network)
        assert from_hyperparameters({"network": network, "dataset": "coco"}).family == family.name


def test_an_unknown_network_names_the_choices():
    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"network": "faster_rcnn_nope"})
    assert "faster_rcnn_resnet50_v1b_voc" in str(err.value)

