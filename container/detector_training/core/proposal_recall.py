"""RPN recall at validation (the R-CNN families): the share of ground-truth boxes that at least one
of the region proposal network's proposals overlaps with IoU >= ``RECALL_IOU``.

It says whether the second stage can find an object at all: a box no proposal covers is lost
whatever the R-CNN head learns. The proposals are the ones the network's inference makes (its
test-time count after NMS), computed from the backbone's features by the network's own RPN; the
overlaps are GluonCV's ``bbox_iou``. Each rank counts its shard in a pass of its own over the
validation images (the backbone runs again: validation takes longer by about that); the counts
are added over ranks with the rest of the validation results.
"""

import numpy as np

RECALL_IOU = 0.5


def rpn_proposals(net, x):
    """The RPN's proposals for the images ``x``: an NDArray (batch, proposals, 4) of corners in
    x's pixels, as a GluonCV R-CNN network makes them at inference (features, then RPN)."""
    import mxnet as mx

    features = net.features(x)
    if not isinstance(features, (list, tuple)):  # C4 networks: one feature map; FPN: one a level
        features = [features]
    _, boxes = net.rpn(mx.nd.zeros_like(x), *features)
    return boxes


def recalled(proposals, gt_boxes, iou=RECALL_IOU):
    """(ground-truth boxes some proposal overlaps with IoU >= ``iou``, ground-truth boxes) of one
    image; ``proposals`` (N, 4) and ``gt_boxes`` (M, 4) corners in the same pixels."""
    from gluoncv.utils.bbox import bbox_iou

    gt_boxes = np.asarray(gt_boxes, dtype="float64").reshape(-1, 4)
    proposals = np.asarray(proposals, dtype="float64").reshape(-1, 4)
    # Empty proposals (NMS's -1 padding, boxes clipped to nothing) overlap nothing.
    proposals = proposals[(proposals[:, 2] > proposals[:, 0]) & (proposals[:, 3] > proposals[:, 1])]
    if not len(gt_boxes) or not len(proposals):
        return 0, len(gt_boxes)
    best = bbox_iou(gt_boxes, proposals).max(axis=1)
    return int((best >= iou).sum()), len(gt_boxes)


def recalled_per_image(net, images, ctx):
    """(recalled, total) ground-truth boxes for each ``(x, gt_boxes, scale)`` of ``images``, in
    order: ``x`` one image (1, 3, H, W), ``gt_boxes`` its corners in x's pixels divided by
    ``scale`` (the original image's, when x was resized by ``scale``)."""
    return [recalled(rpn_proposals(net, x.as_in_context(ctx))[0].asnumpy() / scale, gt_boxes)
            for x, gt_boxes, scale in images]


def recall(counts):
    """The recall of every rank's (hits, total) together; 0 when there was no ground truth."""
    hits = sum(h for h, _ in counts)
    total = sum(t for _, t in counts)
    return hits / total if total else 0.0
