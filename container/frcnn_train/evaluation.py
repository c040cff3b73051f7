"""Validation computed by all ranks together.

Each rank runs the detector on its slice of the validation set; the raw detections are
allgathered (one collective, reached by every rank), put back in dataset order and fed to a fresh
GluonCV metric on every rank, so every rank ends with the same mAP and no rank waits alone.
"""

import math

import numpy as np


def make_metric(config, datasets, save_prefix):
    if config.dataset == "coco":
        from gluoncv.utils.metrics.coco_detection import COCODetectionMetric

        return COCODetectionMetric(datasets.val, save_prefix + "_eval", cleanup=True)
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    return VOC07MApMetric(iou_thresh=0.5, class_names=list(datasets.classes))


def detect_shard(net, loader, indices, ctx):
    """[(dataset index, det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficult)]."""
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
    """Feed every rank's detections, in dataset order, to ``metric``; return (names, values)."""
    merged = sorted((r for rank in per_rank_results for r in rank), key=lambda r: r[0])
    for _index, det_b, det_i, det_s, gt_b, gt_i, gt_d in merged:
        if coco:  # COCO metric: predictions only, matched to images by order
            metric.update(det_b, det_i, det_s)
        else:
            metric.update(det_b, det_i, det_s, gt_b, gt_i, gt_d)
    names, values = metric.get()
    return list(names), [float(v) for v in np.atleast_1d(values)]


def validate(net, loader, indices, ctx, metric, dist, coco=False):
    """Run the shard, allgather, combine. Returns {'mAP': float, 'per_class': {name: AP}}."""
    local = detect_shard(net, loader, indices, ctx)
    gathered = dist.allgather_object(local, "detections")
    metric.reset()
    names, values = combine(metric, gathered, coco)
    per_class = {n: v for n, v in zip(names[:-1], values[:-1])}
    headline = values[-1]
    return {"mAP": headline if not math.isnan(headline) else 0.0, "per_class": per_class,
            "images": sum(len(r) for r in gathered)}
