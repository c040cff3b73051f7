"""The one source of SageMaker metric definitions (regexes over the job log).

The engine writes these lines (core/engine.py); the launcher passes ``METRIC_DEFINITIONS`` to the
Estimator. The regexes match with or without mpirun's ``[1,0]<stdout>:`` prefix since they are
not anchored. Training metrics come from the per-epoch summary line (one point per epoch, global
over all ranks); ``validation:mAP`` is the tuning objective: VOC07 mAP at IoU 0.5 for voc and
custom, COCO's AP at IoU 0.50:0.95 for coco, always a fraction. ``validation:AP50`` is the AP at
IoU 0.5 (for VOC the same number as the mAP). Mask R-CNN jobs add ``validation:mask_mAP`` and
``validation:mask_AP50`` (COCO's mask AP); their ``validation:mAP`` is the box AP. Both R-CNN
families add ``validation:rpn_recall`` (core/proposal_recall.py). The list holds
every family's definitions; ``definitions_for(family)`` those a family's job writes lines for.
"""

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf)"
# Each family's losses and metrics as its summary line names them (families/<family>.py's
# loss_names + metric_names; a test keeps the two equal). Kept here as plain names so that this
# module stays importable without mxnet (the launcher side imports it).
TRAIN_METRICS = {
    "faster_rcnn": ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss",
                    "rpn_acc", "rpn_l1", "rcnn_acc", "rcnn_l1"),
    "mask_rcnn": ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss",
                  "rcnn_mask_loss", "rpn_acc", "rpn_l1", "rcnn_acc", "rcnn_l1", "mask_acc",
                  "mask_fg_acc"),
    "yolo3": ("obj_loss", "center_loss", "scale_loss", "cls_loss"),
}
# Each family's validation scores as its validation line names them, in that order (the
# families' score_names; a test keeps the two equal).
VALIDATION_SCORES = {
    "faster_rcnn": ("mAP", "AP50", "rpn_recall"),
    "mask_rcnn": ("mAP", "AP50", "mask_mAP", "mask_AP50", "rpn_recall"),
    "yolo3": ("mAP", "AP50"),
}
_TRAIN = tuple(dict.fromkeys(n for names in TRAIN_METRICS.values() for n in names))
_SCORES = tuple(dict.fromkeys(n for names in VALIDATION_SCORES.values() for n in names))
# This rank's step time split (seconds per step): waiting for data, forward/backward, the update.
STEP_TIMES = ("step_data", "step_forward_backward", "step_update")
_COMMON = ("train:speed", "train:data_wait_pct", "train:lr") + tuple("train:%s_s" % n for n in STEP_TIMES)

METRIC_DEFINITIONS = (
    [{"Name": "train:%s" % name, "Regex": r"\] summary: .* %s=%s" % (name, _NUMBER)} for name in _TRAIN]
    + [
        {"Name": "train:speed", "Regex": r"\] summary: time=\S+ speed=%s samples/s" % _NUMBER},
        {"Name": "train:data_wait_pct", "Regex": r"\] summary: .* data_wait=%s%%" % _NUMBER},
        {"Name": "train:lr", "Regex": r"\] summary: .* lr=%s" % _NUMBER},
    ]
    + [{"Name": "train:%s_s" % name, "Regex": r"\] summary: .* %s=%ss" % (name, _NUMBER)}
       for name in STEP_TIMES]
    # validation: epoch=3 images=24 time=10.2s mAP=0.2604 AP50=0.2604 [mask_mAP=... mask_AP50=...]
    # rpn_recall=0.91; a score is found by its name after a space (mAP is not mask_mAP's tail).
    + [{"Name": "validation:%s" % name,
        "Regex": r"validation: epoch=\d+ images=\d+ time=\S+.* %s=%s" % (name, _NUMBER)}
       for name in _SCORES]
)

OBJECTIVE_METRIC = "validation:mAP"


def definitions_for(family):
    """The definitions a job of ``family`` fills: its own train:* losses and metrics and
    validation scores, and the shared ones (speed, data wait, lr). METRIC_DEFINITIONS, sent with
    every job, holds every family's; those of other families simply get no data points."""
    names = set(_COMMON) | {"train:%s" % n for n in TRAIN_METRICS[family]} \
        | {"validation:%s" % n for n in VALIDATION_SCORES[family]}
    return [d for d in METRIC_DEFINITIONS if d["Name"] in names]
