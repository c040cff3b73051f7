"""What every detector family needs to build a network: backbone weights read offline first,
initialisation of what was not loaded, the class list, no weight decay on biases.

GluonCV fetches backbone weights through ``gluoncv.model_zoo.model_store.get_model_file``. While
a network is built we route that call to a local directory (the container maps the
``pretrained`` channel onto it): a file ``<name>-*.params`` or ``<name>.params`` there wins, and
GluonCV's own download is only the fallback. When neither works the error names both.
"""

import contextlib
import glob
import logging
import os

from detector_training.errors import PretrainedWeightsError

LOG = logging.getLogger(__name__)


def local_weight_file(directories, name):
    """The first ``<dir>/<name>.params`` or ``<dir>/<name>-<hash>.params`` in ``directories``
    (one path or a list), else None."""
    if isinstance(directories, str) or directories is None:
        directories = [directories]
    for directory in directories:
        if not directory or not os.path.isdir(directory):
            continue
        matches = sorted(glob.glob(os.path.join(glob.escape(directory), name + "-*.params")))
        plain = os.path.join(directory, name + ".params")
        if os.path.isfile(plain):
            matches.insert(0, plain)
        if matches:
            return matches[0]
    return None


@contextlib.contextmanager
def offline_first_weights(directory, allow_download=True):
    from gluoncv.model_zoo import model_store

    original = model_store.get_model_file

    def get_model_file(name, tag=None, root=os.path.join("~", ".mxnet", "models")):
        local = local_weight_file(directory, name)
        if local:
            LOG.info("pretrained weights for %s: %s", name, local)
            return local
        where = " or ".join(directory) if isinstance(directory, (list, tuple)) and directory \
            else (directory or "(no pretrained directory given)")
        if not allow_download:
            raise PretrainedWeightsError(
                "backbone weights '%s' not found in %s (looked for %s-*.params)." % (name, where, name),
                "put the GluonCV file (e.g. resnet50_v1b-0ecdba34.params) into the 'pretrained' "
                "channel, or set pretrained_base=false to train the backbone from scratch.")
        LOG.info("no local weights for %s in %s; trying GluonCV's download", name, where)
        try:
            return original(name, tag=tag, root=root)
        except Exception as exc:  # any download failure ends in the same actionable error
            raise PretrainedWeightsError(
                "backbone weights '%s' not found in %s (looked for %s-*.params) and GluonCV's "
                "download failed (%s: %s)." % (name, where, name, type(exc).__name__, exc),
                "put the GluonCV file (e.g. resnet50_v1b-0ecdba34.params) into the 'pretrained' "
                "channel, or set pretrained_base=false to train the backbone from scratch.") from exc

    model_store.get_model_file = get_model_file
    # A stale .lock left by a killed download makes GluonCV wait 300 s per file; fail sooner.
    previous_timeout = os.environ.get("GLUON_MODEL_LOCK_TIMEOUT")
    os.environ["GLUON_MODEL_LOCK_TIMEOUT"] = "30"
    try:
        yield
    finally:
        model_store.get_model_file = original
        if previous_timeout is None:
            os.environ.pop("GLUON_MODEL_LOCK_TIMEOUT", None)
        else:
            os.environ["GLUON_MODEL_LOCK_TIMEOUT"] = previous_timeout


def build_zoo_network(name, classes, pretrained_base, pretrained_dirs, ctx, own_networks=None,
                      **kwargs):
    """GluonCV model-zoo network ``name`` (or one of ``own_networks``: name -> builder), backbone
    weights offline first, classes reset to ``classes``, every parameter initialised on ``ctx``."""
    from gluoncv.model_zoo import get_model

    kwargs = dict(kwargs, pretrained_base=pretrained_base)
    with offline_first_weights(pretrained_dirs):
        if own_networks and name in own_networks:
            net = own_networks[name](**kwargs)
        else:
            net = get_model(name, pretrained=False, **kwargs)
    initialize_new_parameters(net)
    if not pretrained_base and hasattr(net, "train_patterns"):
        # GluonCV freezes the stem and first stage, which only makes sense for ImageNet weights.
        net.train_patterns = None
    if tuple(net.classes) != tuple(classes):
        net.reset_class(list(classes))
    net.collect_params().reset_ctx(ctx)
    return net


def initialize_new_parameters(net):
    """Initialise every parameter not loaded yet: a layer that names its own initialiser keeps it;
    other weights get MSRA (He) init and other biases zeros.

    A parameter without an initialiser of its own receives the default as its *weight* initialiser
    (MXNet skips the name-based dispatch then), so MSRA alone would meet the 1-D biases of GluonCV's
    FPN layers (a SymbolBlock): "Xavier initializer cannot be applied to vector P2_conv_lat_bias".
    """
    import mxnet as mx

    for name, param in net.collect_params().items():
        if param._data is not None:  # pylint: disable=protected-access  (backbone may be loaded)
            continue
        if param.init is None and name.endswith("bias"):
            param.initialize(init=mx.init.Zero())
        else:
            param.initialize(default_init=mx.init.MSRAPrelu(slope=0.0))


def trainable_params(net):
    """The parameters the optimizer updates: GluonCV's ``collect_train_params`` where a network has
    one (R-CNN networks: their train_patterns), else all (parameters with grad_req 'null', such as
    BatchNorm statistics and YOLOv3's anchors, are left alone by the trainer)."""
    collect = getattr(net, "collect_train_params", None)
    return collect() if collect is not None else net.collect_params()


def apply_no_wd(net):
    """GluonCV's --no-wd: no weight decay on biases and BatchNorm beta/gamma."""
    net.collect_params(".*beta|.*gamma|.*bias").setattr("wd_mult", 0.0)
