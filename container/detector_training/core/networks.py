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

from detector_training.errors import PretrainedWeightsError, one_line

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
                      builder=None, overrides=None, nms_threshold=None, **kwargs):
    """GluonCV model-zoo network ``name`` (or one of ``own_networks``: name -> builder), backbone
    weights offline first, classes reset to ``classes``, every parameter initialised on ``ctx``,
    its NMS threshold set when ``nms_threshold`` is given (``set_nms_threshold``).
    ``builder`` (module, function) and ``overrides``: see :func:`builder_overrides`."""
    from gluoncv.model_zoo import get_model

    kwargs = dict(kwargs, pretrained_base=pretrained_base)
    zero_skipped_rois()
    with offline_first_weights(pretrained_dirs), backbone_batchnorm(frozen=bool(pretrained_base)), \
            builder_overrides(builder, overrides):
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
    if nms_threshold is not None:
        set_nms_threshold(net, nms_threshold)
    return net


def set_nms_threshold(net, threshold):
    """GluonCV's ``set_nms`` with this IoU threshold, the network's other NMS settings kept (its
    R-CNN, SSD and YOLOv3 networks all have it; it clears the cached graph)."""
    extra = {"force_nms": net.force_nms} if hasattr(net, "force_nms") else {}
    net.set_nms(nms_thresh=threshold, nms_topk=net.nms_topk, post_nms=net.post_nms, **extra)


def zero_skipped_rois():
    """Make MXNet's ``contrib.ROIAlign`` give zeros for RoIs whose batch index is negative (once per
    process; the networks built afterwards trace the wrapped operator into their graphs).

    GluonCV's FPN networks pool each RoI from its pyramid level by giving the RoIs of the other
    levels batch index -1, then add the levels up. MXNet 1.9.1's GPU kernel writes zeros for those
    RoIs; its CPU kernel skips them and leaves whatever the memory held, so on CPU stale values
    (1e30, NaN) joined RoI features and a Mask R-CNN with two images per rank diverged at its
    first step. The wrapper selects zeros there (a select, so NaN garbage cannot leak through)."""
    import mxnet as mx

    for F in (mx.symbol, mx.ndarray):
        original = F.contrib.ROIAlign
        if getattr(original, "zeroes_skipped_rois", False):
            continue

        def roi_align(data, rois, *args, _original=original, _F=F, **kwargs):
            out = _original(data, rois, *args, **kwargs)
            valid = (_F.slice_axis(rois, axis=1, begin=0, end=1) >= 0).reshape((-1, 1, 1, 1))
            return _F.where(_F.broadcast_like(valid, out), out, _F.zeros_like(out))

        roi_align.zeroes_skipped_rois = True
        F.contrib.ROIAlign = roi_align


@contextlib.contextmanager
def builder_overrides(builder, overrides):
    """GluonCV's predefined networks hand every setting to one builder function as literals
    (``get_faster_rcnn(..., num_sample=512, ...)``), so a caller cannot change them through
    ``get_model``. While a network is built, the builder ``(module, function name)`` gets
    ``overrides`` in place of those settings: a dict of settings, or a function of the settings
    the preset passed that returns the changed ones (for settings that depend on the preset's own,
    such as SSD's anchor sizes); nothing changes when there are none."""
    if not builder or not overrides:
        yield
        return
    import importlib

    module = importlib.import_module(builder[0])
    original = getattr(module, builder[1])

    def build(*args, **kwargs):
        changed = overrides(args, kwargs) if callable(overrides) else overrides
        return original(*args, **dict(kwargs, **changed))

    setattr(module, builder[1], build)
    try:
        yield
    finally:
        setattr(module, builder[1], original)


@contextlib.contextmanager
def backbone_batchnorm(frozen):
    """GluonCV's predefined R-CNN networks build their ResNet backbones with frozen BatchNorm
    (``use_global_stats=True``), which suits ImageNet weights. From scratch the statistics must be
    learnt, or the backbone is an unnormalised deep net (a from-scratch Mask R-CNN diverged to NaN
    within a few steps): while a network is built with ``frozen`` false, GluonCV's ResNet
    constructors get ``use_global_stats=False`` (FPN backbones carry it into their symbol)."""
    if frozen:
        yield
        return
    from gluoncv.model_zoo import resnetv1b

    names = [n for n in resnetv1b.__all__ if n.startswith("resnet")]
    originals = {n: getattr(resnetv1b, n) for n in names}

    def trainable(constructor):
        def build(*args, **kwargs):
            kwargs["use_global_stats"] = False
            return constructor(*args, **kwargs)
        return build

    for name in names:
        setattr(resnetv1b, name, trainable(originals[name]))
    try:
        yield
    finally:
        for name in names:
            setattr(resnetv1b, name, originals[name])


def initialize_new_parameters(net):
    """Initialise every parameter not loaded yet: a layer that names its own initialiser keeps it;
    other weights get MSRA (He) init, other biases zeros, and BatchNorm's scale and variance
    ones, its shift and mean zeros.

    A parameter without an initialiser of its own receives the default as its *weight* initialiser
    (MXNet skips the name-based dispatch then), so MSRA alone would meet the 1-D parameters of
    GluonCV's SymbolBlocks: the FPN layers' biases ("Xavier initializer cannot be applied to vector
    P2_conv_lat_bias") and the BatchNorm of SSD's extra feature layers (``expand_trans_bn0_gamma``).
    """
    import mxnet as mx

    for name, param in net.collect_params().items():
        if param._data is not None:  # pylint: disable=protected-access  (backbone may be loaded)
            continue
        if param.init is None and name.endswith(("bias", "beta", "running_mean", "moving_mean")):
            param.initialize(init=mx.init.Zero())
        elif param.init is None and name.endswith(("gamma", "running_var", "moving_var")):
            param.initialize(init=mx.init.One())
        else:
            param.initialize(default_init=mx.init.MSRAPrelu(slope=0.0))


def load_parameters(net, path, ctx, ignore_extra=False):
    """``net.load_parameters``; None when the file loaded, else why it does not load into ``net``
    (damaged, or another network's or classes'), gluon's reason in one line, for the caller to
    say where the file came from."""
    import mxnet as mx

    try:
        net.load_parameters(path, ctx=ctx, ignore_extra=ignore_extra)
    except (mx.base.MXNetError, AssertionError, RuntimeError, ValueError, OSError) as exc:
        return one_line(exc)[:300]
    return None


def trainable_params(net):
    """The parameters the optimizer updates: GluonCV's ``collect_train_params`` where a network has
    one (R-CNN networks: their train_patterns), else all (parameters with grad_req 'null', such as
    BatchNorm statistics and YOLOv3's anchors, are left alone by the trainer)."""
    collect = getattr(net, "collect_train_params", None)
    return collect() if collect is not None else net.collect_params()


def apply_no_wd(net):
    """GluonCV's --no-wd: no weight decay on biases and BatchNorm beta/gamma."""
    net.collect_params(".*beta|.*gamma|.*bias").setattr("wd_mult", 0.0)
