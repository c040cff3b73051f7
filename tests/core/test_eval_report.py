"""The evaluation report (core/eval_report.py) on results whose answer is known by construction:
detections equal to the labels score 1.0 everywhere; one missed and one false box land in the
background column and row; a hand-computed precision-recall curve, its VOC07 AP and its best-F1
threshold; AP by object size; the files written, read back."""

import csv
import io

import numpy as np
import pytest
from PIL import Image

from detector_training.core import eval_report
from detector_training.core.eval_report import ImageResult

CLASSES = ["cat", "dog"]
BG = 2  # the background row and column


def result(gt, dets=(), difficult=None, size=(400, 300), name="img"):
    """An ImageResult from [(box, label)] labelled and [(box, label, score)] detected."""
    return ImageResult(name=name, width=size[0], height=size[1],
                       gt_boxes=[b for b, _ in gt], gt_labels=[l for _, l in gt], gt_difficult=difficult,
                       boxes=[b for b, _, _ in dets], labels=[l for _, l, _ in dets],
                       scores=[s for _, _, s in dets],
                       load=lambda: np.full((size[1], size[0], 3), 200, dtype=np.uint8))


LABELS = [
    [((10, 10, 60, 50), 0), ((100, 100, 300, 280), 1)],          # a medium cat, a large dog
    [((5, 5, 20, 25), 0), ((200, 40, 380, 200), 0)],             # a small cat, a large cat
    [((50, 60, 90, 140), 1)],                                    # a medium dog
]


def perfect():
    return [result(gt, [(box, label, 0.9) for box, label in gt], name="p%d" % i)
            for i, gt in enumerate(LABELS)]


def test_detections_equal_to_the_labels_score_one_everywhere():
    evaluation = eval_report.evaluate(perfect(), CLASSES)
    assert [c.ap for c in evaluation.curves] == [pytest.approx(1.0)] * 2
    assert evaluation.mean_ap == pytest.approx(1.0)
    assert [c.positives for c in evaluation.curves] == [3, 2]
    np.testing.assert_array_equal(evaluation.confusion, [[3, 0, 0], [0, 2, 0], [0, 0, 0]])
    for name in CLASSES:
        assert evaluation.thresholds[name] == {"threshold": 0.9, "f1": 1.0, "precision": 1.0, "recall": 1.0}
    sizes = evaluation.sizes
    assert sizes["all"]["mAP"] == pytest.approx(1.0)
    assert sizes["small"]["per_class"] == {"cat": pytest.approx(1.0), "dog": None}  # no small dog
    assert sizes["medium"]["per_class"] == {"cat": pytest.approx(1.0), "dog": pytest.approx(1.0)}
    assert sizes["large"]["mAP"] == pytest.approx(1.0)
    assert [f1 for _i, f1 in evaluation.grid] == [1.0, 1.0, 1.0]


def test_one_missed_and_one_false_box_land_in_the_background_column_and_row():
    results = perfect()
    results[0] = result(LABELS[0], [((10, 10, 60, 50), 0, 0.9),            # the cat, found
                                    ((320, 10, 390, 60), 1, 0.8)])         # a dog where nothing is
    evaluation = eval_report.evaluate(results, CLASSES)
    # the large dog of image 0 is missed (labelled dog, predicted background); the false dog is
    # a detection of background (labelled background, predicted dog)
    np.testing.assert_array_equal(evaluation.confusion, [[3, 0, 0], [0, 1, 1], [0, 1, 0]])
    assert evaluation.curves[0].ap == pytest.approx(1.0)
    assert evaluation.grid[0] == (0, pytest.approx(0.5))  # worst first: F1 = 2*1 / (2*1 + 2)


def test_a_box_of_the_wrong_class_is_confusion_and_below_the_threshold_is_not_counted():
    results = [result(LABELS[0], [((10, 10, 60, 50), 1, 0.9),           # the cat taken for a dog
                                  ((100, 100, 300, 280), 1, 0.3)])]     # the dog, under 0.5
    evaluation = eval_report.evaluate(results, CLASSES, threshold=0.5)
    np.testing.assert_array_equal(evaluation.confusion, [[0, 1, 0], [0, 0, 1], [0, 0, 0]])
    lower = eval_report.confusion_matrix(results, 2, 0.5, 0.2)
    np.testing.assert_array_equal(lower, [[0, 1, 0], [0, 1, 0], [0, 0, 0]])


def test_a_known_precision_recall_curve_its_ap_and_its_best_f1_threshold():
    gt = [((0, 0, 50, 50), 0), ((100, 0, 150, 50), 0), ((200, 0, 250, 50), 0)]
    dets = [((0, 0, 50, 50), 0, 0.9),       # true
            ((300, 200, 350, 250), 0, 0.8),  # false
            ((100, 0, 150, 50), 0, 0.7),     # true
            ((0, 0, 50, 50), 0, 0.6)]        # the first object again: false
    curve = eval_report.precision_recall([result(gt, dets)], ["cat"])[0]
    np.testing.assert_allclose(curve.scores, [0.9, 0.8, 0.7, 0.6])
    np.testing.assert_allclose(curve.precision, [1.0, 0.5, 2 / 3, 0.5])
    np.testing.assert_allclose(curve.recall, [1 / 3, 1 / 3, 2 / 3, 2 / 3])
    # VOC07's 11 points: precision 1 at recall 0..0.3 (4 points), 2/3 at 0.4..0.6 (3), 0 above
    assert curve.ap == pytest.approx((4 * 1.0 + 3 * 2 / 3) / 11)
    best = eval_report.best_f1(curve)
    assert best == {"threshold": 0.7, "f1": pytest.approx(2 / 3), "precision": pytest.approx(2 / 3),
                    "recall": pytest.approx(2 / 3)}


def test_detections_of_equal_score_are_one_threshold():
    gt = [((0, 0, 50, 50), 0), ((100, 0, 150, 50), 0)]
    dets = [((0, 0, 50, 50), 0, 0.9), ((100, 0, 150, 50), 0, 0.5), ((300, 200, 350, 250), 0, 0.5)]
    best = eval_report.best_f1(eval_report.precision_recall([result(gt, dets)], ["cat"])[0])
    # at 0.9: P 1, R 0.5 (F1 0.667); at 0.5 both 0.5-score boxes count: P 2/3, R 1 (F1 0.8)
    assert best["threshold"] == 0.5 and best["f1"] == pytest.approx(0.8)


def test_a_class_without_labels_or_detections_has_no_threshold_and_no_ap():
    evaluation = eval_report.evaluate([result([((0, 0, 50, 50), 0)], [((0, 0, 50, 50), 0, 0.9)])],
                                      CLASSES)
    assert evaluation.thresholds["dog"] is None and np.isnan(evaluation.curves[1].ap)
    assert evaluation.mean_ap == pytest.approx(1.0)  # over the classes that have an AP


def test_a_difficult_object_is_neither_missed_nor_false():
    gt = [((0, 0, 50, 50), 0), ((100, 100, 200, 200), 1)]
    found = result(gt, [((100, 100, 200, 200), 1, 0.9)], difficult=[False, True])
    missed = result(gt, [], difficult=[False, True])
    np.testing.assert_array_equal(eval_report.confusion_matrix([found, missed], 2, 0.5, 0.5),
                                  [[0, 0, 2], [0, 0, 0], [0, 0, 0]])
    assert eval_report.precision_recall([found], CLASSES)[1].positives == 0


def test_ap_by_size_scores_each_size_apart():
    # the small cat missed, every other object found: small 0, medium and large 1
    results = perfect()
    results[1] = result(LABELS[1], [((200, 40, 380, 200), 0, 0.9)])
    sizes = eval_report.ap_by_size(results, CLASSES)
    assert sizes["small"]["per_class"]["cat"] == pytest.approx(0.0)
    assert sizes["medium"]["mAP"] == pytest.approx(1.0) and sizes["large"]["mAP"] == pytest.approx(1.0)
    assert 0.0 < sizes["all"]["per_class"]["cat"] < 1.0
    coco = eval_report.ap_by_size(perfect(), CLASSES, eval_report.COCO_IOUS)
    assert coco["all"]["mAP"] == pytest.approx(1.0)
    nothing = eval_report.ap_by_size([result(LABELS[0])], CLASSES)
    assert nothing["all"]["per_class"] == {"cat": 0.0, "dog": 0.0} and nothing["small"]["mAP"] is None


def test_the_grid_shows_the_worst_images_first_then_the_others_in_order():
    results = perfect() + [result(LABELS[0], [], name="blind")] + perfect()
    picks = eval_report.grid_choice(results, 0.5, 0.5, worst=2, others=3)
    assert picks[0] == (3, 0.0)
    assert [i for i, _ in picks[2:]] == [1, 2, 4]


def test_the_report_files_are_written_and_read_back(tmp_path):
    results = perfect()
    results[0] = result(LABELS[0], [((10, 10, 60, 50), 0, 0.9), ((320, 10, 390, 60), 1, 0.8)], name="first.jpg")
    evaluation, pictures, text = eval_report.write_evaluation(str(tmp_path), results, CLASSES)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(eval_report.FILES)
    for name in (eval_report.PR_FILE, eval_report.CONFUSION_FILE, eval_report.GRID_FILE):
        with Image.open(tmp_path / name) as img:
            assert img.format == "PNG" and img.width > 300
        assert (tmp_path / name).read_bytes() == pictures[name]
    with Image.open(io.BytesIO(pictures[eval_report.GRID_FILE])) as grid:
        assert grid.height > 3 * 200  # one row per image, three images
    rows = list(csv.reader(open(tmp_path / eval_report.CONFUSION_CSV)))
    assert rows[0] == ["labelled \\ predicted", "cat", "dog", "background"]
    assert rows[2] == ["dog", "0", "1", "1"] and rows[3] == ["background", "0", "1", "0"]
    thresholds = {row["class"]: row for row in csv.DictReader(open(tmp_path / eval_report.THRESHOLDS_CSV))}
    assert thresholds["cat"]["threshold"] == "0.9000" and thresholds["cat"]["F1"] == "1.0000"
    sizes = {row["class"]: row for row in csv.DictReader(open(tmp_path / eval_report.SIZE_CSV))}
    assert sizes["dog"]["small"] == "n/a" and sizes["cat"]["medium"] == "1.0000"
    markdown = (tmp_path / eval_report.REPORT_MD).read_text()
    assert markdown == text and "X-Amzn-SageMaker-Custom-Attributes" in markdown
    assert "| cat | 1.0000 | 3 | 0.9000 |" in markdown and "first.jpg (F1 0.50)" in markdown
    assert "IoU 0.50 and score >= 0.50" in markdown


def test_no_results_still_write_a_report(tmp_path):
    evaluation, _pictures, text = eval_report.write_evaluation(str(tmp_path), [], CLASSES)
    assert evaluation.images == 0 and evaluation.mean_ap == 0.0 and "0 image(s)" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(eval_report.FILES)
