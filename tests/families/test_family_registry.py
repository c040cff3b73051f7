"""The family registry (families/__init__.py): every network has one family, and the
configuration accepts exactly the registered networks."""


import pytest
from detector_training import families
from detector_training.job.config import from_hyperparameters
from detector_training.errors import ConfigError


def test_every_network_has_one_family_and_config_accepts_them_all():
    names = families.network_names()
    assert len(names) == len(set(names))
    for network in names:
        family = families.get(network)
        assert network in family.networks
        assert family.name == families.family_of(network)
        assert from_hyperparameters({"network": network, "dataset": "coco"}).family == family.name


def test_an_unknown_network_names_the_choices():
    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"network": "faster_rcnn_nope"})
    assert "faster_rcnn_resnet50_v1b_voc" in str(err.value)


def test_a_family_cannot_claim_another_familys_network():
    class Claimer(families.DetectorFamily):
        name = "claimer"
        networks = ("faster_rcnn_resnet50_v1b_voc",)

    with pytest.raises(ValueError, match="belong to family faster_rcnn"):
        families.register(Claimer)
    assert families.family_of("faster_rcnn_resnet50_v1b_voc") == "faster_rcnn"
    with pytest.raises(KeyError):
        families.get_by_name("claimer")


def test_importing_the_registry_and_the_job_schema_needs_no_mxnet_gluoncv_or_pycocotools():
    import subprocess
    import sys

    code = ("import sys, detector_training.job.config, detector_training.job.metrics; "
            "sys.exit(', '.join({'mxnet', 'gluoncv', 'pycocotools', 'matplotlib'} & set(sys.modules)) or None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
