"""Building the network, with backbone weights read offline first.

GluonCV fetches backbone weights through ``gluoncv.model_zoo.model_store.get_model_file``. While
a network is built we route that call to a local directory (the container maps the
``pretrained`` channel onto it): a file ``<name>-*.params`` or ``<name>.params`` there wins, and
GluonCV's own download is only the fallback. When neither works the error names both.
"""

import contextlib
import glob
import logging
import os

from .errors import PretrainedWeightsError

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


def faster_rcnn_resnet18_v1b_voc(pretrained_base=True, per_device_batch_size=1, **kwargs):
    """A small Faster R-CNN of ours (not in GluonCV's zoo): ResNet-18 v1b C4 backbone, 7x7 RoIAlign
    and 64 sampled RoIs, so CPU jobs and tests train in minutes. Same detector code as the others."""
    from gluoncv.model_zoo.rcnn.faster_rcnn.faster_rcnn import get_faster_rcnn
    from gluoncv.model_zoo.resnetv1b import resnet18_v1b
    from gluoncv.data import VOCDetection
    from mxnet.gluon import nn

    # With ImageNet weights BatchNorm stays frozen, as in GluonCV's networks; from scratch it
    # must learn its statistics, or the backbone is an unnormalised deep net.
    base = resnet18_v1b(pretrained=pretrained_base, dilated=False,
                        use_global_stats=bool(pretrained_base))
    features, top_features = nn.HybridSequential(), nn.HybridSequential()
    for layer in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3"):
        features.add(getattr(base, layer))
    top_features.add(base.layer4)
    return get_faster_rcnn(
        name="resnet18_v1b", dataset="voc", pretrained=False, features=features,
        top_features=top_features, classes=VOCDetection.CLASSES, short=600, max_size=1000,
        train_patterns="|".join([".*dense", ".*rpn", ".*down(2|3|4)_conv", ".*layers(2|3|4)_conv"])
        if pretrained_base else None,
        nms_thresh=0.3, nms_topk=400, post_nms=100, roi_mode="align", roi_size=(7, 7), strides=16,
        clip=None, rpn_channel=256, base_size=16, scales=(2, 4, 8, 16, 32), ratios=(0.5, 1, 2),
        alloc_size=(128, 128), rpn_nms_thresh=0.7, rpn_train_pre_nms=3000, rpn_train_post_nms=500,
        rpn_test_pre_nms=1500, rpn_test_post_nms=200, rpn_min_size=16,
        per_device_batch_size=per_device_batch_size, num_sample=64, pos_iou_thresh=0.5,
        pos_ratio=0.25, max_num_gt=100, **kwargs)


_OWN_NETWORKS = {"faster_rcnn_resnet18_v1b_voc": faster_rcnn_resnet18_v1b_voc}


def build_network(config, classes, per_rank_batch, pretrained_base, pretrained_dir, ctx):
    """The configured detector, its classes reset to ``classes``, every parameter initialised."""
    import mxnet as mx
    from gluoncv.model_zoo import get_model

    kwargs = dict(pretrained_base=pretrained_base, per_device_batch_size=per_rank_batch)
    with offline_first_weights(pretrained_dir):
        if config.network in _OWN_NETWORKS:
            net = _OWN_NETWORKS[config.network](**kwargs)
        else:
            net = get_model(config.network, pretrained=False, **kwargs)
    for param in net.collect_params().values():
        if param._data is None:  # pylint: disable=protected-access  (backbone may be loaded)
            # Layers that name their own initialiser keep it; the rest get MSRA (He) init.
            param.initialize(default_init=mx.init.MSRAPrelu(slope=0.0))
    if not pretrained_base:
        # GluonCV freezes the stem and first stage, which only makes sense for ImageNet weights.
        net.train_patterns = None
    if tuple(net.classes) != tuple(classes):
        net.reset_class(list(classes))
    net.collect_params().reset_ctx(ctx)
    return net


def apply_no_wd(net):
    """GluonCV's --no-wd: no weight decay on biases and BatchNorm beta/gamma."""
    net.collect_params(".*beta|.*gamma|.*bias").setattr("wd_mult", 0.0)
