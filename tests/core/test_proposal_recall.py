"""RPN recall (core/proposal_recall.py): the overlap count on boxes made by hand, and the proposals
of a real network (the project's small Faster R-CNN and GluonCV's FPN one, from scratch)."""

import mxnet as mx
import numpy as np
import pytest

from detector_training.core.proposal_recall import recall, recalled, recalled_per_image, rpn_proposals
from detector_training.families import build_network
from detector_training.job.config import from_hyperparameters


def test_a_ground_truth_box_counts_when_some_proposal_overlaps_it_at_iou_half():
    gt = [[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]]
    proposals = [[0, 0, 10, 14],     # IoU 10/14 with the first: recalled
                 [20, 20, 30, 42],   # IoU 10/22 < 0.5 with the second: not
                 [100, 100, 110, 110]]
    assert recalled(proposals, gt) == (1, 3)
    assert recalled(proposals, gt, iou=0.4) == (2, 3)
    assert recalled([], gt) == (0, 3) and recalled(proposals, np.zeros((0, 4))) == (0, 0)
    assert recalled([[-1, -1, -1, -1], [5, 5, 5, 20]], [[-1, -1, -1, -1]]) == (0, 1)  # empty boxes
    assert recall([(1, 3), (2, 2)]) == pytest.approx(0.6) and recall([(0, 0)]) == 0.0


@pytest.mark.parametrize("network", ["faster_rcnn_resnet18_v1b_voc", "faster_rcnn_fpn_resnet50_v1b_coco"])
def test_the_proposals_are_the_networks_inference_proposals_in_image_pixels(network):
    config = from_hyperparameters({"network": network, "dataset": "custom", "pretrained_base": "false",
                                   "train_splits": "2007_trainval"})
    net = build_network(config, ("a", "b"), 1, False, None, mx.cpu())
    net.hybridize()
    x = mx.nd.random.uniform(shape=(1, 3, 128, 160))
    net(x)  # the network's own inference first (its parameters take their shapes)
    boxes = rpn_proposals(net, x).asnumpy()
    assert boxes.shape == (1, net._rpn_test_post_nms, 4)  # pylint: disable=protected-access
    kept = boxes[0][(boxes[0, :, 2] - boxes[0, :, 0] > 2) & (boxes[0, :, 3] - boxes[0, :, 1] > 2)]
    assert len(kept) and kept[:, 0].min() >= 0 and kept[:, 2].max() <= 160 and kept[:, 3].max() <= 128
    images = [(x, [kept[0], [0, 0, 1, 1]], 1.0),  # a proposal itself is recalled; a 1-pixel box is not
              (x, kept[:1] / 2.0, 2.0)]  # ground truth in the original (half-size) image
    assert recalled_per_image(net, images, mx.cpu()) == [(1, 2), (1, 1)]
