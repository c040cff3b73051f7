"""The SSD family: GluonCV's ``ssd_300_vgg16_atrous_*``, ``ssd_512_vgg16_atrous_*``,
``ssd_512_resnet50_v1_*`` and ``ssd_512_mobilenet1.0_*`` networks (the network SageMaker's
built-in Object Detection algorithm runs), with GluonCV's recipe from its train_ssd.py.

Training uses GluonCV's SSDDefaultTrainTransform (colour distortion, random expansion, constrained
random crop, random interpolation, flip) with its target generator on the network's anchors (from
its anchor generators at the data shape's feature-map sizes, no forward pass); the batch is ``Tuple(Stack() x3)`` (image, class targets, box targets). The loss is
GluonCV's SSDMultiBoxLoss (softmax cross-entropy with 3:1 hard negative mining, smooth L1 on the
positives), normalised by the batch's positive anchors; it is logged as ``cross_entropy`` and
``smooth_l1``, the names the built-in algorithm's training metrics have.

The input is square: ``short`` is the data shape (GluonCV's --data-shape), by default the
network's own (300 or 512). At another data shape the anchors keep the network's sizes, as
train_ssd.py's --data-shape does: their steps are the feature strides, which do not change, and
sizes scaled down with the image (tried: a quarter at 128 pixels) no longer tile the coarser grid,
so most objects matched one anchor and an SSD at 128 pixels did not learn. Validation resizes to the square data shape (SSDDefaultValTransform)
and maps the boxes back to the original image, so VOC07 mAP and COCO's metric both score in
original pixels.
"""

import contextlib
import io
import logging

from detector_training.core.evaluation import score_boxes
from detector_training.core.step import TrainingStep
from detector_training.data.loaders import shard_loader, val_shard_loader
from detector_training.data.negatives import KeepNegatives
from detector_training.errors import ConfigError
from detector_training.families.base import DetectorFamily
from detector_training.families.yolo3 import SquareValTransform, detect_original_boxes

LOG = logging.getLogger(__name__)

LOSS_NAMES = ("cross_entropy", "smooth_l1")
BASES = ("300_vgg16_atrous", "512_vgg16_atrous", "512_resnet50_v1", "512_mobilenet1.0")
# GluonCV's train_ssd.py defaults (its published VOC models: global batch 32, 240 epochs, decay
# x0.1 at 160 and 200, no warm-up; the COCO ones the same schedule).
_PRESET = dict(epochs=240, lr=0.001, lr_decay_epoch=(160, 200), lr_warmup=-1, wd=5e-4,
               lr_base_batch_size=32)
def base_size(network):
    """The data shape a network is defined at: 300 or 512, from its name."""
    return int(network.split("_")[1])


class SSD(DetectorFamily):
    name = "ssd"
    networks = tuple("ssd_%s_%s" % (base, data) for base in BASES
                     for data in ("voc", "coco", "custom"))
    class_list_networks = tuple("ssd_%s_custom" % base for base in BASES)
    presets = {"voc": _PRESET, "coco": _PRESET}  # every data style
    options = ("final_fit",)
    test_resize = "square"  # as SquareValTransform: the data shape's square
    cpu_runtime = "onnxruntime"  # faster than MXNet per benchmarks/serving.py (benchmarks/README.md)
    loss_names = LOSS_NAMES
    metric_names = ()
    # `make run-ssd`: the smallest of the four SSDs from scratch at a 128-pixel data shape on the
    # demo's generated images (benchmarks/learning.py --families ssd measures what it reaches):
    # GluonCV's lr scaled up for a from-scratch start (0.008 at batch 8; 0.004 held it near 0.2)
    # and about 670 CPU seconds of epochs, decayed by a cosine.
    demo_defaults = {
        "network": "ssd_512_mobilenet1.0_voc",
        "short": "128",
        "max_size": "128",
        "batch_size": "8",
        "epochs": "80",
        "lr": "0.008",
        "lr_base_batch_size": "8",
        "lr_mode": "cosine",
        "lr_warmup": "40",
        "wd": "0.0005",
        "val_interval": "5",
        "log_interval": "20",
    }

    def default_size(self, network):
        return base_size(network)

    def check_config(self, config):
        if config.short is not None and len(config.short) != 1:
            raise ConfigError(
                "short=%s: an SSD network (%s) takes one square input size (its data shape)."
                % (",".join(map(str, config.short)), config.network),
                "set short to one size (e.g. %d, the network's own, or 128 on CPU)."
                % base_size(config.network))

    def data_shape(self, config):
        self.check_config(config)
        return config.short[0] if config.short else base_size(config.network)

    def image_sizes(self, config, net):
        """((the data shape,), the data shape, the data shape): square inputs."""
        size = self.data_shape(config)
        return (size,), size, size

    def fit_to_data(self, net, config, datasets):
        """A data shape the network's feature layers cannot take is a ConfigError naming the
        smallest one they take (the VGG networks end in unpadded convolutions)."""
        size = self.data_shape(config)
        if feature_shapes(net, size) is None:
            smallest = next((s for s in range(size + 1, 4097) if feature_shapes(net, s) is not None), None)
            raise ConfigError(
                "short=%d is too small for %s: its feature layers leave nothing at that data shape."
                % (size, config.network),
                "set short to at least %d." % smallest if smallest else "set a larger short.")
        return {}

    def anchors(self, config, net):
        """The network's anchors at the data shape, (1, N, 4) on the CPU: what its forward pass in
        training mode returns (train_ssd.py runs one on zeros), from its anchor generators alone."""
        import mxnet as mx

        shapes = feature_shapes(net, self.data_shape(config))
        generators = list(net.anchor_generators)
        ctx = generators[0].anchors.list_ctx()[0]
        anchors = [generator(mx.nd.zeros((1, 1) + tuple(shape[2:]), ctx=ctx)).reshape((1, -1, 4))
                   for generator, shape in zip(generators, shapes)]
        return mx.nd.concat(*anchors, dim=1).as_in_context(mx.cpu())

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, num_workers):
        from gluoncv.data.batchify import Stack, Tuple
        from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform

        size = self.data_shape(config)
        transform = KeepNegatives(
            SSDDefaultTrainTransform(size, size, self.anchors(config, net)),
            clear_targets)
        return shard_loader(config, datasets, world, per_rank_batch, steps, transform,
                            Tuple(Stack(), Stack(), Stack()), num_workers)

    def val_loader(self, config, net, datasets, world, num_workers):
        from gluoncv.data.batchify import Append, Tuple
        from gluoncv.data.transforms.presets.ssd import SSDDefaultValTransform

        return val_shard_loader(datasets, world, SquareValTransform(self.data_shape(config),
                                                                    SSDDefaultValTransform),
                                Tuple(*[Append() for _ in range(3)]), num_workers)

    def materialize(self, net, batch, ctx):
        from mxnet import autograd

        with autograd.train_mode():
            net(batch[0].as_in_context(ctx))

    def make_step(self, net, config, ctx, amp_trainer=None):
        return SSDStep(net, ctx, amp_trainer)

    def detect(self, net, loader, indices, ctx, datasets):
        return detect_original_boxes(net, loader, indices, ctx)

    def evaluate(self, config, datasets, gathered, scratch_dir):
        return score_boxes(datasets, gathered, scratch_dir)

    def export(self, config, classes, params_path, prefix, fitted):
        import mxnet as mx

        net = self.build_network(config, classes, 1, False, None, mx.cpu())
        net.load_parameters(params_path, ctx=mx.cpu(), ignore_extra=True)
        net.hybridize()
        size = self.data_shape(config)
        net(mx.nd.zeros((1, 3, size, size)))
        net.export(prefix, epoch=0)


def feature_shapes(net, size):
    """The shapes of the network's feature maps at a size x size input; None where its layers
    cannot take that size (no shape, or one with no cell)."""
    import mxnet as mx

    try:
        # MXNet prints the arguments of a failed shape inference; the caller says what it means.
        with contextlib.redirect_stdout(io.StringIO()):
            features = net.features(mx.sym.var("data"))
            _, shapes, _ = mx.sym.Group(list(features)).infer_shape(data=(1, 3, size, size))
    except mx.base.MXNetError:
        return None
    return shapes if all(min(shape[2:]) > 0 for shape in shapes) else None


def clear_targets(outputs):
    """A negative's training sample (image, class targets, box targets): every anchor is
    background and no box is regressed. GluonCV's crop and expansion move the placeholder row like
    a box, and its target generator then matches anchors to it."""
    _image, class_targets, box_targets = outputs
    class_targets[:] = 0
    box_targets[:] = 0


class SSDStep(TrainingStep):
    """GluonCV's multibox loss (train_ssd.py); forward and backward are the TrainingStep's.

    GluonCV's loss is normalised by the positive anchors of the whole batch and its script then
    steps the trainer with 1; the engine's ``trainer.step(per_rank_batch)`` divides the gradient
    by the batch, so the backward pass takes the loss times the batch size."""

    def __init__(self, net, ctx, amp_trainer=None):
        from gluoncv.loss import SSDMultiBoxLoss

        super().__init__(net, ctx, amp_trainer)
        self.loss = SSDMultiBoxLoss()

    def forward(self, batch):
        """Its two losses (per positive anchor, per image) by name; their sum and the batch
        size for the backward pass."""
        data, class_targets, box_targets = [part.as_in_context(self.ctx) for part in batch]
        class_preds, box_preds, _anchors = self.net(data)
        sum_loss, class_loss, box_loss = self.loss([class_preds], [box_preds],
                                                   [class_targets], [box_targets])
        return dict(zip(LOSS_NAMES, (class_loss[0], box_loss[0]))), (sum_loss[0], data.shape[0])

    def total_loss(self, losses, outputs):
        sum_loss, batch_size = outputs
        return sum_loss.sum() * batch_size

    def values(self, losses, outputs):
        """Each loss summed over the batch: the batch's loss per positive anchor."""
        return {name: loss.sum() for name, loss in losses.items()}
