"""The Mask R-CNN family: GluonCV's ``mask_rcnn_*`` networks (C4 and FPN; ResNet-18, 50, 101).

GluonCV's Mask R-CNN is a Faster R-CNN with a mask head, and so is this family: it reuses the
Faster R-CNN family's network building, proposal fitting and export. What it adds: COCO-format
data with each object's mask (``needs_masks``), GluonCV's Mask R-CNN transforms and batchify,
the step with the mask loss and GluonCV's two mask accuracies (MaskAccMetric, MaskFGAccMetric),
and validation that fills and RLE-encodes each rank's masks before they are gathered, scored with
COCO's box and mask AP (the best model is the best mask mAP, as in GluonCV's train_mask_rcnn.py).
"""

import contextlib
import io

import numpy as np

from detector_training.core.evaluation import ap_fraction, image_masks
from detector_training.core.proposal_recall import recall, recalled_per_image
from detector_training.core.report import BOX_AP_COLUMNS
from detector_training.families.faster_rcnn import (LOSS_NAMES, METRIC_NAMES, FasterRCNN,
                                                    FasterRCNNStep)

MASK_LOSS = "rcnn_mask_loss"
MASK_LOSS_NAMES = LOSS_NAMES + (MASK_LOSS,)
MASK_METRICS = ("mask_acc", "mask_fg_acc")
MASK_METRIC_NAMES = METRIC_NAMES + MASK_METRICS
# COCO's AP counts the 100 best detections of an image (maxDets=100), so masks are made for at
# most that many; GluonCV's networks default to 1000, ten times the mask-head work at test time.
MAX_DETECTIONS = 100
MASK_PREDICTOR_STD = 0.001  # Detectron's (and detectron2's) mask predictor initialisation


class MaskRCNN(FasterRCNN):
    name = "mask_rcnn"
    cpu_runtime = "mxnet"  # ONNX Runtime measured slower for Mask R-CNN (benchmarks/README.md, Serving)
    networks = (
        "mask_rcnn_resnet18_v1b_coco",
        "mask_rcnn_fpn_resnet18_v1b_coco",  # from scratch on 128-256 px images: CPU tests and demo
        "mask_rcnn_resnet50_v1b_coco",
        "mask_rcnn_fpn_resnet50_v1b_coco",
        "mask_rcnn_resnet101_v1d_coco",
        "mask_rcnn_fpn_resnet101_v1d_coco",
    )
    # GluonCV's train_mask_rcnn.py: global batch 8, lr 0.00125 per image (0.01 at 8), decay at
    # 17,23 over 26 epochs, warm-up max(8000 / batch, 1000) iterations, wd 1e-4, never a weight
    # decay on biases (no_wd also spares BatchNorm's beta and gamma).
    presets = {"coco": dict(batch_size=8, lr=0.01, lr_base_batch_size=8, lr_decay_epoch=(17, 23),
                            epochs=26, lr_warmup=1000, wd=1e-4, no_wd=True)}
    needs_masks = True  # instance masks (COCO-format 'segmentation's); read_datasets asks for them
    # No mixup (GluonCV's blends boxes, not instance masks), no final_fit (it would train on
    # validation images without objects, which the training transform cannot take).
    options = ()
    loss_names = MASK_LOSS_NAMES
    metric_names = MASK_METRIC_NAMES
    score_names = ("mAP", "AP50", "mask_mAP", "mask_AP50", "rpn_recall")
    objective = "mask_mAP"
    report_columns = BOX_AP_COLUMNS + (("mask AP", "mask_per_class", "mask_mAP"),)
    # `make run` with a mask_rcnn_* network: GluonCV's ResNet-18 FPN network from scratch on a
    # generated COCO-format instance dataset (polygon and RLE masks), with 64 sampled RoIs
    # instead of its 512 (the mask head runs on their positives, a quarter) so that a CPU epoch
    # takes under a minute; the learning rate follows a cosine, and the held-out images, whose
    # validation costs about half an epoch, are scored every third epoch and after the last.
    demo_defaults = {
        "network": "mask_rcnn_fpn_resnet18_v1b_coco",
        "dataset": "coco",
        "rcnn_num_samples": "64",
        "batch_size": "2",
        "epochs": "12",
        "lr": "0.02",
        "lr_base_batch_size": "2",
        "lr_mode": "cosine",
        "lr_warmup": "20",
        "val_interval": "3",
    }
    demo_images = dict(n_train=48, n_test=24, n_train_2012=24)
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

    @staticmethod
    def set_proposal_counts(net, train_post, test_post):
        """The RPN's counts, and the detections that get a mask: at most MAX_DETECTIONS and never
        more than the test proposals (GluonCV's own rule when it builds the network)."""
        FasterRCNN.set_proposal_counts(net, train_post, test_post)
        net._rcnn_max_dets = min(MAX_DETECTIONS, test_post)  # pylint: disable=protected-access

    def transforms(self):
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
    of each validation image, in loader order (the val transform gives no labels: the reader's;
    an image without objects has only the placeholder row, which is no object)."""
    index_iter = iter(indices)
    for batch in loader:
        for x, im_info in zip(*batch):
            label = np.asarray(reader._labels[next(index_iter)])  # pylint: disable=protected-access
            boxes = label[label[:, 4] >= 0, :4]
            yield x, boxes, float(im_info.reshape((-1,))[2].asscalar())


class MaskRCNNStep(FasterRCNNStep):
    """The Faster R-CNN step plus the mask head's loss (sigmoid cross-entropy on the positive
    RoIs' masks of their class, as GluonCV's train_mask_rcnn.py) and its two accuracies."""

    def __init__(self, net, config, ctx, amp_trainer=None):
        import mxnet as mx

        super().__init__(net, config, ctx, amp_trainer)
        self.rcnn_mask_loss = mx.gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)

    def forward(self, batch):
        """The five losses by name, and what the metrics are computed from."""
        import mxnet as mx

        # MaskRCNNTrainBatchify: images, labels, masks, then the three RPN targets.
        data, label, gt_mask, *rpn_targets = self.load(batch)
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
        # Averaged over the mask pixels trained; a batch of negatives trains none (GluonCV's
        # script divides by their count, 0, and its loss becomes NaN).
        mask_loss = self.rcnn_mask_loss(mask_pred, mask_targets, mask_masks) \
            * mask_targets.size / mx.nd.maximum(mask_masks.sum(), 1)
        losses[MASK_LOSS] = mask_loss
        return losses, ((outputs, rpn_targets, rcnn_targets), (mask_pred, mask_targets, mask_masks))

    def values(self, losses, outputs):
        import mxnet as mx

        boxes, (mask_pred, mask_targets, mask_masks) = outputs
        # GluonCV's MaskAccMetric (pixels of the masks trained) and MaskFGAccMetric (their
        # foreground pixels).
        predicted, target = mx.nd.sigmoid(mask_pred) >= 0.5, mask_targets >= 0.5
        mask_metrics = dict(zip(MASK_METRICS, (
            (((predicted == target) * mask_masks).sum(), mask_masks.sum()),
            (((predicted == target) * target).sum(), mask_targets.sum()))))
        return dict(super().values(losses, boxes), **mask_metrics)


# --- validation: COCO box and mask AP -------------------------------------------------------

SCORE_FLOOR = 0.001  # GluonCV's: detections below this score are not scored


def detect_instances(net, loader, indices, ctx, reader):
    """A Mask R-CNN's results on its validation shard, ready for COCO: [(dataset index, [{image_id,
    category_id, bbox [x, y, w, h], score, segmentation (compressed RLE)}])], each mask filled
    into its box at the image's size and encoded here (``image_masks``), so what the ranks gather
    is small. ``reader``: the validation reader (image ids and sizes, category ids)."""
    import mxnet as mx
    from gluoncv.nn.bbox import BBoxClipToImage

    clipper = BBoxClipToImage()
    results = []
    index_iter = iter(indices)
    for batch in loader:
        for x, im_info in zip(*batch):
            index = next(index_iter)
            image_id, width, height = reader.images[index]
            x = x.as_in_context(ctx)
            ids, scores, boxes, masks = net(x)
            boxes = clipper(boxes, x)
            ids, scores = ids[0, :, 0].asnumpy(), scores[0, :, 0].asnumpy()
            keep = np.where((ids >= 0) & (scores >= SCORE_FLOOR))[0]
            scale = float(im_info.reshape((-1,))[2].asscalar())
            boxes = boxes[0].asnumpy()[keep] / scale
            boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, width)
            boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, height)
            rles = image_masks(masks[0].asnumpy()[keep], boxes, width, height) if len(keep) else []
            results.append((index, [
                {"image_id": int(image_id), "category_id": int(reader.contiguous_id_to_json[int(cid)]),
                 "bbox": [round(float(v), 2) for v in (box[0], box[1], box[2] - box[0], box[3] - box[1])],
                 "score": round(float(score), 4), "segmentation": rle}
                for box, cid, score, rle in zip(boxes, ids[keep], scores[keep], rles)]))
    mx.nd.waitall()
    return results


def coco_scores(gt, entries, iou_type, classes):
    """COCO's AP of ``entries`` (result dicts) against the ground truth ``gt`` (a pycocotools COCO):
    (AP at IoU 0.50:0.95, AP at IoU 0.5, {class: AP at 0.50:0.95}) as fractions, for 'bbox' or
    'segm'. No predictions at all score 0 (pycocotools cannot load an empty result)."""
    from pycocotools.cocoeval import COCOeval

    if not entries:
        return 0.0, 0.0, {name: 0.0 for name in classes}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' progress prints
        evaluator = COCOeval(gt, gt.loadRes([dict(e) for e in entries]), iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    # precision: (IoU thresholds, recall points, categories, area ranges, max detections);
    # categories in the order of their ids, as the classes are.
    precision = evaluator.eval["precision"][:, :, :, 0, -1]
    per_class = {}
    for k, name in enumerate(classes):
        values = precision[:, :, k]
        per_class[name] = ap_fraction(float(np.mean(values[values > -1]))) if (values > -1).any() else 0.0
    return ap_fraction(float(evaluator.stats[0])), ap_fraction(float(evaluator.stats[1])), per_class


def score_instances(datasets, gathered):
    """Every rank's instance results scored with COCO's box and mask AP: {'mAP', 'AP50',
    'per_class'} for boxes, {'mask_mAP', 'mask_AP50', 'mask_per_class'} for masks."""
    # Each entry names its image, so the order of the ranks' shards does not matter.
    merged = [e for rank in gathered for _index, entries in rank for e in entries]
    gt, classes = datasets.val.base.coco, list(datasets.classes)
    box_map, box_ap50, box_per_class = coco_scores(
        gt, [{k: v for k, v in e.items() if k != "segmentation"} for e in merged], "bbox", classes)
    mask_map, mask_ap50, mask_per_class = coco_scores(
        gt, [{k: v for k, v in e.items() if k != "bbox"} for e in merged], "segm", classes)
    return {"mAP": box_map, "AP50": box_ap50, "per_class": box_per_class, "mask_mAP": mask_map,
            "mask_AP50": mask_ap50, "mask_per_class": mask_per_class}
