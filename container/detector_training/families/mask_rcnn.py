"""The Mask R-CNN family: GluonCV's ``mask_rcnn_*`` networks (C4 and FPN; ResNet-18, 50, 101).

GluonCV's Mask R-CNN is a Faster R-CNN with a mask head, and so is this family: it reuses the
Faster R-CNN family's network building, proposal fitting and export. What it adds: COCO-format
data with each object's mask (``read_datasets``), GluonCV's Mask R-CNN transforms and batchify,
the step with the mask loss and GluonCV's two mask accuracies (MaskAccMetric, MaskFGAccMetric),
and validation that fills and RLE-encodes each rank's masks before they are gathered, scored with
COCO's box and mask AP (the best model is the best mask mAP, as in GluonCV's train_mask_rcnn.py).
"""

from detector_training.core.evaluation import detect_instances, score_instances
from detector_training.core.proposal_recall import recall, recalled_per_image
from detector_training.data.datasets import build_datasets
from detector_training.families.faster_rcnn import (LOSS_NAMES, METRIC_NAMES, FasterRCNN,
                                                    FasterRCNNStep)

MASK_LOSS_NAMES = LOSS_NAMES + ("rcnn_mask_loss",)
MASK_METRIC_NAMES = METRIC_NAMES + ("mask_acc", "mask_fg_acc")
# COCO's AP counts the 100 best detections of an image (maxDets=100), so masks are made for at
# most that many; GluonCV's networks default to 1000, ten times the mask-head work at test time.
MAX_DETECTIONS = 100
MASK_PREDICTOR_STD = 0.001  # Detectron's (and detectron2's) mask predictor initialisation


class MaskRCNN(FasterRCNN):
    name = "mask_rcnn"
    loss_names = MASK_LOSS_NAMES
    metric_names = MASK_METRIC_NAMES
    score_names = ("mAP", "AP50", "mask_mAP", "mask_AP50", "rpn_recall")
    objective = "mask_mAP"
    zoo_builder = ("gluoncv.model_zoo.rcnn.mask_rcnn.predefined_models", "get_mask_rcnn")

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        """GluonCV's network, with Detectron's initialisation of the mask predictor: GluonCV's
        (Xavier over the fan-out, the number of classes) gives weights of std 0.16 for COCO's 80
        classes but 0.76 for 3, so the mask logits of a few-class network started in the tens and
        its mask loss diverged from scratch; Normal(0.001) starts every mask near 0.5."""
        import mxnet as mx

        net = super().build_network(config, classes, per_rank_batch, pretrained_base,
                                    pretrained_dirs, ctx)
        net.mask.mask.weight.initialize(mx.init.Normal(MASK_PREDICTOR_STD), ctx=ctx,
                                        force_reinit=True)
        return net

    def read_datasets(self, config, root):
        return build_datasets(config, root, instances=True)

    @staticmethod
    def set_proposal_counts(net, train_post, test_post):
        """The RPN's counts, and the detections that get a mask: at most MAX_DETECTIONS and never
        more than the test proposals (GluonCV's own rule when it builds the network)."""
        FasterRCNN.set_proposal_counts(net, train_post, test_post)
        net._rcnn_max_dets = min(MAX_DETECTIONS, test_post)  # pylint: disable=protected-access

    def presets(self):
        """GluonCV's Mask R-CNN transforms (the val one gives image and (height, width, scale))."""
        from gluoncv.data.batchify import MaskRCNNTrainBatchify
        from gluoncv.data.transforms.presets.rcnn import (MaskRCNNDefaultTrainTransform,
                                                          MaskRCNNDefaultValTransform)

        return MaskRCNNDefaultTrainTransform, MaskRCNNTrainBatchify, MaskRCNNDefaultValTransform, 2

    def make_step(self, net, config, ctx, amp_trainer=None):
        return MaskRCNNStep(net, config, ctx, amp_trainer=amp_trainer)

    def detect(self, net, loader, indices, ctx, datasets):
        """Each image's instances, with its RPN recall counts (core/proposal_recall.py)."""
        instances = detect_instances(net, loader, indices, ctx, datasets.val.base)
        return list(zip(instances, recalled_per_image(
            net, val_ground_truth(loader, indices, datasets.val.base), ctx)))

    def evaluate(self, config, datasets, gathered, scratch_dir):
        result = score_instances(datasets, [[i for i, _ in rank] for rank in gathered])
        result["rpn_recall"] = recall([counts for rank in gathered for _, counts in rank])
        return result


def val_ground_truth(loader, indices, reader):
    """(image, ground-truth corners in the original image's pixels, the image's resize factor)
    of each validation image, in loader order (the val transform gives no labels: the reader's)."""
    import numpy as np

    index_iter = iter(indices)
    for batch in loader:
        for x, im_info in zip(*batch):
            label = reader._labels[next(index_iter)]  # pylint: disable=protected-access
            boxes = np.zeros((0, 4)) if label is None else np.asarray(label)[:, :4]
            yield x, boxes, float(im_info.reshape((-1,))[2].asscalar())


class MaskRCNNStep(FasterRCNNStep):
    """The Faster R-CNN step plus the mask head's loss (sigmoid cross-entropy on the positive
    RoIs' masks of their class, as GluonCV's train_mask_rcnn.py) and its two accuracies."""

    def __init__(self, net, config, ctx, mix_ratio=1.0, amp_trainer=None):
        import mxnet as mx

        super().__init__(net, config, ctx, mix_ratio, amp_trainer)
        self.rcnn_mask_loss = mx.gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)

    def __call__(self, batch, sums):
        import mxnet as mx
        from mxnet import autograd

        # MaskRCNNTrainBatchify: images, labels, masks, then the three RPN targets.
        data, label, gt_mask, *rpn_targets = self.load(batch)
        with autograd.record():
            (cls_pred, box_pred, mask_pred, roi, _samples, matches, rpn_score, rpn_box, _anchors,
             cls_targets, box_targets, box_masks, indices) = self.net(data, label[:, :, :4],
                                                                      label[:, :, 4:5])
            outputs = (rpn_score.squeeze(axis=-1), rpn_box, cls_pred, box_pred)
            rcnn_targets = (cls_targets, box_targets, box_masks)
            losses = self.box_losses(outputs, rpn_targets, rcnn_targets)
            # The mask head saw the positive RoIs (``indices`` per image): their boxes, classes and
            # matched objects give the mask targets.
            def positives(x):
                return mx.nd.concat(*[mx.nd.take(x[i], indices[i]) for i in range(indices.shape[0])],
                                    dim=0).reshape((indices.shape[0], -1) + x.shape[2:])

            mask_targets, mask_masks = self.net.mask_target(
                positives(roi), gt_mask, positives(matches), positives(cls_targets))
            mask_loss = self.rcnn_mask_loss(mask_pred, mask_targets, mask_masks) \
                * mask_targets.size / mask_masks.sum()
            self.backward(losses + [mask_loss])
        self.add_box_metrics(sums, losses, outputs, rpn_targets, rcnn_targets)
        sums.add("rcnn_mask_loss", mask_loss.mean() * self.mix_ratio, 1)
        # GluonCV's MaskAccMetric (pixels of the masks trained) and MaskFGAccMetric (their
        # foreground pixels).
        predicted, target = mx.nd.sigmoid(mask_pred) >= 0.5, mask_targets >= 0.5
        sums.add("mask_acc", ((predicted == target) * mask_masks).sum(), mask_masks.sum())
        sums.add("mask_fg_acc", ((predicted == target) * target).sum(), mask_targets.sum())
        return int(data.shape[0])
