"""The hooks (core/hooks.py) on the engine they run in: learning rate, metric logging, validation,
early stopping, stop requests and checkpoints, with test_engine.py's one-weight model, fake step
and list of batches, and real checkpoints."""

import mxnet as mx
import pytest

from detector_training.core.checkpoint import CheckpointManager, load_latest, resume_trainer
from detector_training.core.distributed import SingleProcess
from detector_training.core.engine import Hook
from detector_training.core.hooks import (CheckpointHook, EarlyStoppingHook, EpochSetupHook,
                                          FinalModelHook, LearningRateHook, MetricLogHook, StopHook,
                                          ValidationHook, stop_early)
from detector_training.errors import JobError
from test_engine import STEPS, Batches, make_engine, tiny_net


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


def test_a_stop_during_validation_checkpoints_the_epochs_end_and_the_next_run_validates_it_first(tmp_path):
    """Validation stopped part-way (core/evaluation.py Interrupted, every rank together): the
    checkpoint sits at the end of the epoch's steps, with the epoch's summary; the next run runs
    no step of that epoch, validates it, and goes on. Nothing twice in the history."""
    from detector_training.core.evaluation import Interrupted

    manager = CheckpointManager(str(tmp_path / "ckpt"))
    validated, stop = [], {"now": False}

    def validate():
        if stop["now"]:
            raise Interrupted("a stop was requested after 1 image(s) of this rank's validation shard")
        validated.append(True)
        return {"mAP": 0.5, "AP50": 0.5, "per_class": {"a": 0.5}, "images": 1}

    class SigtermInEpoch0sLastStep(Hook):
        def after_step(self, engine):
            stop["now"] = stop["now"] or (engine.epoch, engine.iteration) == (0, STEPS - 1)

    def hooks(loader):
        checkpoints = CheckpointHook(manager, {})
        return [EpochSetupHook(loader, None, lambda: None), SigtermInEpoch0sLastStep(), MetricLogHook(),
                ValidationHook(validate, lambda engine: None),
                StopHook(lambda: stop["now"], checkpoints), checkpoints]

    loader = Batches()
    first = make_engine(tmp_path, hooks(loader), epochs=2, loader=loader)
    first.run()
    assert first.stopped and not first.completed and validated == []
    resume = load_latest(manager, tiny_net(), mx.cpu())
    assert (resume.position.epoch, resume.position.iteration, resume.position.global_step) == (0, STEPS, STEPS)
    assert [r["epoch"] for r in resume.position.history] == [0] and "mAP" not in resume.position.history[0]

    stop["now"] = False
    loader = Batches()
    second = make_engine(tmp_path, hooks(loader), epochs=2, position=resume.position, loader=loader)
    second.run()
    assert second.completed and second.global_step == 2 * STEPS and validated == [True, True]
    assert [r["epoch"] for r in second.history] == [0, 1] and all(r["mAP"] == 0.5 for r in second.history)
