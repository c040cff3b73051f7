"""The YOLOv3 family: GluonCV's ``yolo3_darknet53_*``, ``yolo3_mobilenet1.0_*`` and
``yolo3_mobilenet0.25_*`` networks (the last sized for CPU tests and demos).

Training uses GluonCV's YOLO3DefaultTrainTransform, whose target generator needs the network's
anchors, offsets and feature-map shapes: they come from a copy of the network built on the CPU
for the loaders (the training network stays where it is). The batch is GluonCV's
``Tuple(Stack() x6, Pad(-1))`` (image, objectness, centers, scales, weights, class targets, and the
padded ground-truth boxes). The network computes its four losses itself in training mode when
given the targets (objectness, center, scale, class). Multi-scale training draws a new square
input size every ``multi_scale_interval`` batches, from a generator seeded by (seed, epoch, rank,
batch group), so a resumed epoch sees the same sizes. Validation resizes to the square
``short`` x ``short`` (GluonCV's YOLO3DefaultValTransform) and maps the boxes back to the original
image, so VOC07 mAP and COCO's metric both score in original pixels.
"""

import logging

import numpy as np

from detector_training.core.evaluation import score_boxes
from detector_training.core.step import TrainingStep
from detector_training.data.loaders import shard_loader, val_shard_loader
from detector_training.data.negatives import KeepNegatives
from detector_training.errors import ConfigError
from detector_training.families.base import DetectorFamily

LOG = logging.getLogger(__name__)

LOSS_NAMES = ("obj_loss", "center_loss", "scale_loss", "cls_loss")
DEFAULT_SIZE = 416  # GluonCV's --data-shape
# GluonCV's train_yolo3.py (its published models: global batch 64, 200 epochs on VOC with decay at
# 160,180 and 4 warm-up epochs, about 1000 iterations; 280 on COCO with decay at 220,250).
_VOC_PRESET = dict(epochs=200, lr=0.001, lr_decay_epoch=(160, 180), lr_warmup=1000, wd=5e-4,
                   lr_base_batch_size=64)
STRIDE = 32  # the coarsest feature stride: input sizes are multiples of it


def multi_scale_sizes(size):
    """Training sizes for multi-scale: the multiples of 32 from 0.75x to 1.5x ``size`` (GluonCV's
    320..608 for 416)."""
    low = int(np.ceil(0.75 * size / STRIDE)) * STRIDE
    high = int(np.floor(1.5 * size / STRIDE)) * STRIDE
    return tuple(range(max(low, STRIDE), high + 1, STRIDE))


BACKBONES = ("darknet53", "mobilenet1.0", "mobilenet0.25")


class YOLOv3(DetectorFamily):
    name = "yolo3"
    networks = tuple("yolo3_%s_%s" % (base, data) for base in BACKBONES
                     for data in ("voc", "coco", "custom"))  # mobilenet0.25: CPU tests and demos
    class_list_networks = tuple("yolo3_%s_custom" % base for base in BACKBONES)
    presets = {"voc": _VOC_PRESET,
               "coco": dict(_VOC_PRESET, epochs=280, lr_decay_epoch=(220, 250), lr_warmup=3600)}
    options = ("label_smooth", "multi_scale", "mixup", "final_fit")
    loss_names = LOSS_NAMES
    metric_names = ()
    # GluonCV's train_yolo3.py: mixing ratios from Beta(1.5, 1.5); the target generator weights
    # each box by its image's ratio, so the losses need no further weight.
    mixup_draw = ("beta", 1.5, 1.5)
    mixup_loss_weight = 1.0
    test_resize = "square"  # as SquareValTransform: the short x short square
    cpu_runtime = "onnxruntime"  # faster than MXNet per benchmarks/serving.py (benchmarks/README.md)
    # `make run-yolo` (make run NETWORK=yolo3_mobilenet0.25_voc): the smallest YOLOv3 from scratch
    # at 128 pixels on the demo's images, with a warm-up, cosine decay and clipped gradients
    # (without clipping lr 0.01 at batch 8 diverges); benchmarks/learning.py measures it. From
    # scratch it needs the epochs: 60 left it near 0.16 AP50, still rising; 120 passed 0.3.
    demo_defaults = {
        "network": "yolo3_mobilenet0.25_voc",
        "short": "128",
        "max_size": "128",
        "batch_size": "8",
        "epochs": "120",
        "lr": "0.004",
        "lr_base_batch_size": "8",
        "lr_mode": "cosine",
        "lr_warmup": "30",
        "clip_gradient": "5",
        "val_interval": "5",
        "log_interval": "20",
    }

    def default_size(self, network):
        return DEFAULT_SIZE

    def check_config(self, config):
        short = config.short or (DEFAULT_SIZE,)
        if len(short) != 1 or short[0] % STRIDE:
            raise ConfigError(
                "short=%s: a YOLOv3 network (%s) takes one square input size, a multiple of %d."
                % (",".join(map(str, short)), config.network, STRIDE),
                "set short to one multiple of 32 (e.g. 416, or 128 on CPU); for random sizes set "
                "multi_scale=true.")
        if config.multi_scale and len(multi_scale_sizes(short[0])) < 2:
            raise ConfigError("multi_scale=true with short=%d leaves no sizes to choose from."
                              % short[0], "set short to 64 or more.")

    def image_sizes(self, config, net):
        """((training sizes), validation size, the same as max size): square inputs."""
        self.check_config(config)
        size = (config.short or (DEFAULT_SIZE,))[0]
        train = multi_scale_sizes(size) if config.multi_scale else (size,)
        return train, size, size

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, num_workers):
        import mxnet as mx
        from gluoncv.data.batchify import Pad, Stack, Tuple
        from gluoncv.data.transforms.presets.yolo import YOLO3DefaultTrainTransform

        sizes, _, _ = self.image_sizes(config, net)
        # The transform runs the network once per size to learn its anchors and feature-map
        # shapes; a CPU copy does that, so the training network is never moved.
        cpu_net = self.build_network(config, datasets.classes, 1, False, None, mx.cpu())
        transforms = [KeepNegatives(YOLO3DefaultTrainTransform(s, s, cpu_net, mixup=config.mixup),
                                    clear_targets) for s in sizes]
        batchify = Tuple(*([Stack() for _ in range(6)] + [Pad(axis=0, pad_val=-1)]))
        if len(transforms) == 1:
            transforms = transforms[0]
        else:
            LOG.info("multi-scale training: sizes %s, a new size every %d batches",
                     ",".join(map(str, sizes)), config.multi_scale_interval)
        return shard_loader(config, datasets, world, per_rank_batch, steps, transforms, batchify,
                            num_workers, scale_interval=config.multi_scale_interval)

    def val_loader(self, config, net, datasets, world, num_workers):
        from gluoncv.data.batchify import Append, Tuple
        from gluoncv.data.transforms.presets.yolo import YOLO3DefaultValTransform

        _, size, _ = self.image_sizes(config, net)
        return val_shard_loader(datasets, world, SquareValTransform(size, YOLO3DefaultValTransform),
                                Tuple(*[Append() for _ in range(3)]), num_workers)

    def materialize(self, net, batch, ctx):
        from mxnet import autograd

        with autograd.train_mode():  # raw predictions: every parameter gets its shape
            net(batch[0].as_in_context(ctx))

    def make_step(self, net, config, ctx, amp_trainer=None):
        # Set here, after a start model may have reset the classes (which makes a new merger).
        net._target_generator._label_smooth = bool(config.label_smooth)  # pylint: disable=protected-access
        return YOLOStep(net, ctx, amp_trainer)

    def detect(self, net, loader, indices, ctx, datasets):
        return detect_original_boxes(net, loader, indices, ctx)

    def evaluate(self, config, datasets, gathered, scratch_dir):
        return score_boxes(datasets, gathered, scratch_dir, config.overlap_threshold)

    def export(self, config, classes, params_path, prefix, fitted):
        import mxnet as mx

        net = self.build_network(config, classes, 1, False, None, mx.cpu())
        net.load_parameters(params_path, ctx=mx.cpu(), ignore_extra=True)
        net.hybridize()
        _, size, _ = self.image_sizes(config, net)
        net(mx.nd.zeros((1, 3, size, size)))
        net.export(prefix, epoch=0)


def clear_targets(outputs):
    """A negative's training sample (image, objectness, center, scale, weights, class targets,
    boxes): no object anywhere. GluonCV's random expansion moves the placeholder row to valid
    coordinates, and its target generator then gives it an anchor."""
    _image, objectness, center, scale, weights, class_targets, boxes = outputs
    for target in (objectness, center, scale, weights):
        target[:] = 0
    class_targets[:] = -1
    boxes[:] = -1


class SquareValTransform:
    """A square-input family's GluonCV validation transform (``preset``, the family's own:
    YOLO3DefaultValTransform, SSDDefaultValTransform; both resize to the square and normalise),
    with the label kept in original pixels and the per-coordinate scale back to them:
    (image, label, [sx, sy, sx, sy])."""

    def __init__(self, size, preset):
        self.size = size
        self.preset = preset

    def __call__(self, src, label):
        import mxnet as mx

        height, width = src.shape[:2]
        img, _ = self.preset(self.size, self.size)(src, label)
        scale = [width / float(self.size), height / float(self.size)] * 2
        return img, label.astype("float32"), mx.nd.array(scale)


def detect_original_boxes(net, loader, indices, ctx):
    """Detections in original-image pixels, clipped to the image, in the format score_boxes reads:
    [(index, det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficult)]."""
    import mxnet as mx

    results = []
    index_iter = iter(indices)
    for batch in loader:
        for x, y, scale in zip(*batch):
            ids, scores, bboxes = net(x.as_in_context(ctx))
            scale = scale.asnumpy().reshape((1, 1, 4))
            boxes = bboxes.asnumpy() * scale
            width, height = scale[0, 0, 0] * x.shape[3], scale[0, 0, 1] * x.shape[2]
            boxes[..., 0::2] = boxes[..., 0::2].clip(0, width)
            boxes[..., 1::2] = boxes[..., 1::2].clip(0, height)
            y = y.asnumpy()
            difficult = y[:, :, 5:6] if y.shape[-1] > 5 else None
            results.append((next(index_iter), boxes, ids.asnumpy(), scores.asnumpy(),
                            y[:, :, 0:4], y[:, :, 4:5], difficult))
    mx.nd.waitall()
    return results


class YOLOStep(TrainingStep):
    """The network's four per-image losses, computed by the network itself when given the
    targets; forward and backward of their sum are the TrainingStep's (gradients are averaged
    over the batch by the engine's trainer.step). Under mixup the target generator weights each
    box by its image's ratio, so ``mix_ratio`` stays 1 (``mixup_loss_weight``)."""

    def forward(self, batch):
        """The four losses by name."""
        data, obj_t, center_t, scale_t, weight_t, class_t, gt_boxes = [
            part.as_in_context(self.ctx) for part in batch]
        return dict(zip(LOSS_NAMES, self.net(data, gt_boxes, obj_t, center_t, scale_t, weight_t,
                                             class_t))), None
