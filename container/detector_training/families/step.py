"""One training step: forward, the four losses, backward (GluonCV's ForwardBackwardTask).

The optimizer update is the engine's; this module computes losses and metric inputs only.
"""

from dataclasses import dataclass, field

LOSS_NAMES = ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss")
METRIC_NAMES = ("rpn_acc", "rpn_l1", "rcnn_acc", "rcnn_l1")


@dataclass
class MetricSums:
    """Running (sum, count) pairs, so ranks can add theirs together before dividing.

    Values may be NDArrays: they are summed on the device and read back only in ``flat`` (at log
    time), so a step never waits for its metrics to be copied to the host."""

    sums: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)

    def add(self, name, total, count):
        self.sums[name] = self.sums.get(name, 0.0) + total
        self.counts[name] = self.counts.get(name, 0.0) + count

    def flat(self, names):
        return [_scalar(self.sums.get(n, 0.0)) for n in names] + \
            [_scalar(self.counts.get(n, 0.0)) for n in names]

    @staticmethod
    def values_from_flat(names, flat):
        k = len(names)
        return {n: (flat[i] / flat[k + i] if flat[k + i] else float("nan")) for i, n in enumerate(names)}

    def reset(self):
        self.sums.clear()
        self.counts.clear()


def _scalar(value):
    return float(value.asscalar()) if hasattr(value, "asscalar") else float(value)


class ForwardBackward:
    def __init__(self, net, config, ctx, mix_ratio=1.0, amp_trainer=None):
        import mxnet as mx

        self.net = net
        self.ctx = ctx
        self.mix_ratio = mix_ratio
        self.amp_trainer = amp_trainer
        self.rpn_cls_loss = mx.gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
        self.rpn_box_loss = mx.gluon.loss.HuberLoss(rho=config.rpn_smoothl1_rho)
        self.rcnn_cls_loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.rcnn_box_loss = mx.gluon.loss.HuberLoss(rho=config.rcnn_smoothl1_rho)

    def __call__(self, batch, sums):
        """Run forward and backward on one batch; add losses and metric inputs to ``sums``."""
        import mxnet as mx
        from mxnet import autograd

        # FasterRCNNTrainBatchify(net, 1): images and labels come as arrays, targets as 1-tuples.
        data, label, rpn_cls_targets, rpn_box_targets, rpn_box_masks = [
            (part[0] if isinstance(part, (list, tuple)) else part).as_in_context(self.ctx)
            for part in batch]
        with autograd.record():
            gt_label = label[:, :, 4:5]
            gt_box = label[:, :, :4]
            (cls_pred, box_pred, _roi, _samples, _matches, rpn_score, rpn_box, _anchors,
             cls_targets, box_targets, box_masks, _indices) = self.net(data, gt_box, gt_label)
            rpn_score = rpn_score.squeeze(axis=-1)
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
            total = (rpn_loss1.sum() + rpn_loss2.sum() + rcnn_loss1.sum() + rcnn_loss2.sum()) \
                * self.mix_ratio
            if self.amp_trainer is not None:
                from mxnet.contrib import amp

                with amp.scale_loss(total, self.amp_trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(total)

        losses = [rpn_loss1, rpn_loss2, rcnn_loss1, rcnn_loss2]
        for name, loss in zip(LOSS_NAMES, losses):
            sums.add(name, loss.mean() * self.mix_ratio, 1)
        # Accuracy and L1 metrics, as GluonCV's RPNAccMetric, RPNL1LossMetric, RCNN*Metric.
        rpn_weight = (rpn_cls_targets >= 0)
        rpn_pred = mx.nd.sigmoid(rpn_score) >= 0.5
        sums.add("rpn_acc", ((rpn_pred == rpn_cls_targets) * rpn_weight).sum(), rpn_weight.sum())
        sums.add("rpn_l1", (rpn_box_masks * mx.nd.smooth_l1(rpn_box - rpn_box_targets, scalar=3)).sum(),
                 rpn_box_masks.sum() / 4)
        rcnn_pred = mx.nd.argmax(cls_pred, axis=-1)
        sums.add("rcnn_acc", (rcnn_pred == cls_targets).sum(), cls_targets.size)
        sums.add("rcnn_l1", (box_masks * mx.nd.smooth_l1(box_pred - box_targets, scalar=1)).sum(),
                 box_masks.sum() / 4)
        return int(data.shape[0])

