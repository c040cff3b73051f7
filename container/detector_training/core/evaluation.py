"""Validation computed by all ranks together.

Each rank runs the detector on its slice of the validation set (the family's ``detect``); the
detections are allgathered (one collective, reached by every rank), put back in dataset order and
scored on every rank (the family's ``evaluate``), so every rank ends with the same numbers and no
rank waits alone. Box detectors gather raw detections and score them with a fresh GluonCV metric
(``score_boxes``); instance segmenters fill and RLE-encode their masks on their own rank and
gather COCO result entries, scored with pycocotools' COCOeval for boxes and masks
(``detect_instances``, ``score_instances``).
"""

import contextlib
import io
import math
import re

import numpy as np


def make_metric(config, datasets, save_prefix):
    if config.dataset == "coco":
        from gluoncv.utils.metrics.coco_detection import COCODetectionMetric

        return COCODetectionMetric(getattr(datasets.val, "base", datasets.val), save_prefix + "_eval",
                                   cleanup=True)
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    return VOC07MApMetric(iou_thresh=0.5, class_names=list(datasets.classes))


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
    """VOC07MApMetric.get(): per-class APs then the mAP, at IoU 0.5 (so AP50 is the mAP)."""
    values = [float(v) for v in np.atleast_1d(values)]
    headline = _fraction(values[-1])
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
        ap50 = _fraction(float(match.group(1))) if match else 0.0
        names, values = names[1:], values[1:]
    headline = _fraction(float(values[-1]) / 100.0) if values else 0.0
    per_class = {n: float(v) / 100.0 for n, v in zip(names[:-1], values[:-1])}
    if not per_class:  # no predictions at all: every class scores 0
        per_class = {name: 0.0 for name in classes}
    return {"mAP": headline, "AP50": ap50, "per_class": per_class}


def _fraction(value):
    """A headline AP: NaN or pycocotools' -1 ('undefined') count as 0."""
    return 0.0 if math.isnan(value) or value < 0 else value


def score_boxes(config, datasets, gathered, scratch_dir):
    """Every rank's box detections scored with a fresh metric: VOC07 mAP, or COCO's for coco."""
    import os

    metric = make_metric(config, datasets, os.path.join(scratch_dir, "boxes"))
    return combine(metric, gathered, coco=config.dataset == "coco")


# --- instance segmentation: COCO box and mask AP ---------------------------------------------

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


def image_masks(masks, boxes, width, height):
    """Masks predicted in their boxes (N, M, M) as COCO's compressed RLE of the whole image
    ({'size': [height, width], 'counts': str}), the boxes (N, 4) in the image's pixels. GluonCV's
    ``fill`` (its fast path: SciPy >= 1.14 removed the ``interp2d`` the other one needs)."""
    import pycocotools.mask as cocomask
    from gluoncv.data.transforms.mask import fill

    full = fill(masks, boxes, (width, height))
    return [{"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
            for rle in cocomask.encode(np.asfortranarray(full.transpose((1, 2, 0))))]


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
        per_class[name] = _fraction(float(np.mean(values[values > -1]))) if (values > -1).any() else 0.0
    return _fraction(float(evaluator.stats[0])), _fraction(float(evaluator.stats[1])), per_class


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


def validate(family, net, loader, indices, ctx, dist, config, datasets, scratch_dir):
    """Each rank detects its shard, the detections are allgathered (one collective, reached by
    every rank), and every rank scores them all. Returns {'mAP', 'AP50', 'per_class', 'images',
    ...the family's extra scores}."""
    local = family.detect(net, loader, indices, ctx, datasets)
    gathered = dist.allgather_object(local, "detections")
    result = family.evaluate(config, datasets, gathered, scratch_dir)
    result["images"] = sum(len(r) for r in gathered)
    return result
