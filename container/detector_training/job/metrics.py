"""The one source of SageMaker metric definitions (regexes over the job log).

The engine's hooks write these lines (core/hooks.py); the launcher passes ``METRIC_DEFINITIONS``
to the Estimator. The regexes match with or without mpirun's ``[1,0]<stdout>:`` prefix since they are
not anchored. Training metrics come from the per-epoch summary line (one point per epoch, global
over all ranks); ``validation:mAP`` is the tuning objective: VOC07 mAP at IoU 0.5 for voc and
custom, COCO's AP at IoU 0.50:0.95 for coco, always a fraction. ``validation:AP50`` is the AP at
IoU 0.5 (for VOC the same number as the mAP unless ``overlap_threshold`` moved the mAP's).
``train:throughput`` and ``train:progress`` are the built-in Object Detection algorithm's names
(its ``train:cross_entropy`` and ``train:smooth_l1`` are the SSD family's losses, and its
``validation:mAP`` is this image's objective). Mask R-CNN jobs add ``validation:mask_mAP`` and
``validation:mask_AP50`` (COCO's mask AP); their ``validation:mAP`` is the box AP. Both R-CNN
families add ``validation:rpn_recall`` (core/proposal_recall.py). The names come from the family
registry (each family's ``log_names`` and ``score_names``), which imports without mxnet, so the
launcher side can import this module. The list holds every family's definitions;
``definitions_for(family)`` those a family's job writes lines for.
"""

from detector_training import families

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf)"
# This rank's step time split (seconds per step): waiting for data, forward/backward, the update.
STEP_TIMES = ("step_data", "step_forward_backward", "step_update")
_COMMON = ("train:speed", "train:throughput", "train:progress", "train:data_wait_pct", "train:lr") \
    + tuple("train:%s_s" % n for n in STEP_TIMES)


def metric_definitions():
    """Every registered family's definitions (read from the registry when called)."""
    registered = families.all_families()
    train = tuple(dict.fromkeys(n for family in registered for n in family.log_names))
    scores = tuple(dict.fromkeys(n for family in registered for n in family.score_names))
    return (
        [{"Name": "train:%s" % name, "Regex": r"\] summary: .* %s=%s" % (name, _NUMBER)}
         for name in train]
        + [
            {"Name": "train:speed", "Regex": r"\] summary: time=\S+ speed=%s samples/s" % _NUMBER},
            # The built-in Object Detection algorithm's names for what it logs (records/s; the
            # share of the epochs done), so a tuning job written for it finds them here too.
            {"Name": "train:throughput", "Regex": r"\] summary: time=\S+ speed=%s samples/s" % _NUMBER},
            {"Name": "train:progress", "Regex": r"\] summary: .* progress=%s%%" % _NUMBER},
            {"Name": "train:data_wait_pct", "Regex": r"\] summary: .* data_wait=%s%%" % _NUMBER},
            {"Name": "train:lr", "Regex": r"\] summary: .* lr=%s" % _NUMBER},
        ]
        + [{"Name": "train:%s_s" % name, "Regex": r"\] summary: .* %s=%ss" % (name, _NUMBER)}
           for name in STEP_TIMES]
        # validation: epoch=3 images=24 time=10.2s mAP=0.2604 AP50=0.2604 [mask_mAP=... mask_AP50=...]
        # rpn_recall=0.91; a score is found by its name after a space (mAP is not mask_mAP's tail).
        + [{"Name": "validation:%s" % name,
            "Regex": r"validation: epoch=\d+ images=\d+ time=\S+.* %s=%s" % (name, _NUMBER)}
           for name in scores]
    )


METRIC_DEFINITIONS = metric_definitions()  # the built-in families', sent with every job
OBJECTIVE_METRIC = "validation:mAP"


def definitions_for(family):
    """The definitions a job of the family named ``family`` fills: its own train:* losses and
    metrics and validation scores, and the shared ones (speed, data wait, lr, step times). The definitions
    sent with every job hold every family's; those of other families simply get no data points."""
    declared = families.get_by_name(family)
    names = set(_COMMON) | {"train:%s" % n for n in declared.log_names} \
        | {"validation:%s" % n for n in declared.score_names}
    return [d for d in metric_definitions() if d["Name"] in names]
