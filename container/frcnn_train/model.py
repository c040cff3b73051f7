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

from .errors import ConfigError, PretrainedWeightsError

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
    """A small Faster R-CNN of ours (not in GluonCV's zoo): ResNet-18 v1b C4 backbone, 4x4 RoIAlign,
    32 sampled RoIs per training image and 100 per test image, so CPU jobs and tests train in
    minutes. Same detector code as the others.

    The per-RoI head (ResNet stage 4 on every RoI) is most of the work on CPU: with 7x7 RoIs and 64
    samples a 128-pixel image trained at 1.9 images/s on 2 cores, with 4x4 and 32 at 5.4, and the
    detector learned as much per image (the learning demo, issue 15)."""
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
        nms_thresh=0.3, nms_topk=400, post_nms=100, roi_mode="align", roi_size=(4, 4), strides=16,
        clip=None, rpn_channel=256, base_size=16, scales=(2, 4, 8, 16, 32), ratios=(0.5, 1, 2),
        alloc_size=(128, 128), rpn_nms_thresh=0.7, rpn_train_pre_nms=3000, rpn_train_post_nms=500,
        rpn_test_pre_nms=1500, rpn_test_post_nms=100, rpn_min_size=16,
        per_device_batch_size=per_device_batch_size, num_sample=32, pos_iou_thresh=0.5,
        pos_ratio=0.25, max_num_gt=100, **kwargs)


_OWN_NETWORKS = {"faster_rcnn_resnet18_v1b_voc": faster_rcnn_resnet18_v1b_voc}


def build_network(config, classes, per_rank_batch, pretrained_base, pretrained_dir, ctx):
    """The configured detector, its classes reset to ``classes``, every parameter initialised."""
    from gluoncv.model_zoo import get_model

    kwargs = dict(pretrained_base=pretrained_base, per_device_batch_size=per_rank_batch)
    with offline_first_weights(pretrained_dir):
        if config.network in _OWN_NETWORKS:
            net = _OWN_NETWORKS[config.network](**kwargs)
        else:
            net = get_model(config.network, pretrained=False, **kwargs)
    initialize_new_parameters(net)
    if not pretrained_base:
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


# --- region proposals for the image sizes of the job (Faster R-CNN) ---------------------------

def resized_shape(width, height, short, max_size):
    """(height, width) after GluonCV's resize_short_within(short, max_size)."""
    small, large = min(width, height), max(width, height)
    scale = float(short) / small
    if round(scale * large) > max_size:
        scale = float(max_size) / large
    return int(round(height * scale)), int(round(width * scale))


def anchor_counter(net):
    """(height, width) -> number of RPN anchors the network has for an image of that size, from
    its feature symbol's inferred shapes (no computation)."""
    import mxnet as mx

    features = net.features(mx.sym.var("data"))
    features = list(features) if isinstance(features, (list, tuple)) else [features]
    generators = net.rpn.anchor_generator
    generators = list(generators) if isinstance(generators, mx.gluon.nn.HybridSequential) \
        else [generators]
    depths = [g.num_depth for g in generators]
    # FPN: the RPN uses the first len(generators) feature maps (P2..P6).
    symbol = mx.sym.Group(features[:len(depths)])
    cache = {}

    def count(shape):
        if shape not in cache:
            _, out_shapes, _ = symbol.infer_shape(data=(1, 3) + tuple(shape))
            cache[shape] = sum(d * s[2] * s[3] for d, s in zip(depths, out_shapes))
        return cache[shape]

    return count


def smallest_images(aspect_ratios, short, max_size, keep=3):
    """The few resized (height, width) shapes of smallest area for these width/height ratios."""
    shapes = {resized_shape(1000.0 * r, 1000.0, short, max_size) for r in set(aspect_ratios or [1.0])}
    return sorted(shapes, key=lambda hw: (hw[0] * hw[1], hw))[:keep]


def fewest_anchors(count, aspect_ratios, short, max_size):
    """(anchors, (height, width)) of the image with the fewest anchors at this size."""
    return min((count(hw), hw) for hw in smallest_images(aspect_ratios, short, max_size))


def fit_proposals_to_images(net, config, datasets):
    """Cap the RPN's fixed post-NMS proposal counts at the anchors the job's smallest images have.

    GluonCV's networks keep a fixed number of proposals (e.g. 2000 in training, 300 in testing)
    and MXNet fails deep inside when an image has fewer anchors ("Invalid end for end=2000 as
    axis_size is 720"). Small images therefore get counts capped at what the smallest training and
    validation images (given the datasets' aspect ratios) have; the cap is logged. When training
    images are too small even for the RoIs the network samples per image, a ConfigError names
    short/max_size and the smallest size that works. Returns the capped (train, test) counts.
    """
    from .datasets import image_sizes

    train_shorts, val_short, max_size = image_sizes(config, net)
    count = anchor_counter(net)
    train_anchors, train_hw = fewest_anchors(count, datasets.aspect_ratios, min(train_shorts), max_size)
    val_anchors, val_hw = fewest_anchors(count, datasets.val_aspect_ratios or datasets.aspect_ratios,
                                         val_short, max_size)
    rpn, needed = net.rpn, int(net._num_sample)  # pylint: disable=protected-access
    if train_anchors < needed:
        raise ConfigError(
            "short=%s max_size=%d are too small for %s: the smallest training image becomes %dx%d "
            "pixels, which gives its RPN %d anchors, fewer than the %d regions the network samples "
            "per image." % (",".join(map(str, train_shorts)), max_size, config.network,
                            train_hw[1], train_hw[0], train_anchors, needed),
            "set %s." % _smallest_working_size(count, datasets.aspect_ratios, min(train_shorts),
                                                max_size, needed))
    train_post = min(rpn._train_post_nms, train_anchors)  # pylint: disable=protected-access
    test_post = min(rpn._test_post_nms, val_anchors)  # pylint: disable=protected-access
    if (train_post, test_post) != (rpn._train_post_nms, rpn._test_post_nms):  # pylint: disable=protected-access
        LOG.info("rpn proposals: post-NMS proposals capped at the anchors of the smallest images "
                 "(training %dx%d: %d anchors, validation %dx%d: %d anchors): training %d -> %d, "
                 "testing %d -> %d", train_hw[1], train_hw[0], train_anchors, val_hw[1], val_hw[0],
                 val_anchors, rpn._train_post_nms, train_post, rpn._test_post_nms, test_post)  # pylint: disable=protected-access
    set_proposal_counts(net, train_post, test_post)
    return train_post, test_post


def set_proposal_counts(net, train_post, test_post):
    """Set the RPN's post-NMS proposal counts (training, testing) everywhere the network reads them."""
    net.rpn._train_post_nms = train_post  # pylint: disable=protected-access
    net.rpn._test_post_nms = test_post  # pylint: disable=protected-access
    net._rpn_test_post_nms = test_post  # pylint: disable=protected-access  (RoIs per test image)
    net.sampler._num_proposal = train_post  # pylint: disable=protected-access


def _smallest_working_size(count, aspect_ratios, short, max_size, needed):
    """'short >= S' (and 'max_size >= M' where the cap binds) for the smallest S that works."""
    for candidate in range(short + 8 - short % 8, 4097, 8):
        size = max(max_size, candidate)
        if fewest_anchors(count, aspect_ratios, candidate, size)[0] >= needed:
            if size == max_size:
                return "short to at least %d (max_size=%d)" % (candidate, max_size)
            return "short to at least %d and max_size to at least %d" % (candidate, size)
    return "larger short and max_size"


def apply_no_wd(net):
    """GluonCV's --no-wd: no weight decay on biases and BatchNorm beta/gamma."""
    net.collect_params(".*beta|.*gamma|.*bias").setattr("wd_mult", 0.0)
