"""TensorBoard event files of whole jobs (core/tensorboard_events.py), read back with TensorBoard's
own reader: a two-rank job stopped by SIGTERM mid-epoch and resumed writes one set of curves in
/opt/ml/output/tensorboard, every step once, from rank 0 only."""

import os

import pytest

from conftest import make_job, stop_mid_epoch_and_resume
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


@pytest.mark.timeout(2400)  # two jobs, each with its own deadlines (stop_mid_epoch_and_resume)
def test_a_stopped_and_resumed_two_rank_job_continues_its_curves(job_dir):
    steps = 6  # 12 images, global batch 2
    base = make_job(job_dir, {"epochs": "2", "batch_size": "2", "log_interval": "1",
                              "processes_per_host": "2"}, n_train=12, n_test=2)
    _took, _out, _result = stop_mid_epoch_and_resume(base, 2, steps)
    log_dir = os.path.join(base, "output", "tensorboard")
    files = sorted(os.listdir(log_dir))
    assert len(files) == 2, files  # rank 0 of each run; the other rank writes none
    events = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    every_step = list(range(1, 2 * steps + 1))
    for name in ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss", "rpn_acc",
                 "rcnn_acc", "lr", "speed", "data_wait_pct"):
        assert [e.step for e in events.Scalars("train/" + name)] == every_step, name
    for name in ("rcnn_cls_loss", "speed", "data_wait_pct", "step_data_s", "step_forward_backward_s",
                 "step_update_s"):
        assert [e.step for e in events.Scalars("epoch/" + name)] == [steps, 2 * steps], name
    for name in ("validation/mAP", "validation/AP50", "validation/rpn_recall", "validation/time_s"):
        assert [e.step for e in events.Scalars(name)] == [steps, 2 * steps], name
    assert {t for t in tags if t.startswith("per_class_AP/")} == {
        "per_class_AP/circle", "per_class_AP/square", "per_class_AP/triangle"}
    resumed_at = int(files[1].rsplit(".step", 1)[1])
    assert 0 < resumed_at < steps
    assert [t.step for t in events.Tensors("config/text_summary")] == [0, resumed_at]
