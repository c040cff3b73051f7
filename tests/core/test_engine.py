"""The loop, in milliseconds: a one-weight model, a fake step, real checkpoints (its hooks:
test_hooks.py, on the same pieces).

The detector family is replaced by a step that fits ``w * x`` to ``2 * x`` (so losses and the
optimizer state are real), the loader by a list of batches, the world by SingleProcess (or a
fake rank 1 for the main-only rule). Everything else is the engine and hooks the job uses."""

import math
import os
from types import SimpleNamespace

import mxnet as mx
import pytest
from mxnet import autograd

from detector_training.core.checkpoint import CheckpointManager, Position, load_latest
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import SingleProcess, World
from detector_training.core.engine import Engine, Hook, MetricSums
from detector_training.core.hooks import CheckpointHook, MetricLogHook
from detector_training.core.run_context import RunContext
from detector_training.errors import JobError

STEPS = 4


class FitStep:
    """A family's step in miniature: forward, loss, backward; the loss and a metric by name."""

    def __init__(self, net, nan_at=None):
        self.net = net
        self.calls = []
        self.nan_at = nan_at
        self.mix_ratio = 1.0

    def __call__(self, batch):
        self.calls.append(batch)
        x = mx.nd.array([[float(batch)]])
        with autograd.record():
            loss = ((self.net(x) - 2 * x) ** 2).mean()
        loss.backward()
        value = loss if self.nan_at != len(self.calls) else mx.nd.array([float("nan")])
        return {"fit_loss": value.sum(), "fit_error": (mx.nd.abs(self.net(x) - 2 * x).sum(), 1)}


class Batches:
    """A loader and its sampler in one: batches 1..4, the first ``skip`` left out when resuming
    a stopped epoch (what EqualStepsBatchSampler.set_epoch does)."""

    def __init__(self):
        self.skip = 0

    def set_epoch(self, epoch, skip=0):
        self.skip = skip

    def __iter__(self):
        return iter([1, 2, 3, 4][self.skip:])


def tiny_net():
    net = mx.gluon.nn.Dense(1, use_bias=False, in_units=1)
    net.initialize(mx.init.Constant(0.5))
    return net


def make_engine(tmp_path, hooks=(), epochs=3, position=None, net=None, world=None, loader=None,
                hyperparameters=None, **step_kw):
    config = from_hyperparameters(dict({"epochs": str(epochs), "log_interval": "2", "dataset": "custom"},
                                       **(hyperparameters or {})))
    net = net or tiny_net()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    dist = SingleProcess()
    if world is not None:
        dist.world = world
    return Engine(run_context(config, dist, net, loader or Batches()), trainer=trainer,
                  step=FitStep(net, **step_kw), position=position, hooks=list(hooks))


def run_context(config, dist, net, loader):
    """A run of the fitting family, as much of it as the engine reads: the configuration, the
    world, the network, the training loader and its steps, the batch, the declared names."""
    return RunContext(config=config, env=None, dist=dist, stop=None,
                      family=SimpleNamespace(loss_names=("fit_loss",), metric_names=("fit_error",)),
                      ctx=mx.cpu(), datasets=None, network=SimpleNamespace(net=net),
                      loaders=SimpleNamespace(train=SimpleNamespace(loader=loader), steps=STEPS),
                      per_rank_batch=1, base_lr=0.01, effective={}, checkpoints=None,
                      validator=None)


class Recorder(Hook):
    def __init__(self, name, calls, main_only=False):
        self.name, self.calls, self.main_only = name, calls, main_only

    def __getattribute__(self, attr):
        if attr in ("before_train", "before_epoch", "before_step", "after_step", "after_epoch",
                    "after_train"):
            return lambda engine: self.calls.append((attr, self.name, engine.epoch))
        return object.__getattribute__(self, attr)


def test_config_epochs_is_a_number_from_the_preset():
    assert from_hyperparameters({"dataset": "custom"}).epochs == 20
    assert from_hyperparameters({"dataset": "coco"}).lr_decay_epoch == (17, 23)


def test_hooks_run_in_list_order_at_every_point_and_every_step_runs(tmp_path):
    calls = []
    engine = make_engine(tmp_path, [Recorder("a", calls), Recorder("b", calls)], epochs=2)
    engine.run()
    assert engine.completed and engine.global_step == 2 * STEPS and engine.epoch == 2
    assert engine.step.calls == [1, 2, 3, 4, 1, 2, 3, 4]
    points = [(p, n) for p, n, _ in calls]
    assert points[:2] == [("before_train", "a"), ("before_train", "b")]
    assert points[-2:] == [("after_train", "a"), ("after_train", "b")]
    assert points.count(("before_step", "a")) == 2 * STEPS
    assert [e for p, n, e in calls if p == "after_epoch" and n == "b"] == [0, 1]
    for i in range(0, len(points), 2):  # a before b, each time
        assert points[i][1] == "a" and points[i + 1][1] == "b" and points[i][0] == points[i + 1][0]


def test_main_only_hooks_do_not_run_on_other_ranks(tmp_path):
    calls = []
    engine = make_engine(tmp_path, [Recorder("everyone", calls), Recorder("main", calls, main_only=True)],
                         epochs=1, world=World(rank=1, size=2))
    engine.run()
    assert {n for _, n, _ in calls} == {"everyone"}


def test_the_engine_sums_by_name_a_loss_per_step_and_a_metric_by_its_count():
    sums = MetricSums()
    sums.add_step({"a_loss": 2.0, "an_acc": (3.0, 4.0)})
    sums.add_step({"a_loss": 4.0, "an_acc": (1.0, 4.0)})
    assert MetricSums.values_from_flat(("a_loss", "an_acc"), sums.flat(("a_loss", "an_acc"))) \
        == {"a_loss": 3.0, "an_acc": 0.5}


def test_a_step_that_returns_other_names_than_the_family_declares_stops_the_job(tmp_path):
    engine = make_engine(tmp_path, [MetricLogHook()], epochs=1)
    engine.log_names = ("fit_loss", "fit_acc")
    with pytest.raises(JobError) as err:
        engine.run()
    assert "returned fit_error, fit_loss, not the declared losses and metrics fit_loss, fit_acc" \
        in str(err.value)
    assert engine.global_step == 0


def test_position_round_trips_through_a_checkpoint(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    engine = make_engine(tmp_path, [MetricLogHook()], epochs=1,
                         position=Position(epoch=0, global_step=40, best_map=0.25,
                                           history=[{"epoch": -1}]))
    engine.run()
    CheckpointHook(manager, {}).save(engine, 1, 0)
    resume = load_latest(manager, tiny_net(), mx.cpu())
    assert resume.position == Position(epoch=1, iteration=0, global_step=44, best_map=0.25,
                                       history=engine.history)
    assert len(resume.position.history) == 2 and math.isfinite(resume.position.history[1]["fit_loss"])
    assert os.path.basename(resume.path) == "ckpt-00000044"


def test_each_step_is_timed_in_three_parts_and_the_summary_line_carries_them(tmp_path, caplog):
    """Data wait, forward/backward and the update, per step on average, in the history and in the
    summary line the shared metric definitions (speed, data wait, lr, step times) read."""
    import re
    import time

    from detector_training.job.metrics import METRIC_DEFINITIONS

    # The sleeps are five times this machine's forward/backward, measured now: the parts they land
    # in tell apart however loaded the machine is.
    baseline = make_engine(tmp_path / "baseline", [MetricLogHook()], epochs=1)
    baseline.run()
    pause = max(0.02, 5 * baseline.history[0]["step_forward_backward_s"])
    caplog.clear()  # the summary line read below is the second run's

    class SlowLoader(Batches):
        def __iter__(self):
            for batch in super().__iter__():
                time.sleep(pause)
                yield batch

    engine = make_engine(tmp_path, [MetricLogHook()], epochs=1, loader=SlowLoader())
    update = engine.trainer.step
    engine.trainer.step = lambda n: (time.sleep(pause), update(n))
    with caplog.at_level("INFO"):
        engine.run()
    record = engine.history[0]
    # The loader's sleep counts as data wait, the update's as update, neither as forward/backward.
    assert record["step_data_s"] >= pause and record["step_update_s"] >= pause
    assert 0 < record["step_forward_backward_s"] < pause, (record, pause)
    assert sum(record[k] for k in ("step_data_s", "step_forward_backward_s", "step_update_s")) * STEPS \
        <= record["time_s"]
    line = next(l for l in caplog.text.splitlines() if "] summary:" in l)
    for name, expected in (("train:step_data_s", record["step_data_s"]),
                           ("train:step_update_s", record["step_update_s"]),
                           ("train:step_forward_backward_s", record["step_forward_backward_s"]),
                           ("train:speed", record["speed"]), ("train:data_wait_pct", record["data_wait_pct"])):
        regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == name)
        assert float(re.search(regex, line).group(1)) == pytest.approx(expected, abs=1e-3, rel=0.01), name
