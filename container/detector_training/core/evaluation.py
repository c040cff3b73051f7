"""Validation computed by all ranks together.

Each rank runs the detector on its slice of the validation set (the family's ``detect``); the
detections are allgathered (one collective, reached by every rank), put back in dataset order and
scored on every rank (the family's ``evaluate``), so every rank ends with the same numbers and no
rank waits alone. Box detectors gather raw detections and score them with a fresh GluonCV metric
(``score_boxes``); ``image_masks`` turns predicted masks into COCO's RLE for the families and
tools that predict masks.

A stop request (SIGTERM) may end validation part-way: ``validate`` given ``stop_agreed`` (a
collective: true on every rank once any rank was asked to stop) asks it before each image, every
rank the same number of times, and raises :class:`Interrupted` on every rank together.
"""

import contextlib
import io
import math
import re

from dataclasses import dataclass
from typing import Optional

import numpy as np

from detector_training.core.eval_report import COCO_IOUS


@dataclass(frozen=True)
class Metric:
    """What scores a box detector on a data format's validation data, as the format declares it
    (``DataFormat.metric``): every difference between the two kinds is an attribute here, asked
    by validation, evaluation and the configuration's rules, never a name compared.

    ``name``: how logs and files call it; ``ground_truth_file``: it scores detections against an
    annotation file (COCO's, the validation reader's ``base``) rather than against each image's
    label rows; ``takes_overlap_threshold``: its match IoU is the ``overlap_threshold``
    hyperparameter (COCO's averages 0.50:0.95 itself); ``report_ious``: the IoU thresholds the
    evaluation report's COCO-style tables use (None: the single matching IoU)."""

    name: str
    ground_truth_file: bool
    takes_overlap_threshold: bool
    report_ious: Optional[tuple] = None

    def make(self, datasets, save_prefix, iou_thresh=0.5):
        """A fresh GluonCV metric object of this kind for ``datasets``' validation split."""
        if self.ground_truth_file:
            from gluoncv.utils.metrics.coco_detection import COCODetectionMetric

            return COCODetectionMetric(getattr(datasets.val, "base", datasets.val),
                                       save_prefix + "_eval", cleanup=True)
        from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

        return VOC07MApMetric(iou_thresh=iou_thresh, class_names=list(datasets.classes))

    def __str__(self):
        return self.name


VOC07 = Metric("voc07", ground_truth_file=False, takes_overlap_threshold=True)
COCO = Metric("coco", ground_truth_file=True, takes_overlap_threshold=False, report_ious=COCO_IOUS)


def make_metric(datasets, save_prefix, iou_thresh=0.5):
    """A fresh metric of the kind the data's format declares (``datasets.metric``)."""
    return datasets.metric.make(datasets, save_prefix, iou_thresh)


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
    {'mAP', 'AP50', 'per_class': {name: AP}} as fractions. ``coco``: ``metric`` scores against
    its annotation file (``Metric.ground_truth_file``)."""
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
    metric = datasets.metric
    result = combine(metric.make(datasets, prefix, overlap_threshold), gathered,
                     coco=metric.ground_truth_file)
    if metric.takes_overlap_threshold and overlap_threshold != 0.5:  # the mAP is not at 0.5: AP50 is
        result["AP50"] = combine(metric.make(datasets, prefix), gathered)["mAP"]
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


class Interrupted(Exception):
    """A stop request ended validation (or the evaluation report) part-way."""


class StoppableShard:
    """A rank's validation loader (one image a batch) that asks ``stop_agreed()`` before each
    batch and raises Interrupted once it is true. ``stop_agreed`` is a collective, so every rank
    must ask it as often as the others: ``rounds`` times (the largest shard's length) per pass
    over the loader (a family may pass twice); ``pad`` asks the rest once detection is done (a
    smaller shard, or a pass its consumer did not finish)."""

    def __init__(self, loader, rounds, stop_agreed):
        self.loader, self.rounds, self.stop_agreed = loader, rounds, stop_agreed
        self.passes = self.asked = 0
        self.images = 0  # the first pass's, for the log

    def _ask(self):
        self.asked += 1
        if self.stop_agreed():
            raise Interrupted("a stop was requested after %d image(s) of this rank's validation shard"
                              % self.images)

    def __iter__(self):
        self.passes += 1
        for batch in self.loader:
            self._ask()
            if self.passes == 1:
                self.images += 1
            yield batch

    def pad(self):
        while self.asked < self.passes * self.rounds:
            self._ask()


def validate(family, net, loader, indices, ctx, dist, config, datasets, scratch_dir, stop_agreed=None):
    """Each rank detects its shard, the detections are allgathered (one collective, reached by
    every rank), and every rank scores them all. Returns {'mAP', 'AP50', 'per_class', 'images',
    ...the family's extra scores}. With ``stop_agreed`` (see StoppableShard), a stop request
    raises Interrupted on every rank before the detections are gathered."""
    if stop_agreed is not None:
        loader = StoppableShard(loader, len(range(0, len(datasets.val), dist.world.size)), stop_agreed)
    local = family.detect(net, loader, indices, ctx, datasets)
    if stop_agreed is not None:
        loader.pad()
    gathered = dist.allgather_object(local, "detections")
    result = family.evaluate(config, datasets, gathered, scratch_dir)
    result["images"] = sum(len(r) for r in gathered)
    return result
