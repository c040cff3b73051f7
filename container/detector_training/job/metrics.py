"""The one source of SageMaker metric definitions (regexes over the job log).

The engine writes these lines (core/engine.py); the launcher passes ``METRIC_DEFINITIONS`` to the
Estimator. The regexes match with or without mpirun's ``[1,0]<stdout>:`` prefix since they are
not anchored. Training metrics come from the per-epoch summary line (one point per epoch, global
over all ranks); ``validation:mAP`` is the tuning objective: VOC07 mAP at IoU 0.5 for voc and
custom, COCO's AP at IoU 0.50:0.95 for coco, always a fraction. ``validation:AP50`` is the AP at
IoU 0.5 (for VOC the same number as the mAP).
"""

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf)"
# Each family's losses and metrics as its summary line names them (families/<family>.py's
# loss_names + metric_names; a test keeps the two equal). Kept here as plain names so that this
# module stays importable without mxnet (the launcher side imports it).
TRAIN_METRICS = {
    "faster_rcnn": ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss",
                    "rpn_acc", "rpn_l1", "rcnn_acc", "rcnn_l1"),
    "yolo3": ("obj_loss", "center_loss", "scale_loss", "cls_loss"),
}
_TRAIN = tuple(dict.fromkeys(n for names in TRAIN_METRICS.values() for n in names))

METRIC_DEFINITIONS = (
    [{"Name": "train:%s" % name, "Regex": r"\] summary: .* %s=%s" % (name, _NUMBER)} for name in _TRAIN]
    + [
        {"Name": "train:speed", "Regex": r"\] summary: time=\S+ speed=%s samples/s" % _NUMBER},
        {"Name": "train:data_wait_pct", "Regex": r"\] summary: .* data_wait=%s%%" % _NUMBER},
        {"Name": "train:lr", "Regex": r"\] summary: .* lr=%s" % _NUMBER},
        {"Name": "validation:mAP", "Regex": r"validation: epoch=\d+ images=\d+ time=\S+ mAP=%s" % _NUMBER},
        {"Name": "validation:AP50", "Regex": r"validation: epoch=\d+ images=\d+ time=\S+ mAP=\S+ AP50=%s" % _NUMBER},
    ]
)

OBJECTIVE_METRIC = "validation:mAP"


def definitions_for(family):
    """The definitions a job of ``family`` (a TRAIN_METRICS key) fills: its own train:* losses
    and metrics, and the shared ones (speed, data wait, lr, validation). METRIC_DEFINITIONS, sent
    with every job, holds every family's; those of other families simply get no data points."""
    others = {"train:%s" % n for f, names in TRAIN_METRICS.items() if f != family for n in names}
    own = {"train:%s" % n for n in TRAIN_METRICS[family]}
    return [d for d in METRIC_DEFINITIONS if d["Name"] in own or d["Name"] not in others]
