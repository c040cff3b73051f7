"""TensorBoard event files (core/tensorboard_events.py) written by the engine's hook and read back
with TensorBoard's own reader: the tags and steps of a run, the effective configuration as text,
and a stopped and resumed run that continues the same curves without a step twice."""

import io
import json

import mxnet as mx
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from detector_training.core.checkpoint import CheckpointManager, Position, load_latest
from detector_training.core.engine import Hook
from detector_training.core.hooks import (CheckpointHook, EpochSetupHook, MetricLogHook, StopHook,
                                          ValidationHook)
from detector_training.core.tensorboard_events import TensorBoardHook
from test_engine import STEPS, Batches, make_engine, tiny_net


def read_events(log_dir):
    """Every scalar and text the folder's event files hold, as TensorBoard reads them."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    events.Reload()
    return events


def steps(events, tag):
    return [e.step for e in events.Scalars(tag)]


def validation(aps):
    return lambda: {"mAP": next(aps), "AP50": 0.9, "per_class": {"cat": 0.25, "dog": 0.75},
                    "mask_per_class": {"cat": 0.1, "dog": 0.2}, "images": 2}


def test_a_run_writes_every_curve_at_its_global_step(tmp_path):
    log_dir = tmp_path / "tensorboard"
    hooks = [MetricLogHook(), ValidationHook(validation(iter([0.3, 0.6])), lambda engine: None),
             TensorBoardHook(str(log_dir), {"lr": 0.01, "network": "tiny"})]
    engine = make_engine(tmp_path, hooks, epochs=2)  # 4 steps an epoch, log_interval 2
    engine.run()
    events = read_events(log_dir)
    scalars = set(events.Tags()["scalars"])
    for name in ("fit_loss", "fit_error", "lr", "speed", "data_wait_pct"):
        assert steps(events, "train/" + name) == [2, 4, 6, 8]
    for name in ("fit_loss", "speed", "data_wait_pct", "time_s", "step_data_s",
                 "step_forward_backward_s", "step_update_s"):
        assert steps(events, "epoch/" + name) == [4, 8]
    assert [e.value for e in events.Scalars("validation/mAP")] == pytest.approx([0.3, 0.6])
    assert steps(events, "validation/AP50") == [4, 8]
    assert [e.value for e in events.Scalars("per_class_AP/dog")] == pytest.approx([0.75, 0.75])
    assert {"per_class_AP/cat", "per_class_mask_AP/cat", "per_class_mask_AP/dog"} <= scalars
    # the values are the job's: at an epoch's last step the running mean is the epoch's mean
    assert [e.value for e in events.Scalars("train/fit_loss")][1::2] == pytest.approx(
        [h["fit_loss"] for h in engine.history])
    assert [e.value for e in events.Scalars("epoch/fit_loss")] == pytest.approx(
        [h["fit_loss"] for h in engine.history])
    text = events.Tensors("config/text_summary")[0]
    assert text.step == 0
    assert json.loads(text.tensor_proto.string_val[0].decode().strip("`\n")) == {"lr": 0.01,
                                                                                 "network": "tiny"}


def test_only_the_main_rank_writes(tmp_path):
    from detector_training.core.distributed import World

    engine = make_engine(tmp_path, [MetricLogHook(), TensorBoardHook(str(tmp_path / "tb"), {})],
                         epochs=1, world=World(rank=1, size=2))
    engine.run()
    assert not (tmp_path / "tb").exists()


class PublishAtTheEnd(Hook):
    """What the final model's hook does with the evaluation report: publish a picture and a page."""

    def after_train(self, engine):
        buffer = io.BytesIO()
        Image.new("RGB", (40, 30), (250, 10, 10)).save(buffer, format="PNG")
        engine.pictures["evaluation/precision_recall"] = buffer.getvalue()
        engine.texts["evaluation/report"] = "# Evaluation"


def test_pictures_and_texts_published_at_the_end_are_written_at_the_last_step(tmp_path):
    log_dir = tmp_path / "tensorboard"
    engine = make_engine(tmp_path, [MetricLogHook(), PublishAtTheEnd(), TensorBoardHook(str(log_dir), {})],
                         epochs=1)
    engine.run()
    events = read_events(log_dir)
    (image,) = events.Images("evaluation/precision_recall")
    assert image.step == STEPS and (image.width, image.height) == (40, 30)
    with Image.open(io.BytesIO(image.encoded_image_string)) as decoded:
        assert decoded.getpixel((5, 5)) == (250, 10, 10)
    (text,) = events.Tensors("evaluation/report/text_summary")
    assert text.step == STEPS and text.tensor_proto.string_val[0].decode() == "# Evaluation"


def test_a_resumed_run_continues_the_same_curves(tmp_path):
    """Stopped after step 5 (checkpoint at step 5), resumed: the steps 1..12 appear once each,
    in one folder of two event files."""
    log_dir, manager, requests = tmp_path / "tensorboard", CheckpointManager(str(tmp_path / "ckpt")), {"n": 0}

    def requested():
        requests["n"] += 1
        return requests["n"] == 5

    def hooks(loader):
        checkpoints = CheckpointHook(manager, {})
        return [EpochSetupHook(loader, None, lambda: None), MetricLogHook(), StopHook(requested, checkpoints),
                TensorBoardHook(str(log_dir), {"run": "same"}), checkpoints]

    engine = make_engine(tmp_path, [h for h in hooks(Batches())], epochs=3, loader=Batches())
    engine.run()
    assert engine.stopped and engine.global_step == 5
    net = tiny_net()
    resume = load_latest(manager, net, mx.cpu())
    loader = Batches()
    make_engine(tmp_path, hooks(loader), epochs=3, position=resume.position, net=net, loader=loader).run()
    assert len(list(log_dir.iterdir())) == 2
    events = read_events(log_dir)
    assert steps(events, "train/fit_loss") == [2, 4, 6, 8, 10, 12]
    assert steps(events, "epoch/fit_loss") == [4, 8, 12]
    assert [t.step for t in events.Tensors("config/text_summary")] == [0, 5]


def test_steps_an_earlier_run_wrote_past_its_checkpoint_are_replaced(tmp_path):
    """A run killed after step 8 whose last checkpoint was at step 4 (epoch 1): the resumed run
    trains steps 5..12 again; TensorBoard shows each step once, with the resumed run's values."""
    log_dir = tmp_path / "tensorboard"
    make_engine(tmp_path, [MetricLogHook(), TensorBoardHook(str(log_dir), {})], epochs=2).run()
    net = tiny_net()
    net.weight.set_data(mx.nd.array([[1.5]]))  # another start than the first run's: other losses
    resumed = make_engine(tmp_path, [MetricLogHook(), TensorBoardHook(str(log_dir), {})], epochs=3, net=net,
                          position=Position(epoch=1, global_step=STEPS))
    resumed.run()
    events = read_events(log_dir)
    assert steps(events, "train/fit_loss") == [2, 4, 6, 8, 10, 12]
    assert steps(events, "epoch/fit_loss") == [4, 8, 12]
    replayed = {e.step: e.value for e in events.Scalars("epoch/fit_loss")}
    assert replayed[8] == pytest.approx(resumed.history[0]["fit_loss"])
