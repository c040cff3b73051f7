"""The evaluation report: what a model finds on labelled images, as pictures and tables.

Input: one :class:`ImageResult` per image (labelled boxes and the model's detections, in pixels,
class indices into ``classes``), whichever family or data format produced them. Output, in the
model directory (``write_evaluation``) and as images and text for TensorBoard:

* ``precision_recall.png``: each class's precision-recall curve at the IoU threshold, its AP
  (GluonCV's VOC07 metric, which does the matching) in the legend;
* ``confusion_matrix.png`` / ``.csv``: true class (rows) against predicted class (columns) at
  the IoU and a stated score threshold, with a background row (false detections) and column
  (missed objects);
* ``ap_by_size.csv``: AP of small, medium and large objects (COCO's areas: 32² and 96² pixels of
  box area), from pycocotools at the given IoU thresholds, also for VOC-style data;
* ``score_thresholds.csv``: per class, the score threshold that maximises F1 (the value to put in
  ``X-Amzn-SageMaker-Custom-Attributes``), with the precision and recall there;
* ``validation_images.png``: held-out images with the labelled boxes beside the predicted ones,
  the worst-scoring images (lowest F1 per image) first;
* ``evaluation.md``: every table above on one page.

The numbers are pure functions of the results (numpy, GluonCV's VOC metric, pycocotools); the
pictures are drawn with matplotlib's Agg backend.
"""

import contextlib
import csv
import io
import math
import os
from dataclasses import dataclass, field

import numpy as np

from detector_training.core.files import atomic_write

PR_FILE = "precision_recall.png"
CONFUSION_FILE = "confusion_matrix.png"
CONFUSION_CSV = "confusion_matrix.csv"
SIZE_CSV = "ap_by_size.csv"
THRESHOLDS_CSV = "score_thresholds.csv"
GRID_FILE = "validation_images.png"
REPORT_MD = "evaluation.md"
FILES = (PR_FILE, CONFUSION_FILE, CONFUSION_CSV, SIZE_CSV, THRESHOLDS_CSV, GRID_FILE, REPORT_MD)

BACKGROUND = "background"
VALIDATION_IOU = 0.5  # the IoU the validation's VOC07 metric matches at (core/evaluation.py)
SIZES = ("all", "small", "medium", "large")  # pycocotools' default area ranges, in its order
AREAS = {"all": (0, 1e5 ** 2), "small": (0, 32 ** 2), "medium": (32 ** 2, 96 ** 2),
         "large": (96 ** 2, 1e5 ** 2)}  # as pycocotools' Params.areaRng (pixels of box area)
COCO_IOUS = tuple(np.round(np.linspace(0.5, 0.95, 10), 2))  # COCO's 0.50:0.95
GRID_WORST, GRID_OTHERS = 4, 4  # images in the grid: the worst ones, then the first others
# Colours of the grid: labelled boxes green, predicted orange (what is which, at a glance).
LABEL_COLOUR, PREDICTION_COLOUR = "#1a9850", "#f46d43"


@dataclass
class ImageResult:
    """One image: its labelled boxes and the model's detections, corners (x0, y0, x1, y1) in the
    image's pixels, labels as indices into the class list. ``load``: () -> the RGB pixels (for
    the grid only)."""

    name: str
    width: int
    height: int
    gt_boxes: np.ndarray
    gt_labels: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    gt_difficult: np.ndarray = None
    load: object = field(default=None, repr=False)

    def __post_init__(self):
        self.gt_boxes = np.asarray(self.gt_boxes, dtype=np.float64).reshape((-1, 4))
        self.gt_labels = np.asarray(self.gt_labels, dtype=np.int64).reshape((-1,))
        self.boxes = np.asarray(self.boxes, dtype=np.float64).reshape((-1, 4))
        self.labels = np.asarray(self.labels, dtype=np.int64).reshape((-1,))
        self.scores = np.asarray(self.scores, dtype=np.float64).reshape((-1,))
        difficult = np.zeros(len(self.gt_labels)) if self.gt_difficult is None else self.gt_difficult
        self.gt_difficult = np.asarray(difficult, dtype=bool).reshape((-1,))


# --- numbers -----------------------------------------------------------------------------------

@dataclass
class ClassCurve:
    """A class's precision-recall curve: detections best first (``scores``), the precision and
    recall after each, the VOC07 AP and the number of (not difficult) labelled objects."""

    name: str
    ap: float
    positives: int
    scores: np.ndarray
    precision: np.ndarray
    recall: np.ndarray


def precision_recall(results, classes, iou=0.5):
    """Each class's curve, matched and scored by GluonCV's VOC07MApMetric (detections best first,
    each to the labelled box it overlaps most; a second detection of one object is false)."""
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    metric = VOC07MApMetric(iou_thresh=iou, class_names=list(classes))
    for r in results:
        metric.update(r.boxes[None], r.labels[None, :, None], r.scores[None, :, None],
                      r.gt_boxes[None], r.gt_labels[None, :, None], r.gt_difficult[None, :, None])
    aps = [float(v) for v in np.atleast_1d(metric.get()[1])[:-1]] if metric._n_pos else []  # pylint: disable=protected-access
    curves = []
    for index, name in enumerate(classes):
        # The metric's own records (per class: scores and 1/0/-1 for true/false/ignored), ordered
        # as its _recall_prec orders them.
        scores = np.array(metric._score.get(index, []), dtype=np.float64)  # pylint: disable=protected-access
        match = np.array(metric._match.get(index, []), dtype=np.int64)  # pylint: disable=protected-access
        order = scores.argsort()[::-1]
        scores, match = scores[order], match[order]
        positives = int(metric._n_pos.get(index, 0))  # pylint: disable=protected-access
        true, false = np.cumsum(match == 1), np.cumsum(match == 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = np.where(true + false > 0, true / np.maximum(true + false, 1), np.nan)
        recall = true / positives if positives else np.full(len(true), np.nan)
        ap = aps[index] if index < len(aps) and positives else float("nan")
        curves.append(ClassCurve(name, ap, positives, scores, precision, recall))
    return curves


def best_f1(curve):
    """``{"threshold", "f1", "precision", "recall"}`` at the score threshold with the highest F1
    on ``curve`` (only between detections of different scores), or None when the class has no
    labelled object or no detection."""
    if not curve.positives or not len(curve.scores):
        return None
    last_of_score = np.append(curve.scores[1:] != curve.scores[:-1], True)
    precision = np.nan_to_num(curve.precision[last_of_score])
    recall = curve.recall[last_of_score]
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    best = int(np.argmax(f1))
    return {"threshold": float(curve.scores[last_of_score][best]), "f1": float(f1[best]),
            "precision": float(precision[best]), "recall": float(recall[best])}


def box_iou(a, b):
    """IoU of every box in ``a`` with every box in ``b``, in VOC's integer-pixel convention (the
    one the VOC metric matches with)."""
    from gluoncv.utils.bbox import bbox_iou

    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    return bbox_iou(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), offset=1)


@dataclass
class ImageMatch:
    """An image's detections at a score threshold against its labelled boxes: ``correct``
    (labelled, detected) index pairs of the same class; ``confused``: pairs of different classes;
    ``false``: detections of nothing; ``missed``: labelled objects no detection found. Difficult
    objects are neither missed nor, when detected, false."""

    correct: list
    confused: list
    false: list
    missed: list


def match_image(result, iou, threshold):
    """Detections with score >= ``threshold``, best first, each to the labelled box of its class
    it overlaps most (VOC's rule: one detection per object); the rest to the unmatched labelled
    box of any class they overlap most, at IoU >= ``iou``."""
    keep = np.where(result.scores >= threshold)[0]
    keep = keep[np.argsort(-result.scores[keep], kind="stable")]
    overlaps = box_iou(result.boxes[keep], result.gt_boxes)
    taken = np.zeros(len(result.gt_labels), dtype=bool)
    correct, confused, false, pending = [], [], [], []
    for row, det in enumerate(keep):
        same = np.where(result.gt_labels == result.labels[det], overlaps[row], -1.0)
        gt = int(np.argmax(same)) if len(same) else -1
        if gt >= 0 and same[gt] >= iou:
            if result.gt_difficult[gt]:
                continue  # a difficult object found: ignored, as the metric does
            if not taken[gt]:
                taken[gt] = True
                correct.append((gt, int(det)))
                continue
        pending.append((row, int(det)))
    for row, det in pending:
        free = np.where(taken, -1.0, overlaps[row])
        gt = int(np.argmax(free)) if len(free) else -1
        if gt >= 0 and free[gt] >= iou:
            if result.gt_difficult[gt]:
                continue
            taken[gt] = True
            confused.append((gt, det))
        else:
            false.append(det)
    missed = [int(g) for g in np.where(~taken & ~result.gt_difficult)[0]]
    return ImageMatch(correct, confused, false, missed)


def confusion_matrix(results, class_count, iou, threshold):
    """Counts (class_count + 1) x (class_count + 1): row = labelled class, column = predicted
    class, the last row and column background (a false detection: background row; a missed
    object: background column)."""
    matrix = np.zeros((class_count + 1, class_count + 1), dtype=np.int64)
    background = class_count
    for result in results:
        found = match_image(result, iou, threshold)
        for gt, det in found.correct + found.confused:
            matrix[result.gt_labels[gt], result.labels[det]] += 1
        for det in found.false:
            matrix[background, result.labels[det]] += 1
        for gt in found.missed:
            matrix[result.gt_labels[gt], background] += 1
    return matrix


def image_f1(result, iou, threshold):
    """F1 of one image's detections at the threshold (confused ones count as false and missed);
    1.0 for an image with nothing labelled and nothing detected."""
    found = match_image(result, iou, threshold)
    correct = len(found.correct)
    wrong = len(found.false) + len(found.missed) + 2 * len(found.confused)
    return 1.0 if correct + wrong == 0 else 2.0 * correct / (2.0 * correct + wrong)


def ap_by_size(results, classes, ious=(0.5,)):
    """``{size: {"mAP": AP or None, "per_class": {name: AP or None}}}`` for the sizes of SIZES, by
    pycocotools at the IoU thresholds ``ious`` (COCO_IOUS for COCO's AP), 100 detections per
    image. None: no labelled object of that size (and class). Difficult objects are ignored (as
    COCO's crowd regions)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, labelled, detected = [], [], []
    for image_id, r in enumerate(results, start=1):
        images.append({"id": image_id, "width": int(r.width), "height": int(r.height)})
        for box, label, difficult in zip(r.gt_boxes, r.gt_labels, r.gt_difficult):
            width, height = box[2] - box[0], box[3] - box[1]
            labelled.append({"id": len(labelled) + 1, "image_id": image_id, "category_id": int(label) + 1,
                             "bbox": [float(box[0]), float(box[1]), float(width), float(height)],
                             "area": float(width * height), "iscrowd": int(difficult)})
        for box, label, score in zip(r.boxes, r.labels, r.scores):
            detected.append({"image_id": image_id, "category_id": int(label) + 1, "score": float(score),
                             "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]),
                                      float(box[3] - box[1])]})
    per_size = {size: {"mAP": None, "per_class": {name: None for name in classes}} for size in SIZES}
    if not labelled:
        return per_size
    ground_truth = COCO()
    ground_truth.dataset = {"images": images, "annotations": labelled,
                            "categories": [{"id": i + 1, "name": n} for i, n in enumerate(classes)]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        ground_truth.createIndex()
        if detected:
            evaluation = COCOeval(ground_truth, ground_truth.loadRes(detected), "bbox")
            evaluation.params.iouThrs = np.array(ious, dtype=np.float64)
            evaluation.evaluate()
            evaluation.accumulate()
            precision = evaluation.eval["precision"]  # (IoU, recall, class, area, max dets)
    for area, size in enumerate(SIZES):
        for index, name in enumerate(classes):
            low, high = AREAS[size]
            if not any(a["category_id"] == index + 1 and not a["iscrowd"] and low <= a["area"] <= high
                       for a in labelled):
                continue
            if not detected:
                per_size[size]["per_class"][name] = 0.0
                continue
            values = precision[:, :, index, area, -1]
            values = values[values > -1]
            per_size[size]["per_class"][name] = float(values.mean()) if values.size else 0.0
        defined = [v for v in per_size[size]["per_class"].values() if v is not None]
        per_size[size]["mAP"] = float(np.mean(defined)) if defined else None
    return per_size


def grid_choice(results, iou, threshold, worst=GRID_WORST, others=GRID_OTHERS):
    """``[(index, F1)]`` of the images the grid shows: the ``worst`` lowest F1 (more labelled
    objects first among equals), then the first ``others`` of the rest in their order."""
    scores = [image_f1(r, iou, threshold) for r in results]
    ranked = sorted(range(len(results)), key=lambda i: (scores[i], -len(results[i].gt_labels), i))
    chosen = ranked[:worst]
    chosen += [i for i in range(len(results)) if i not in chosen][:others]
    return [(i, scores[i]) for i in chosen]


@dataclass
class Evaluation:
    """Everything the report shows, computed from the results."""

    classes: list
    iou: float
    threshold: float
    images: int
    curves: list
    thresholds: dict  # class -> best_f1(...) or None
    confusion: np.ndarray
    sizes: dict
    size_ious: tuple
    grid: list  # [(index, F1)]

    @property
    def mean_ap(self):
        defined = [c.ap for c in self.curves if not math.isnan(c.ap)]
        return float(np.mean(defined)) if defined else 0.0


def evaluate(results, classes, iou=0.5, threshold=0.5, size_ious=(0.5,)):
    """The report's numbers (see the module doc) for ``results`` of a model on labelled images."""
    classes = list(classes)
    curves = precision_recall(results, classes, iou)
    return Evaluation(classes=classes, iou=float(iou), threshold=float(threshold), images=len(results),
                      curves=curves, thresholds={c.name: best_f1(c) for c in curves},
                      confusion=confusion_matrix(results, len(classes), iou, threshold),
                      sizes=ap_by_size(results, classes, size_ious), size_ious=tuple(size_ious),
                      grid=grid_choice(results, iou, threshold))


# --- pictures ----------------------------------------------------------------------------------

def _figure(width, height, dpi=100):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=dpi)


def _png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def precision_recall_png(evaluation):
    fig = _figure(7, 5.5)
    axes = fig.subplots()
    drawn = 0
    for curve in evaluation.curves:
        if curve.positives and len(curve.scores):
            axes.plot(np.concatenate(([0.0], curve.recall)), np.concatenate(([1.0], np.nan_to_num(curve.precision))),
                      drawstyle="steps-post", label="%s (AP %.3f)" % (curve.name, curve.ap))
            drawn += 1
    axes.set_xlim(0, 1.0)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("recall")
    axes.set_ylabel("precision")
    axes.set_title("Precision-recall per class at IoU %.2f (mAP %.3f, VOC07 AP)" % (evaluation.iou, evaluation.mean_ap))
    axes.grid(True, alpha=0.3)
    if drawn:
        axes.legend(fontsize="small", loc="lower left", ncol=1 if drawn <= 12 else 2)
    else:
        axes.text(0.5, 0.5, "no detection of a labelled class", ha="center", va="center",
                  transform=axes.transAxes)
    fig.tight_layout()
    return _png(fig)


def confusion_png(evaluation):
    names = evaluation.classes + [BACKGROUND]
    side = min(20, 3 + 0.45 * len(names))
    fig = _figure(side + 1, side)
    axes = fig.subplots()
    matrix = evaluation.confusion
    image = axes.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    axes.set_xticks(range(len(names)))
    axes.set_yticks(range(len(names)))
    axes.set_xticklabels(names, rotation=60, ha="right", fontsize="small")
    axes.set_yticklabels(names, fontsize="small")
    axes.set_xlabel("predicted (background: missed objects)")
    axes.set_ylabel("labelled (background: false detections)")
    if len(names) <= 31:
        top = matrix.max() if matrix.size else 0
        for (row, col), count in np.ndenumerate(matrix):
            axes.text(col, row, str(count), ha="center", va="center", fontsize="small",
                      color="white" if top and count > top / 2 else "black")
    axes.set_title("Confusion at IoU %.2f, score >= %.2f" % (evaluation.iou, evaluation.threshold))
    fig.tight_layout()
    return _png(fig)


def grid_png(evaluation, results):
    rows = evaluation.grid
    fig = _figure(9, 3.2 * max(1, len(rows)), dpi=80)  # up to 8 rows: keep the PNG small
    if not rows:
        fig.text(0.5, 0.5, "no validation image", ha="center")
        return _png(fig)
    axes = fig.subplots(len(rows), 2, squeeze=False)
    for (index, f1), (left, right) in zip(rows, axes):
        result = results[index]
        pixels = result.load() if result.load is not None else np.full((result.height, result.width, 3), 255, np.uint8)
        keep = result.scores >= evaluation.threshold
        for ax, boxes, labels, scores, colour, title in (
                (left, result.gt_boxes, result.gt_labels, None, LABEL_COLOUR, "labelled"),
                (right, result.boxes[keep], result.labels[keep], result.scores[keep], PREDICTION_COLOUR,
                 "predicted (score >= %.2f), image F1 %.2f" % (evaluation.threshold, f1))):
            ax.imshow(pixels)
            ax.set_axis_off()
            ax.set_title("%s: %s" % (result.name, title), fontsize="small")
            _draw_boxes(ax, boxes, labels, scores, colour, evaluation.classes)
    fig.tight_layout()
    return _png(fig)


def _draw_boxes(ax, boxes, labels, scores, colour, classes):
    from matplotlib.patches import Rectangle

    for i, (box, label) in enumerate(zip(boxes, labels)):
        ax.add_patch(Rectangle((box[0], box[1]), box[2] - box[0], box[3] - box[1], fill=False,
                               edgecolor=colour, linewidth=1.5))
        text = classes[label] if 0 <= label < len(classes) else str(label)
        if scores is not None:
            text += " %.2f" % scores[i]
        ax.text(box[0], box[1], text, fontsize=6, color="white", va="bottom",
                bbox={"facecolor": colour, "edgecolor": "none", "pad": 1})


# --- tables ------------------------------------------------------------------------------------

def _fmt(value, digits=3):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else "%.*f" % (digits, value)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _csv(rows):
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def size_rows(evaluation):
    rows = [["class"] + list(SIZES)]
    rows += [[name] + [_fmt(evaluation.sizes[s]["per_class"][name], 4) for s in SIZES]
             for name in evaluation.classes]
    rows.append(["mAP"] + [_fmt(evaluation.sizes[s]["mAP"], 4) for s in SIZES])
    return rows


def threshold_rows(evaluation):
    rows = [["class", "AP", "objects", "threshold", "F1", "precision", "recall"]]
    for curve in evaluation.curves:
        best = evaluation.thresholds[curve.name] or {}
        rows.append([curve.name, _fmt(curve.ap, 4), str(curve.positives)]
                    + [_fmt(best.get(k), 4) for k in ("threshold", "f1", "precision", "recall")])
    return rows


def confusion_rows(evaluation):
    names = evaluation.classes + [BACKGROUND]
    return [["labelled \\ predicted"] + names] + [[name] + [str(int(v)) for v in row]
                                                 for name, row in zip(names, evaluation.confusion)]


def _md_table(rows):
    lines = ["| %s |" % " | ".join(_cell(c) for c in rows[0]),
             "| --- |" + " ---: |" * (len(rows[0]) - 1)]
    lines += ["| %s |" % " | ".join(_cell(c) for c in row) for row in rows[1:]]
    return "\n".join(lines)


def markdown(evaluation, names=None):
    """The report's page; ``names``: the images' names (the grid's images are named by them)."""
    size_iou = ("%.2f" % evaluation.size_ious[0] if len(evaluation.size_ious) == 1
                else "%.2f:%.2f" % (evaluation.size_ious[0], evaluation.size_ious[-1]))
    worst = ", ".join("%s (F1 %.2f)" % (names[i] if names else "#%d" % i, f1)
                      for i, f1 in evaluation.grid[:GRID_WORST])
    return "\n".join([
        "# Evaluation", "",
        "%d image(s), %d class(es). mAP %.4f (VOC07 AP at IoU %.2f)." % (
            evaluation.images, len(evaluation.classes), evaluation.mean_ap, evaluation.iou), "",
        "## Score threshold with the best F1, per class", "",
        "Send the threshold as `X-Amzn-SageMaker-Custom-Attributes: threshold=...` (or set "
        "`DETECTOR_SCORE_THRESHOLD`) to answer with that trade-off.", "",
        _md_table(threshold_rows(evaluation)), "",
        "## AP by object size", "",
        "pycocotools at IoU %s, box area: small < 32², medium 32²-96², large > 96² pixels; "
        "n/a: no labelled object of that size." % size_iou, "",
        _md_table(size_rows(evaluation)), "",
        "## Confusion at IoU %.2f and score >= %.2f" % (evaluation.iou, evaluation.threshold), "",
        "Rows: labelled class; columns: predicted class. The background row counts false "
        "detections, the background column missed objects.", "",
        _md_table(confusion_rows(evaluation)), "",
        "## Pictures", "",
        "`%s`, `%s`, `%s` (the images with the lowest F1 first: %s)." % (
            PR_FILE, CONFUSION_FILE, GRID_FILE, worst or "none"), ""])


def write_evaluation(model_dir, results, classes, iou=0.5, threshold=0.5, size_ious=(0.5,)):
    """Evaluate ``results`` and write the report's files (FILES) into ``model_dir``, each
    atomically. Returns ``(evaluation, {file name: PNG bytes}, markdown text)`` for TensorBoard."""
    evaluation = evaluate(results, classes, iou, threshold, size_ious)
    pictures = {PR_FILE: precision_recall_png(evaluation), CONFUSION_FILE: confusion_png(evaluation),
                GRID_FILE: grid_png(evaluation, results)}
    text = markdown(evaluation, [r.name for r in results])
    tables = {CONFUSION_CSV: _csv(confusion_rows(evaluation)), SIZE_CSV: _csv(size_rows(evaluation)),
              THRESHOLDS_CSV: _csv(threshold_rows(evaluation)), REPORT_MD: text}
    os.makedirs(model_dir, exist_ok=True)
    for name, data in list(pictures.items()) + [(k, v.encode("utf-8")) for k, v in tables.items()]:
        atomic_write(os.path.join(model_dir, name), lambda handle, data=data: handle.write(data))
    return evaluation, pictures, text
