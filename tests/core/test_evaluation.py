"""Validation's shared scoring (core/evaluation.py): GluonCV's metric results as fractions, every
rank's detections merged in dataset order, and predicted masks as COCO RLE of the whole image."""

import numpy as np
import pycocotools.mask as cocomask
import pytest

from detector_training.core.evaluation import ap_fraction, coco_result, combine, image_masks, voc_result


def test_voc_result_is_per_class_ap_then_the_map_at_iou_half():
    result = voc_result(["circle", "square", "mAP"], [0.5, np.nan, 0.25])
    assert result["mAP"] == result["AP50"] == 0.25
    assert result["per_class"]["circle"] == 0.5 and np.isnan(result["per_class"]["square"])
    assert voc_result(["a", "mAP"], [0.1, np.nan])["mAP"] == 0.0  # undefined counts as 0


def test_coco_result_reads_percent_strings_and_ap50_from_the_summary():
    summary = ("~~~~ Summary metrics ~~~~\n Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | "
               "maxDets=100 ] = 0.300\n Average Precision  (AP) @[ IoU=0.50      | area=   all | "
               "maxDets=100 ] = 0.612\n")
    result = coco_result(["~~~~ Summary metrics ~~~~", "a", "b", "mAP"], [summary, "20.0", "40.0", "30.0"],
                         ("a", "b"))
    assert result == {"mAP": pytest.approx(0.3), "AP50": pytest.approx(0.612),
                      "per_class": {"a": pytest.approx(0.2), "b": pytest.approx(0.4)}}
    # No usable predictions: GluonCV gives only the headline; every class scores 0.
    assert coco_result(["mAP"], ["0.0"], ("a", "b")) == {"mAP": 0.0, "AP50": 0.0,
                                                         "per_class": {"a": 0.0, "b": 0.0}}
    assert ap_fraction(-1.0) == 0.0 and ap_fraction(float("nan")) == 0.0 and ap_fraction(0.4) == 0.4


class _Recorder:
    def __init__(self):
        self.updates = []

    def update(self, *args):
        self.updates.append(args)

    def get(self):
        return ["a", "mAP"], [0.5, 0.5]


def test_every_ranks_detections_are_scored_once_in_dataset_order():
    rank0 = [(0, "b0", "i0", "s0", "g0", "c0", "d0"), (2, "b2", "i2", "s2", "g2", "c2", "d2")]
    rank1 = [(1, "b1", "i1", "s1", "g1", "c1", "d1")]
    metric = _Recorder()
    combine(metric, [rank0, rank1])
    assert [u[0] for u in metric.updates] == ["b0", "b1", "b2"] and len(metric.updates[0]) == 6
    assert metric.updates[1] == ("b1", "i1", "s1", "g1", "c1", "d1")  # each image's own rows, whole


def detection(index, box, label, score, gt_box, gt_label):
    """One image's detections and labels as a rank's validation gives them (batch of one)."""
    return (index, np.array([[box]], dtype=float), np.array([[[label]]], dtype=float),
            np.array([[[score]]], dtype=float), np.array([[gt_box]], dtype=float),
            np.array([[[gt_label]]], dtype=float), np.zeros((1, 1, 1)))


def test_every_ranks_detections_are_scored_together_by_the_real_metric():
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    box = [10, 10, 50, 50]
    rank0 = [detection(0, box, 0, 0.9, box, 0),                    # a: found
             detection(2, [60, 60, 90, 90], 0, 0.8, box, 0)]       # a: a false box, the object missed
    rank1 = [detection(1, box, 1, 0.7, box, 1)]                    # b: found
    result = combine(VOC07MApMetric(iou_thresh=0.5, class_names=["a", "b"]), [rank0, rank1])
    # a: precision 1 up to recall 0.5, then nothing: 6 of VOC07's 11 recall points; b: 1
    assert result["per_class"] == pytest.approx({"a": 6 / 11, "b": 1.0})
    assert result["mAP"] == result["AP50"] == pytest.approx((6 / 11 + 1.0) / 2)


def test_a_mask_in_its_box_becomes_rle_of_the_whole_image():
    masks = np.ones((1, 14, 14), dtype="float32")  # the whole box is the object
    boxes = np.array([[4.0, 2.0, 13.0, 9.0]], dtype="float32")
    (rle,) = image_masks(masks, boxes, width=20, height=12)
    assert rle["size"] == [12, 20] and isinstance(rle["counts"], str)
    decoded = cocomask.decode({"size": rle["size"], "counts": rle["counts"].encode("ascii")})
    ys, xs = np.nonzero(decoded)
    assert decoded.shape == (12, 20)
    assert abs(xs.min() - 4) <= 1 and abs(xs.max() - 13) <= 1 and abs(ys.min() - 2) <= 1 and abs(ys.max() - 9) <= 1


def test_overlap_threshold_moves_the_voc_maps_iou_and_ap50_stays_at_half(tmp_path):
    from detector_training.core.evaluation import VOC07, score_boxes

    class Data:
        classes = ("a",)
        metric = VOC07

    # one object, one detection overlapping it with IoU 0.6 (a 10x10 box shifted by 2.5)
    gt = np.array([[[0.0, 0.0, 10.0, 10.0]]])
    det = np.array([[[2.5, 0.0, 12.5, 10.0]]])
    gathered = [[(0, det, np.array([[[0.0]]]), np.array([[[0.9]]]), gt, np.array([[[0.0]]]), None)]]
    at_half = score_boxes(Data(), gathered, str(tmp_path))
    at_07 = score_boxes(Data(), gathered, str(tmp_path), overlap_threshold=0.7)
    assert at_half["mAP"] == pytest.approx(1.0) and at_half["AP50"] == pytest.approx(1.0)
    assert at_07["mAP"] == pytest.approx(0.0) and at_07["AP50"] == pytest.approx(1.0)


def test_a_stoppable_shard_asks_as_often_on_every_rank_and_stops_them_together():
    """The stop question is a collective: a rank with a smaller shard (or a pass its consumer
    left early) asks the rest at the end, so every rank asks passes x rounds times."""
    from detector_training.core.evaluation import Interrupted, StoppableShard

    asked = []
    shard = StoppableShard([["a"], ["b"]], 3, lambda: asked.append(1) or False)  # 2 of the largest shard's 3
    assert list(shard) == [["a"], ["b"]]
    for _batch in shard:  # a second pass, left after one batch
        break
    shard.pad()
    assert len(asked) == 2 * 3

    answers = iter([False, True])
    shard = StoppableShard([["a"], ["b"], ["c"]], 3, lambda: next(answers))
    with pytest.raises(Interrupted, match="after 1 image"):
        list(shard)
