"""Detector families: one module per family says what the family is (its networks, presets per
data style, whether it needs masks, options, loss, metric and score names, demo defaults) and how
to build, feed, step and validate its networks (see base.py for the seam).

The registry maps each family's networks to it. The built-in families are registered here;
``register(cls)`` adds one defined anywhere else, after which the job's configuration accepts its
networks and the ordinary job trains them. Importing this package needs neither mxnet nor
gluoncv (the SageMaker-SDK side reads the names it declares).
"""

from detector_training.families.base import DetectorFamily
from detector_training.families.faster_rcnn import FasterRCNN
from detector_training.families.mask_rcnn import MaskRCNN
from detector_training.families.ssd import SSD
from detector_training.families.yolo3 import YOLOv3
from detector_training.registry import Registry



def _networks_free(cls, others):
    """Two families never claim the same network."""
    taken = {n: other.name for other in others for n in other.networks}
    clashes = sorted(set(cls.networks) & set(taken))
    if clashes:
        raise ValueError("family %s: networks %s belong to family %s" % (
            cls.name, ", ".join(clashes), taken[clashes[0]]))


_REGISTRY = Registry(DetectorFamily, "family", check=_networks_free)
register, unregister = _REGISTRY.register, _REGISTRY.unregister

for _builtin in (FasterRCNN, MaskRCNN, YOLOv3, SSD):
    register(_builtin)


def network_names():
    """Every registered network, family by family."""
    return tuple(n for cls in _REGISTRY.classes() for n in cls.networks)


def family_of(network):
    """The name of the family that builds ``network``; KeyError for an unknown network."""
    for cls in _REGISTRY.classes():
        if network in cls.networks:
            return cls.name
    raise KeyError(network)


def get(network):
    """The DetectorFamily instance that builds ``network``."""
    return get_by_name(family_of(network))


def get_by_name(name):
    return _REGISTRY.get(name)


def all_families():
    return _REGISTRY.instances()


def build_network(config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
    """The configured network, built by its family (for tools and tests that need only that)."""
    return get(config.network).build_network(config, classes, per_rank_batch, pretrained_base,
                                             pretrained_dirs, ctx)
