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

_REGISTERED = {}  # family name -> DetectorFamily subclass, in registration order


def register(cls):
    """Register a DetectorFamily subclass (also usable as a class decorator); returns it.

    Raises ValueError when its name is taken by another class or one of its networks belongs
    to another family, so two families never claim the same network."""
    if not (isinstance(cls, type) and issubclass(cls, DetectorFamily)) or not cls.name:
        raise ValueError("%r is not a named DetectorFamily subclass" % (cls,))
    taken = {n: other.name for other in _REGISTERED.values() if other.name != cls.name
             for n in other.networks}
    clashes = sorted(set(cls.networks) & set(taken))
    if clashes:
        raise ValueError("family %s: networks %s belong to family %s" % (
            cls.name, ", ".join(clashes), taken[clashes[0]]))
    if _REGISTERED.get(cls.name, cls) is not cls:
        raise ValueError("a family named %s is registered already" % cls.name)
    _REGISTERED[cls.name] = cls
    return cls


def unregister(name):
    """Remove a registered family (for tests that register one of their own)."""
    _REGISTERED.pop(name, None)


for _builtin in (FasterRCNN, MaskRCNN, YOLOv3, SSD):
    register(_builtin)


def network_names():
    """Every registered network, family by family."""
    return tuple(n for cls in _REGISTERED.values() for n in cls.networks)


def family_of(network):
    """The name of the family that builds ``network``; KeyError for an unknown network."""
    for cls in _REGISTERED.values():
        if network in cls.networks:
            return cls.name
    raise KeyError(network)


def get(network):
    """The DetectorFamily instance that builds ``network``."""
    return get_by_name(family_of(network))


def get_by_name(name):
    return _REGISTERED[name]()


def all_families():
    return [cls() for cls in _REGISTERED.values()]


def build_network(config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
    """The configured network, built by its family (for tools and tests that need only that)."""
    return get(config.network).build_network(config, classes, per_rank_batch, pretrained_base,
                                             pretrained_dirs, ctx)
