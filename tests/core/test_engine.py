"""The loop and its hooks, in milliseconds: a one-weight model, a fake step, real checkpoints.

The detector family is replaced by a step that fits ``w * x`` to ``2 * x`` (so losses and the
optimizer state are real), the loader by a list of batches, the world by SingleProcess (or a
fake rank 1 for the main-only rule). Everything else is the engine and hooks the job uses."""

import math
import os

import mxnet as mx
import pytest
from mxnet import autograd

from detector_training.core.checkpoint import CheckpointManager, Position, load_latest, resume_trainer
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import SingleProcess, World
from detector_training.core.engine import (CheckpointHook, EarlyStoppingHook, Engine, EpochSetupHook,
                                           FinalModelHook, Hook, LearningRateHook, MetricLogHook,
                                           MetricSums, StopHook, ValidationHook, stop_early)
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
    return Engine(config=config, world=dist.world, dist=dist, net=net, trainer=trainer,
                  step=FitStep(net, **step_kw), loader=loader or Batches(), steps=STEPS, per_rank_batch=1,
                  loss_names=("fit_loss",), metric_names=("fit_error",), position=position,
                  hooks=list(hooks))


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


def test_learning_rate_hook_sets_the_rate_of_every_step(tmp_path):
    seen = []

    class Spy(Hook):
        def after_step(self, engine):
            seen.append(engine.trainer.learning_rate)

    engine = make_engine(tmp_path, [LearningRateHook(lambda epoch, step: 0.001 * (step + 1) + epoch), Spy()],
                         epochs=2)
    engine.run()
    assert seen == pytest.approx([0.001 * (s + 1) + (s // STEPS) for s in range(2 * STEPS)])


def test_metric_log_hook_records_epoch_means_and_the_loss_falls(tmp_path, caplog):
    engine = make_engine(tmp_path, [MetricLogHook()], epochs=3)
    with caplog.at_level("INFO"):
        engine.run()
    assert [h["epoch"] for h in engine.history] == [0, 1, 2]
    assert engine.history[-1]["fit_loss"] < engine.history[0]["fit_loss"]
    assert all(set(h) >= {"fit_loss", "fit_error", "lr", "speed", "time_s"} for h in engine.history)
    assert "[Epoch 2] summary:" in caplog.text and "fit_loss=" in caplog.text
    assert "[Epoch 0][Batch 1/4]" in caplog.text  # log_interval=2


def test_a_nan_loss_stops_the_job_with_a_clear_error(tmp_path):
    engine = make_engine(tmp_path, [MetricLogHook()], epochs=2, nan_at=3)
    with pytest.raises(JobError) as err:
        engine.run()
    assert "training diverged at epoch 0: fit_loss became NaN/inf" in str(err.value)
    assert not engine.completed


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


def test_validation_keeps_the_best_and_saves_only_on_improvement(tmp_path):
    scores, saved = iter([0.2, 0.5, 0.4]), []
    hooks = [MetricLogHook(),
             ValidationHook(lambda: {"mAP": next(scores), "AP50": 0.0, "per_class": {}, "images": 1},
                            lambda engine: saved.append(engine.epoch))]
    engine = make_engine(tmp_path, hooks, epochs=3)
    engine.run()
    assert saved == [0, 1] and engine.best_map == 0.5
    assert [h["mAP"] for h in engine.history] == [0.2, 0.5, 0.4]


def history(*scores):
    return [{"epoch": e, "mAP": m} for e, m in enumerate(scores)]


@pytest.mark.parametrize("scores, min_epochs, patience, tolerance, best_epoch", [
    ((0.5, 0.5, 0.5), 1, 2, 0.0, 0),  # equal is no improvement
    ((0.5, 0.5), 1, 2, 0.0, None),  # one epoch since the best: patience not spent
    ((0.5, 0.5, 0.5), 4, 2, 0.0, None),  # too few epochs ran
    ((0.5, 0.52, 0.524), 1, 2, 0.05, 0),  # +4 % and +4.8 % of the best, 0.5: below 5 %
    ((0.5, 0.52, 0.53), 1, 2, 0.05, None),  # +6 %: an improvement at epoch 2
    ((0.5, 0.52, 0.524), 1, 2, 0.0, None),  # without a tolerance both count: the best is epoch 2
    ((0.0, 0.01, 0.01), 1, 2, 0.5, None),  # from a best of 0 any gain counts
    ((0.3, float("nan"), 0.2), 1, 2, 0.0, 0),  # a NaN score is no score
])
def test_stop_early_decides_from_the_scores_of_the_history(scores, min_epochs, patience, tolerance,
                                                          best_epoch):
    decision = stop_early(history(*scores), "mAP", len(scores) - 1, min_epochs, patience, tolerance)
    if best_epoch is None:
        assert decision is None
    else:
        assert decision["best_epoch"] == best_epoch and decision["epoch"] == len(scores) - 1
        assert "mAP did not improve by more than %g (relative)" % tolerance in decision["reason"]


def test_early_stopping_ends_the_run_completed_after_the_patience_with_a_last_checkpoint(tmp_path, caplog):
    scores, written = iter([0.2, 0.5, 0.4, 0.45, 0.9, 0.9]), []
    manager = CheckpointManager(str(tmp_path / "ckpt"), keep=10)
    hooks = [MetricLogHook(),
             ValidationHook(lambda: {"mAP": next(scores), "AP50": 0.0, "per_class": {}, "images": 1},
                            lambda engine: None),
             EarlyStoppingHook("mAP"),
             CheckpointHook(manager, {}), FinalModelHook(lambda engine: written.append(engine.early_stop))]
    engine = make_engine(tmp_path, hooks, epochs=6, hyperparameters={
        "early_stopping": "True", "early_stopping_patience": "2", "early_stopping_min_epochs": "2",
        "save_interval": "5"})
    with caplog.at_level("INFO", logger="detector_training"):
        engine.run()
    assert engine.completed and engine.epoch == 3 and len(engine.history) == 4
    assert written == [engine.early_stop] and engine.early_stop["best_epoch"] == 1
    assert engine.early_stop["best"] == 0.5
    assert "early stopping: after epoch 3: mAP did not improve by more than 0 (relative) in the 2 " \
           "epochs after epoch 1 (best 0.5000)" in caplog.text
    # epoch 3 is checkpointed as a last epoch (save_interval=5 would not have)
    assert load_latest(manager, tiny_net(), mx.cpu()).position.epoch == 4


def test_early_stopping_off_runs_every_epoch(tmp_path):
    scores = iter([0.5] * 6)
    hooks = [MetricLogHook(),
             ValidationHook(lambda: {"mAP": next(scores), "AP50": 0.0, "per_class": {}, "images": 1},
                            lambda engine: None), EarlyStoppingHook("mAP")]
    engine = make_engine(tmp_path, hooks, epochs=6, hyperparameters={
        "early_stopping_patience": "1", "early_stopping_min_epochs": "1"})
    engine.run()
    assert engine.completed and engine.early_stop is None and len(engine.history) == 6


class OtherRankStops(SingleProcess):
    """A world in which another rank votes to stop at the first vote."""

    def allreduce_sum(self, values):
        return [v + 1.0 for v in values] if len(values) == 1 else list(values)


def test_every_rank_follows_a_stop_any_rank_decided(tmp_path):
    scores = iter([0.1, 0.2, 0.3])
    hooks = [MetricLogHook(),
             ValidationHook(lambda: {"mAP": next(scores), "AP50": 0.0, "per_class": {}, "images": 1},
                            lambda engine: None), EarlyStoppingHook("mAP")]
    engine = make_engine(tmp_path, hooks, epochs=3, hyperparameters={
        "early_stopping": "true", "early_stopping_min_epochs": "1"})
    engine.dist = OtherRankStops()
    engine.run()
    assert engine.completed and engine.epoch == 0 and engine.early_stop["reason"] == "another rank stopped early"


def test_stop_mid_epoch_checkpoints_and_resume_finishes_the_same_steps(tmp_path):
    """Stopped after step 6 of 12, the job checkpoints (epoch 1, iteration 2, optimizer state);
    a new engine from that checkpoint runs exactly the 6 steps left, and the final model only
    comes from the run that completed."""
    manager = CheckpointManager(str(tmp_path / "ckpt"))
    finals, requests = [], {"n": 0}

    def requested():
        requests["n"] += 1
        return requests["n"] == 6

    def hooks(loader):
        checkpoints = CheckpointHook(manager, {"what": "config"})
        return [EpochSetupHook(loader, None, lambda: None), StopHook(requested, checkpoints), checkpoints,
                FinalModelHook(lambda engine: finals.append(engine.global_step))]

    loader = Batches()
    first = make_engine(tmp_path, hooks(loader), epochs=3, loader=loader)
    first.run()
    assert first.stopped and not first.completed and first.global_step == 6 and finals == []
    momentum = first.trainer._updaters[0].states[0].asnumpy().copy()

    net = tiny_net()
    resume = load_latest(manager, net, mx.cpu())
    assert resume.position.epoch == 1 and resume.position.iteration == 2
    assert resume.position.global_step == 6
    assert net.weight.data().asnumpy() == pytest.approx(first.net.weight.data().asnumpy())
    loader = Batches()
    second = make_engine(tmp_path, hooks(loader), epochs=3, position=resume.position, net=net,
                         loader=loader)
    resume_trainer(resume, second.trainer)
    assert second.trainer._updaters[0].states[0].asnumpy() == pytest.approx(momentum)
    second.run()
    assert second.completed and second.global_step == 12 and finals == [12]
    assert second.step.calls == [3, 4, 1, 2, 3, 4]  # the rest of epoch 1, then epoch 2


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
