"""Validation computed by all ranks together.

Each rank runs the detector on its slice of the validation set (the family's ``detect``); the
detections are allgathered (one collective, reached by every rank), put back in dataset order and
scored on every rank (the family's ``evaluate``), so every rank ends with the same numbers and no
rank waits alone. Box detectors gather raw detections and score them with a fresh GluonCV metric
(``score_boxes``); ``image_masks`` turns predicted masks into COCO's RLE for the families and
tools that predict masks.
"""

import contextlib
import io
import math
import re

import numpy as np


def make_metric(datasets, save_prefix, iou_thresh=0.5):
    """A fresh metric of the kind the data's format names (``datasets.metric``): GluonCV's COCO
    metric over the validation annotations, or VOC07 mAP at IoU ``iou_thresh``."""
    if datasets.metric == "coco":
        from gluoncv.utils.metrics.coco_detection import COCODetectionMetric

        return COCODetectionMetric(getattr(datasets.val, "base", datasets.val), save_prefix + "_eval",
                                   cleanup=True)
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    return VOC07MApMetric(iou_thresh=iou_thresh, class_names=list(datasets.classes))


def detect_boxes(net, loader, indices, ctx):
    """A box detector's results on its validation shard: [(dataset index, det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficult)]."""
    import mxnet as mx
    from gluoncv.nn.bbox import BBoxClipToImage

    clipper = BBoxClipToImage()
    results = []
    index_iter = iter(indices)
    for batch in loader:
        for x, y, im_scale in zip(*batch):
            x = x.as_in_context(ctx)
            ids, scores, bboxes = net(x)
            bboxes = clipper(bboxes, x)
            scale = float(im_scale.reshape((-1,)).asscalar())
            y = y.asnumpy()
            difficult = y[:, :, 5:6] if y.shape[-1] > 5 else None
            results.append((next(index_iter), (bboxes * scale).asnumpy(), ids.asnumpy(),
                            scores.asnumpy(), y[:, :, 0:4] * scale, y[:, :, 4:5], difficult))
    mx.nd.waitall()
    return results


def combine(metric, per_rank_results, coco=False):
    """Feed every rank's detections, in dataset order, to ``metric``; return
    {'mAP', 'AP50', 'per_class': {name: AP}} as fractions."""
    merged = sorted((r for rank in per_rank_results for r in rank), key=lambda r: r[0])
    for _index, det_b, det_i, det_s, gt_b, gt_i, gt_d in merged:
        if coco:  # COCO metric: predictions only, matched to images by order
            metric.update(det_b, det_i, det_s)
        else:
            metric.update(det_b, det_i, det_s, gt_b, gt_i, gt_d)
    if coco:
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' progress prints
            names, values = metric.get()
        return coco_result(names, values, metric.dataset.classes)
    return voc_result(*metric.get())


def voc_result(names, values):
    """VOC07MApMetric.get(): per-class APs then the mAP, at its IoU threshold (0.5 unless
    overlap_threshold says otherwise; then score_boxes replaces AP50)."""
    values = [float(v) for v in np.atleast_1d(values)]
    headline = ap_fraction(values[-1])
    return {"mAP": headline, "AP50": headline,
            "per_class": {n: v for n, v in zip(list(names)[:-1], values[:-1])}}


_SUMMARY_AP50 = re.compile(r"Average Precision\s+\(AP\) @\[ IoU=0\.50\s+\|\s+area=\s*all\s+\|"
                           r"\s+maxDets=\s*100 \] = (-?[0-9.]+|nan)")


def coco_result(names, values, classes):
    """COCODetectionMetric.get() returns strings: first pycocotools' multi-line summary (named
    '~~~~ Summary metrics ~~~~'), then the AP of each class and last the mean AP at IoU
    0.50:0.95, both in percent; with no usable predictions only ['mAP'], ['0.0']. AP50 is read
    from the summary (pycocotools prints -1 for 'undefined')."""
    names, values = list(names), list(values)
    ap50 = 0.0
    if names and names[0].startswith("~~~~ Summary"):
        match = _SUMMARY_AP50.search(str(values[0]))
        ap50 = ap_fraction(float(match.group(1))) if match else 0.0
        names, values = names[1:], values[1:]
    headline = ap_fraction(float(values[-1]) / 100.0) if values else 0.0
    per_class = {n: float(v) / 100.0 for n, v in zip(names[:-1], values[:-1])}
    if not per_class:  # no predictions at all: every class scores 0
        per_class = {name: 0.0 for name in classes}
    return {"mAP": headline, "AP50": ap50, "per_class": per_class}


def ap_fraction(value):
    """A headline AP: NaN or pycocotools' -1 ('undefined') count as 0."""
    return 0.0 if math.isnan(value) or value < 0 else value


def score_boxes(datasets, gathered, scratch_dir, overlap_threshold=0.5):
    """Every rank's box detections scored with a fresh metric of the data format's kind (VOC07's
    at IoU ``overlap_threshold``, AP50 at 0.5)."""
    import os

    prefix = os.path.join(scratch_dir, "boxes")
    result = combine(make_metric(datasets, prefix, overlap_threshold), gathered,
                     coco=datasets.metric == "coco")
    if datasets.metric != "coco" and overlap_threshold != 0.5:  # the mAP is not at 0.5: AP50 is
        result["AP50"] = combine(make_metric(datasets, prefix), gathered)["mAP"]
    return result


# --- masks: shared by Mask R-CNN's validation and by predict -----------------------------------

def image_masks(masks, boxes, width, height):
    """Masks predicted in their boxes (N, M, M) as COCO's compressed RLE of the whole image
    ({'size': [height, width], 'counts': str}), the boxes (N, 4) in the image's pixels. GluonCV's
    ``fill`` (its fast path: SciPy >= 1.14 removed the ``interp2d`` the other one needs)."""
    import pycocotools.mask as cocomask
    from gluoncv.data.transforms.mask import fill

    full = fill(masks, boxes, (width, height))
    return [{"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
            for rle in cocomask.encode(np.asfortranarray(full.transpose((1, 2, 0))))]


def validate(family, net, loader, indices, ctx, dist, config, datasets, scratch_dir):
    """Each rank detects its shard, the detections are allgathered (one collective, reached by
    every rank), and every rank scores them all. Returns {'mAP', 'AP50', 'per_class', 'images',
    ...the family's extra scores}."""
    local = family.detect(net, loader, indices, ctx, datasets)
    gathered = dist.allgather_object(local, "detections")
    result = family.evaluate(config, datasets, gathered, scratch_dir)
    result["images"] = sum(len(r) for r in gathered)
    return result
