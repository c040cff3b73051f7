"""The Faster R-CNN family: GluonCV's ``faster_rcnn_*`` networks (C4 and FPN) and a small
ResNet-18 one of ours for CPU runs.

Training uses GluonCV's FasterRCNNDefaultTrainTransform (with the RPN target generator) and
FasterRCNNTrainBatchify; the step computes the RPN and R-CNN losses and accuracies as GluonCV's
train_faster_rcnn.py; validation detects boxes and scores them with VOC07 mAP or COCO's metric.
Small images get RPN proposal counts capped at the anchors they have (``fit_to_data``).
"""

import logging

from detector_training.core.evaluation import detect_boxes, score_boxes
from detector_training.core.proposal_recall import recall, recalled_per_image
from detector_training.core.networks import build_zoo_network
from detector_training.core.step import TrainingStep
from detector_training.data.loaders import shard_loader, val_shard_loader
from detector_training.data.negatives import KeepNegatives
from detector_training.errors import ConfigError
from detector_training.families.base import DetectorFamily

LOG = logging.getLogger(__name__)

LOSS_NAMES = ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss")
METRIC_NAMES = ("rpn_acc", "rpn_l1", "rcnn_acc", "rcnn_l1")


class FasterRCNN(DetectorFamily):
    name = "faster_rcnn"
    cpu_runtime = "onnxruntime"  # faster than MXNet per benchmarks/serving.py (benchmarks/README.md)
    # GluonCV's model zoo names, and a small network of ours for CPU runs (OWN_NETWORKS).
    networks = (
        "faster_rcnn_resnet50_v1b_voc",
        "faster_rcnn_resnet101_v1d_voc",
        "faster_rcnn_resnet50_v1b_coco",
        "faster_rcnn_resnet101_v1d_coco",
        "faster_rcnn_fpn_resnet50_v1b_coco",
        "faster_rcnn_fpn_resnet101_v1d_coco",
        "faster_rcnn_resnet18_v1b_voc",
    )
    presets = {}  # GluonCV's train_faster_rcnn.py defaults are the datasets' own
    options = ("mixup", "final_fit")
    loss_names = LOSS_NAMES
    metric_names = METRIC_NAMES
    score_names = ("mAP", "AP50", "rpn_recall")
    # `make run`: the small network from scratch on small generated images, a few minutes on 2
    # cores. The learning rate, schedule, validation interval and epochs are the CPU-time
    # trade-off measured for it (benchmarks/README.md).
    demo_defaults = {
        "network": "faster_rcnn_resnet18_v1b_voc",
        "dataset": "custom",
        "pretrained_base": "false",
        "short": "128",
        "max_size": "200",
        "batch_size": "2",
        "epochs": "22",
        "lr": "0.02",
        "lr_mode": "cosine",
        "lr_warmup": "20",
        "lr_base_batch_size": "4",  # as the VOC presets, also for a generated COCO-format dataset
        "num_workers": "1",
        "log_interval": "20",
        "val_interval": "4",
        "seed": "7",
    }
    # The function GluonCV's predefined networks (and ours) hand their settings to.
    zoo_builder = ("gluoncv.model_zoo.rcnn.faster_rcnn.predefined_models", "get_faster_rcnn")

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        overrides = {"num_sample": config.rcnn_num_samples} if config.rcnn_num_samples else None
        return build_zoo_network(config.network, classes, pretrained_base, pretrained_dirs, ctx,
                                 own_networks=OWN_NETWORKS, builder=self.zoo_builder,
                                 overrides=overrides, nms_threshold=config.nms_threshold,
                                 per_device_batch_size=per_rank_batch)

    def fit_to_data(self, net, config, datasets):
        train_post, test_post = fit_proposals_to_images(net, config, datasets)
        self.set_proposal_counts(net, train_post, test_post)
        return {"rpn_post_nms": [train_post, test_post]}

    @staticmethod
    def set_proposal_counts(net, train_post, test_post):
        """Set the RPN's post-NMS proposal counts (training, testing) everywhere the network reads
        them."""
        net.rpn._train_post_nms = train_post  # pylint: disable=protected-access
        net.rpn._test_post_nms = test_post  # pylint: disable=protected-access
        net._rpn_test_post_nms = test_post  # pylint: disable=protected-access  (RoIs per test image)
        net.sampler._num_proposal = train_post  # pylint: disable=protected-access

    def transforms(self):
        """GluonCV's (train transform, train batchify, val transform) for this family, and how
        many arrays the val transform gives per image (image, label, scale)."""
        from gluoncv.data.batchify import FasterRCNNTrainBatchify
        from gluoncv.data.transforms.presets.rcnn import (FasterRCNNDefaultTrainTransform,
                                                          FasterRCNNDefaultValTransform)

        return (FasterRCNNDefaultTrainTransform, FasterRCNNTrainBatchify,
                FasterRCNNDefaultValTransform, 3)

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, num_workers):
        train_transform, batchify, _, _ = self.transforms()
        short, _, max_size = self.image_sizes(config, net)
        transform = KeepNegatives(train_transform(short if len(short) > 1 else short[0], max_size,
                                                  net, ashape=net.ashape, multi_stage=config.use_fpn),
                                  clear_label)
        return shard_loader(config, datasets, world, per_rank_batch, steps, transform,
                            batchify(net, 1), num_workers)

    def val_loader(self, config, net, datasets, world, num_workers):
        from gluoncv.data.batchify import Append, Tuple

        _, _, val_transform, fields = self.transforms()
        _, val_short, max_size = self.image_sizes(config, net)
        return val_shard_loader(datasets, world, val_transform(val_short, max_size),
                                Tuple(*[Append() for _ in range(fields)]), num_workers)

    def materialize(self, net, batch, ctx):
        from mxnet import autograd

        data, label = [(part[0] if isinstance(part, (list, tuple)) else part).as_in_context(ctx)
                       for part in batch[:2]]
        with autograd.train_mode():
            net(data, label[:, :, :4], label[:, :, 4:5])

    def make_step(self, net, config, ctx, amp_trainer=None):
        return FasterRCNNStep(net, config, ctx, amp_trainer=amp_trainer)

    def detect(self, net, loader, indices, ctx, datasets):
        """Each image's detections, with its RPN recall counts (core/proposal_recall.py)."""
        detections = detect_boxes(net, loader, indices, ctx)
        return list(zip(detections, recalled_per_image(net, val_ground_truth(loader), ctx)))

    def evaluate(self, config, datasets, gathered, scratch_dir):
        result = score_boxes(datasets, [[d for d, _ in rank] for rank in gathered], scratch_dir,
                             config.overlap_threshold)
        result["rpn_recall"] = recall([counts for rank in gathered for _, counts in rank])
        return result

    def export(self, config, classes, params_path, prefix, fitted):
        """A symbol/params pair for deployment, from a fresh network in inference mode, with the
        proposal counts the job trained and validated with."""
        import mxnet as mx

        net = self.build_network(config, classes, 1, False, None, mx.cpu())
        self.set_proposal_counts(net, *fitted["rpn_post_nms"])
        net.load_parameters(params_path, ctx=mx.cpu(), ignore_extra=True)  # training-only encoders
        net.hybridize()
        _, short, max_size = self.image_sizes(config, net)
        net(mx.nd.zeros((1, 3) + export_shape(net, short, max_size, fitted["rpn_post_nms"][1])))
        net.export(prefix, epoch=0)


def clear_label(outputs):
    """A negative's training sample (image, label, RPN targets...): the label's placeholder row,
    which the transform moved (a flip makes it a box of no size), is a placeholder again, so the
    R-CNN sampler never takes it for an object; the RPN's targets already say 'background'."""
    outputs[1][:] = -1


def val_ground_truth(loader):
    """(image, ground-truth corners in its pixels, 1.0) of each validation image, in loader
    order; padding rows and VOC's difficult objects (which no metric counts) left out."""
    for batch in loader:
        for x, y, _scale in zip(*batch):
            label = y.asnumpy()[0]
            keep = label[:, 4] >= 0
            if label.shape[-1] > 5:
                keep &= label[:, 5] < 1
            yield x, label[keep, :4], 1.0


def faster_rcnn_resnet18_v1b_voc(pretrained_base=True, per_device_batch_size=1, **kwargs):
    """A small Faster R-CNN of ours (not in GluonCV's zoo): ResNet-18 v1b split after stage 2
    (stride-8 features for the RPN and the RoIs), ResNet stage 3 as the per-RoI head on 8x8
    RoIAlign cells (no stage 4), 16 sampled RoIs per training image and 100 per test image,
    anchors of 32-80 pixels (scales 2-5 of 16, every 8 pixels) for small images of small objects,
    so CPU jobs and tests train in minutes. Same detector code as the others.

    Why this shape: the per-RoI head is most of the CPU work, hence few, small RoIs; anchors
    larger than 80 pixels would cross a 128-pixel image's border, so the RPN could never train
    them; stride-8 features see a 24-pixel object as 3 cells, enough to tell its shape; stage 4
    is left out because it cost more CPU time than it bought held-out mAP on the demo."""
    from gluoncv.model_zoo.rcnn.faster_rcnn import predefined_models as zoo  # zoo_builder's module
    from gluoncv.model_zoo.resnetv1b import resnet18_v1b
    from gluoncv.data import VOCDetection
    from mxnet.gluon import nn

    # With ImageNet weights BatchNorm stays frozen, as in GluonCV's networks; from scratch it
    # must learn its statistics, or the backbone is an unnormalised deep net. Its running
    # statistics (what validation uses) then average over ~100 steps, not MXNet's ~10, so that
    # the last few small batches do not swing held-out mAP.
    base = resnet18_v1b(pretrained=pretrained_base, dilated=False,
                        use_global_stats=bool(pretrained_base),
                        norm_kwargs=None if pretrained_base else {"momentum": 0.99})
    # Stride 8: a 24-pixel object spans 3 feature cells, not 1.5 (the circle/square corners).
    features, top_features = nn.HybridSequential(), nn.HybridSequential()
    for layer in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2"):
        features.add(getattr(base, layer))
    top_features.add(base.layer3)  # 8x8 RoIs -> 4x4 cells of 256 channels, average-pooled
    return zoo.get_faster_rcnn(
        name="resnet18_v1b", dataset="voc", pretrained=False, features=features,
        top_features=top_features, classes=VOCDetection.CLASSES, short=600, max_size=1000,
        train_patterns="|".join([".*dense", ".*rpn", ".*down(2|3)_conv", ".*layers(2|3)_conv"])
        if pretrained_base else None,
        nms_thresh=0.3, nms_topk=400, post_nms=100, roi_mode="align", roi_size=(8, 8), strides=8,
        clip=None, rpn_channel=256, base_size=16, scales=(2, 3, 4, 5), ratios=(0.5, 1, 2),
        alloc_size=(128, 128), rpn_nms_thresh=0.7, rpn_train_pre_nms=3000, rpn_train_post_nms=500,
        rpn_test_pre_nms=1500, rpn_test_post_nms=100, rpn_min_size=16,
        per_device_batch_size=per_device_batch_size, num_sample=16, pos_iou_thresh=0.5,
        pos_ratio=0.25, max_num_gt=100, **kwargs)


OWN_NETWORKS = {"faster_rcnn_resnet18_v1b_voc": faster_rcnn_resnet18_v1b_voc}


# --- region proposals for the image sizes of the job ------------------------------------------

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


def export_shape(net, short, max_size, test_post):
    """The (height, width) of the forward pass that traces the exported graph: a 4:3 image,
    unless it has fewer anchors than the ``test_post`` proposals the network keeps (capped at the
    job's smallest images, which can be wider); then short x max_size, which holds every resized
    image."""
    shape = (short, min(max_size, int(short * 4 / 3)))
    return shape if anchor_counter(net)(shape) >= test_post else (short, max_size)


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
    short/max_size and the smallest size that works. Returns the capped (train, test) counts,
    which the family sets on the network.
    """
    train_shorts, val_short, max_size = FasterRCNN().image_sizes(config, net)
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
            "set %s, or sample fewer regions with rcnn_num_samples."
            % _smallest_working_size(count, datasets.aspect_ratios, min(train_shorts), max_size,
                                     needed))
    train_post = min(rpn._train_post_nms, train_anchors)  # pylint: disable=protected-access
    test_post = min(rpn._test_post_nms, val_anchors)  # pylint: disable=protected-access
    if (train_post, test_post) != (rpn._train_post_nms, rpn._test_post_nms):  # pylint: disable=protected-access
        LOG.info("rpn proposals: post-NMS proposals capped at the anchors of the smallest images "
                 "(training %dx%d: %d anchors, validation %dx%d: %d anchors): training %d -> %d, "
                 "testing %d -> %d", train_hw[1], train_hw[0], train_anchors, val_hw[1], val_hw[0],
                 val_anchors, rpn._train_post_nms, train_post, rpn._test_post_nms, test_post)  # pylint: disable=protected-access
    return train_post, test_post


def _smallest_working_size(count, aspect_ratios, short, max_size, needed):
    """'short >= S' (and 'max_size >= M' where the cap binds) for the smallest S that works."""
    for candidate in range(short + 8 - short % 8, 4097, 8):
        size = max(max_size, candidate)
        if fewest_anchors(count, aspect_ratios, candidate, size)[0] >= needed:
            if size == max_size:
                return "short to at least %d (max_size=%d)" % (candidate, max_size)
            return "short to at least %d and max_size to at least %d" % (candidate, size)
    return "larger short and max_size"


class FasterRCNNStep(TrainingStep):
    """The four losses of GluonCV's ForwardBackwardTask, and its four metrics; forward and backward
    are the TrainingStep's. ``mix_ratio`` weights the losses under mixup. Mask R-CNN's step
    extends it."""

    def __init__(self, net, config, ctx, amp_trainer=None):
        import mxnet as mx

        super().__init__(net, ctx, amp_trainer)
        self.rpn_cls_loss = mx.gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
        self.rpn_box_loss = mx.gluon.loss.HuberLoss(rho=config.rpn_smoothl1_rho)
        self.rcnn_cls_loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.rcnn_box_loss = mx.gluon.loss.HuberLoss(rho=config.rcnn_smoothl1_rho)

    def load(self, batch):
        # GluonCV's R-CNN batchify: images, labels (and masks) as arrays, targets as 1-tuples.
        return [(part[0] if isinstance(part, (list, tuple)) else part).as_in_context(self.ctx)
                for part in batch]

    def forward(self, batch):
        """The four losses by name, and what the metrics are computed from."""
        data, label, *rpn_targets = self.load(batch)
        (cls_pred, box_pred, _roi, _samples, _matches, rpn_score, rpn_box, _anchors,
         cls_targets, box_targets, box_masks, _indices) = self.net(data, label[:, :, :4],
                                                                   label[:, :, 4:5])
        outputs = (rpn_score.squeeze(axis=-1), rpn_box, cls_pred, box_pred)
        rcnn_targets = (cls_targets, box_targets, box_masks)
        return self.box_losses(outputs, rpn_targets, rcnn_targets), (outputs, rpn_targets, rcnn_targets)

    def values(self, losses, outputs):
        """The logged losses and the box metrics; ``outputs``: (the heads' outputs, the RPN's
        targets, the R-CNN head's targets), as ``forward`` returned them."""
        return dict(super().values(losses, outputs), **self.box_metrics(*outputs))

    def box_losses(self, outputs, rpn_targets, rcnn_targets):
        """The RPN's and the R-CNN head's losses by name, each normalised by its positive
        samples."""
        rpn_score, rpn_box, cls_pred, box_pred = outputs
        rpn_cls_targets, rpn_box_targets, rpn_box_masks = rpn_targets
        cls_targets, box_targets, box_masks = rcnn_targets
        num_rpn_pos = (rpn_cls_targets >= 0).sum()
        rpn_loss1 = self.rpn_cls_loss(rpn_score, rpn_cls_targets, rpn_cls_targets >= 0) \
            * rpn_cls_targets.size / num_rpn_pos
        rpn_loss2 = self.rpn_box_loss(rpn_box, rpn_box_targets, rpn_box_masks) \
            * rpn_box.size / num_rpn_pos
        num_rcnn_pos = (cls_targets >= 0).sum()
        rcnn_loss1 = self.rcnn_cls_loss(cls_pred, cls_targets, cls_targets.expand_dims(-1) >= 0) \
            * cls_targets.size / num_rcnn_pos
        rcnn_loss2 = self.rcnn_box_loss(box_pred, box_targets, box_masks) \
            * box_pred.size / num_rcnn_pos
        return dict(zip(LOSS_NAMES, (rpn_loss1, rpn_loss2, rcnn_loss1, rcnn_loss2)))

    @staticmethod
    def box_metrics(outputs, rpn_targets, rcnn_targets):
        """The accuracy and L1 metrics of GluonCV's RPNAccMetric, RPNL1LossMetric, RCNNAccMetric
        and RCNNL1LossMetric, as (total, count) pairs by name."""
        import mxnet as mx

        rpn_score, rpn_box, cls_pred, box_pred = outputs
        rpn_cls_targets, rpn_box_targets, rpn_box_masks = rpn_targets
        cls_targets, box_targets, box_masks = rcnn_targets
        rpn_weight = (rpn_cls_targets >= 0)
        rpn_pred = mx.nd.sigmoid(rpn_score) >= 0.5
        rcnn_pred = mx.nd.argmax(cls_pred, axis=-1)
        return dict(zip(METRIC_NAMES, (
            (((rpn_pred == rpn_cls_targets) * rpn_weight).sum(), rpn_weight.sum()),
            ((rpn_box_masks * mx.nd.smooth_l1(rpn_box - rpn_box_targets, scalar=3)).sum(),
             rpn_box_masks.sum() / 4),
            ((rcnn_pred == cls_targets).sum(), cls_targets.size),
            ((box_masks * mx.nd.smooth_l1(box_pred - box_targets, scalar=1)).sum(),
             box_masks.sum() / 4))))
