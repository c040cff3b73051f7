"""The hooks of the training loop (core/engine.py), in the order the job runs them (main.make_hooks):
learning rate, epoch set-up (sampler epoch, mixup), metric logging, validation, early stopping,
stop requests, checkpointing, the final model; TensorBoard's writer (core/tensorboard_events.py)
after them.

Hooks that write files do so on the main rank only, and say so once (``main_only``); hooks that
call collectives run on every rank at the same point, since every rank runs the same number of
steps. A hook touches the family's step only through what core/step.py's TrainingStep declares
(``mix_ratio``).
"""

import logging
import math
import time

from detector_training.core.checkpoint import save_checkpoint
from detector_training.core.distributed import any_rank
from detector_training.core.engine import Hook, MetricSums
from detector_training.core.evaluation import Interrupted
from detector_training.errors import JobError

LOG = logging.getLogger("detector_training")


def every(n, epoch, last):
    return last or (epoch + 1) % n == 0


class LearningRateHook(Hook):
    def __init__(self, lr_fn):
        self.lr_fn = lr_fn  # (epoch, global_step) -> lr

    def before_step(self, engine):
        engine.trainer.set_learning_rate(self.lr_fn(engine.epoch, engine.global_step))


class EpochSetupHook(Hook):
    """Sampler epoch (order and shard), and the mixup schedule: mixing ratios drawn from
    ``numpy.random.<mixup_draw[0]>(*mixup_draw[1:])`` with the losses weighted by
    ``mixup_loss_weight``, except in the last ``no_mixup_epochs`` epochs (the family's choice;
    GluonCV's Faster R-CNN mixes evenly, its YOLOv3 draws from Beta(1.5, 1.5))."""

    def __init__(self, sampler, mixup_dataset, hybridize, mixup_draw=("uniform", 0.5, 0.5),
                 mixup_loss_weight=0.5):
        self.sampler = sampler
        self.mixup = mixup_dataset
        self.hybridize = hybridize
        self.mixup_draw = tuple(mixup_draw)
        self.mixup_loss_weight = mixup_loss_weight

    def before_epoch(self, engine):
        self.hybridize()
        self.sampler.set_epoch(engine.epoch, skip=engine.start_iteration)
        if self.mixup is None:
            return
        import numpy as np

        if engine.epoch >= engine.config.epochs - engine.config.no_mixup_epochs:
            self.mixup.set_mixup(None)
            engine.step.mix_ratio = 1.0
        else:
            self.mixup.set_mixup(getattr(np.random, self.mixup_draw[0]), *self.mixup_draw[1:])
            engine.step.mix_ratio = self.mixup_loss_weight


def format_metrics(values, names):
    return " ".join("%s=%.5f" % (k, values[k]) for k in names if k in values)


class MetricLogHook(Hook):
    """Every log_interval steps: metrics summed over all ranks, global samples/s, lr; at the end
    of an epoch its summary with the split of this rank's step time. Each is logged and published
    as scalars (``train/<name>`` and ``epoch/<name>``).

    Lines (stable, matched by the launcher's metric definitions)::

        [Epoch 0][Batch 9/24] lr=0.001000 speed=3.2 samples/s rpn_conf_loss=0.1 ...
        [Epoch 0] summary: time=12.3s speed=3.1 samples/s data_wait=2.0% progress=5.0% step_data=0.0020s
            step_forward_backward=0.3100s step_update=0.0150s lr=0.001000 rpn_conf_loss=0.1 ...
    """

    def before_epoch(self, engine):
        engine.sums.reset()
        self.epoch_start = self.window_start = time.time()
        self.window_steps, self.window_wait = 0, 0.0

    def after_step(self, engine):
        self.window_steps += 1
        if (engine.iteration + 1) % engine.config.log_interval == 0:
            totals = engine.dist.allreduce_sum(engine.sums.flat(engine.log_names))
            values = MetricSums.values_from_flat(engine.log_names, totals)
            elapsed = max(time.time() - self.window_start, 1e-9)
            speed = self.window_steps * engine.per_rank_batch * engine.world.size / elapsed
            data_wait = 100.0 * (engine.times.data_wait - self.window_wait) / elapsed
            if engine.world.is_main:
                LOG.info("[Epoch %d][Batch %d/%d] lr=%.6f speed=%.3f samples/s %s", engine.epoch,
                         engine.iteration, engine.steps, engine.trainer.learning_rate, speed,
                         format_metrics(values, engine.log_names))
            engine.scalars.update(("train/" + name, value) for name, value in dict(
                values, lr=engine.trainer.learning_rate, speed=speed, data_wait_pct=data_wait).items())
            self.window_start, self.window_steps = time.time(), 0
            self.window_wait = engine.times.data_wait

    def after_epoch(self, engine):
        if engine.epoch_first_iteration >= engine.steps:
            return  # its steps and this summary (in the history) were an earlier run's: it only validates
        totals = engine.dist.allreduce_sum(engine.sums.flat(engine.log_names))
        values = MetricSums.values_from_flat(engine.log_names, totals)
        elapsed = max(time.time() - self.epoch_start, 1e-9)
        speed = engine.steps * engine.per_rank_batch * engine.world.size / elapsed
        data_wait = 100.0 * engine.times.data_wait / elapsed
        step_times = engine.times.per_step()
        record = dict(values, epoch=engine.epoch, time_s=elapsed, speed=speed,
                      lr=engine.trainer.learning_rate, data_wait_pct=data_wait, **step_times)
        engine.history.append(record)
        if engine.world.is_main:
            LOG.info("[Epoch %d] summary: time=%.1fs speed=%.3f samples/s data_wait=%.1f%% "
                     "progress=%.1f%% "
                     "step_data=%.4fs step_forward_backward=%.4fs step_update=%.4fs lr=%.6f %s",
                     engine.epoch, elapsed, speed, data_wait,
                     100.0 * (engine.epoch + 1) / engine.config.epochs, step_times["step_data_s"],
                     step_times["step_forward_backward_s"], step_times["step_update_s"],
                     engine.trainer.learning_rate, format_metrics(values, engine.log_names))
        engine.scalars.update(("epoch/" + name, value) for name, value in record.items()
                              if name != "epoch")
        bad = [k for k in engine.loss_names if k in values and not math.isfinite(values[k])]
        if bad:
            raise JobError("training diverged at epoch %d: %s became NaN/inf." % (engine.epoch, ", ".join(bad)),
                           "lower lr, or set clip_gradient (e.g. 10), and check the annotations.")


class ValidationHook(Hook):
    """Every val_interval epochs and after the last: all ranks validate their shard together.

    ``scores``: the family's validation scores, logged in that order and kept in the history;
    ``objective``: the one a new best model is chosen by. A stop request part-way (``validate_fn``
    raises core/evaluation.py Interrupted on every rank) stops the run: StopHook checkpoints it so
    that the next run validates this epoch first."""

    def __init__(self, validate_fn, save_best_fn, scores=("mAP", "AP50"), objective="mAP"):
        self.validate_fn = validate_fn  # () -> {'mAP', 'AP50', 'per_class', 'images', ...}
        self.save_best_fn = save_best_fn  # (engine) -> None, main rank only
        self.scores = tuple(scores)
        self.objective = objective

    def after_epoch(self, engine):
        if not every(engine.config.val_interval, engine.epoch, engine.last_epoch):
            return
        start = time.time()
        if engine.world.is_main:
            LOG.info("validation: epoch=%d started", engine.epoch)
        try:
            result = self.validate_fn()
        except Interrupted as exc:
            engine.stopped = True
            if engine.world.is_main:
                LOG.warning("validation: epoch=%d stopped after %.1fs: %s", engine.epoch, time.time() - start, exc)
            return
        result["epoch"] = engine.epoch
        engine.last_validation = result
        engine.history[-1].update((name, result[name]) for name in self.scores)
        # Per class: AP, then any other per-class score (Mask R-CNN: mask_per_class -> mask_AP).
        per_class = {"AP": result["per_class"]}
        per_class.update((k[:-len("_per_class")] + "_AP", result[k]) for k in sorted(result)
                         if k.endswith("_per_class") and k != "per_class")
        elapsed = time.time() - start
        if engine.world.is_main:
            for name in result["per_class"]:
                LOG.info("validation: epoch=%d class=%s %s", engine.epoch, name,
                         " ".join("%s=%.4f" % (score, aps[name]) for score, aps in per_class.items()))
            LOG.info("validation: epoch=%d images=%d time=%.1fs %s", engine.epoch, result["images"],
                     elapsed, " ".join("%s=%.4f" % (n, result[n]) for n in self.scores))
        engine.scalars.update(("validation/" + name, result[name]) for name in self.scores)
        engine.scalars["validation/time_s"] = elapsed
        engine.scalars.update(("per_class_%s/%s" % (score, name), ap)
                              for score, aps in per_class.items() for name, ap in aps.items())
        if result[self.objective] > engine.best_map:
            engine.best_map = result[self.objective]
            if engine.world.is_main:
                self.save_best_fn(engine)
                LOG.info("validation: new best %s=%.4f at epoch %d", self.objective,
                         result[self.objective], engine.epoch)


def stop_early(history, objective, epoch, min_epochs, patience, tolerance):
    """The early-stopping decision after ``epoch`` from the validation scores in ``history`` (one
    record per finished epoch; validated ones hold ``objective``): None to go on, else why it stops.

    An improvement is a score whose relative gain over the best so far exceeds ``tolerance``
    ((score - best) / best; while the best is 0, any gain). It stops once ``min_epochs`` epochs
    have run and ``patience`` epochs have passed since the last improvement."""
    scored = [(r["epoch"], r[objective]) for r in history
              if r.get(objective) is not None and math.isfinite(r[objective])]
    if not scored or epoch + 1 < min_epochs:
        return None
    best_epoch, best = scored[0]
    for at, score in scored[1:]:
        gain = (score - best) / best if best > 0 else (math.inf if score > best else 0.0)
        if gain > tolerance:
            best_epoch, best = at, score
    if epoch - best_epoch < patience:
        return None
    return {"epoch": epoch, "best_epoch": best_epoch, "best": best, "objective": objective,
            "min_epochs": min_epochs, "patience": patience, "tolerance": tolerance,
            "reason": "%s did not improve by more than %g (relative) in the %d epochs after epoch %d "
                      "(best %.4f)" % (objective, tolerance, epoch - best_epoch, best_epoch, best)}


class EarlyStoppingHook(Hook):
    """After a validation: end the run when the objective stopped improving (``stop_early``).

    The scores are the ones every rank computed from the same gathered detections; the ranks
    still agree with one allreduce, so all of them end after the same epoch. The run then counts
    as completed (the final model is written: the best one, see main.write_final)."""

    def __init__(self, objective="mAP"):
        self.objective = objective

    def after_epoch(self, engine):
        config = engine.config
        validated = engine.last_validation is not None and engine.last_validation.get("epoch") == engine.epoch
        if not config.early_stopping or not validated or engine.epoch == config.epochs - 1:
            return
        decision = stop_early(engine.history, self.objective, engine.epoch,
                              config.early_stopping_min_epochs, config.early_stopping_patience,
                              config.early_stopping_tolerance)
        if not any_rank(engine.dist, decision):
            return
        if decision is None:  # another rank decided to stop: this one follows (same scores, so rare)
            decision = {"epoch": engine.epoch, "objective": self.objective,
                        "reason": "another rank stopped early"}
        engine.early_stop = decision
        if engine.world.is_main:
            LOG.info("early stopping: after epoch %d: %s", engine.epoch, decision["reason"])


class CheckpointHook(Hook):
    """Every save_interval epochs and after the last: a complete, resumable checkpoint."""

    main_only = True

    def __init__(self, manager, config_dict):
        self.manager = manager
        self.config_dict = config_dict

    def save(self, engine, next_epoch, next_iteration):
        return save_checkpoint(self.manager, engine.net, engine.trainer,
                               engine.position(next_epoch, next_iteration), self.config_dict)

    def after_epoch(self, engine):
        if engine.stopped:  # StopHook saved where the stopped run resumes
            return
        if every(engine.config.save_interval, engine.epoch, engine.last_epoch):
            self.save(engine, engine.epoch + 1, 0)


class StopHook(Hook):
    """A stop request (SIGTERM: job stopped, spot interruption) ends the job at a step boundary,
    or at the end of an epoch's steps.

    Each rank reads its request (``requested()``: a signal seen by this process, or the host's
    stop file written by the launcher); the ranks agree with one allreduce per step, so every
    rank stops after the same step. The main rank then writes a complete mid-epoch checkpoint
    that the next run resumes from (same epoch, next iteration). The last step of an epoch leaves
    the request to the epoch's end, so the epoch keeps its validation: validation stops part-way
    on it (ValidationHook), and then the checkpoint sits at the end of the epoch's steps (the next
    run validates it first); without validation (or after it) the next run starts the next epoch.
    The run's last epoch, validated, goes on to write the model.
    """

    def __init__(self, requested, checkpoint_hook):
        self.requested = requested
        self.checkpoint_hook = checkpoint_hook

    def _agreed(self, engine):
        return any_rank(engine.dist, self.requested())

    def _save(self, engine, next_epoch, next_iteration, where):
        engine.stopped = True
        if engine.world.is_main:
            LOG.warning("stop requested: saving a checkpoint at %s", where)
            self.checkpoint_hook.save(engine, next_epoch, next_iteration)
        engine.dist.barrier()  # no rank exits before the checkpoint is complete

    def after_step(self, engine):
        if engine.iteration + 1 >= engine.steps or not self._agreed(engine):
            return
        self._save(engine, engine.epoch, engine.iteration + 1,
                   "epoch %d, iteration %d" % (engine.epoch, engine.iteration))

    def after_epoch(self, engine):
        if engine.stopped:
            self._save(engine, engine.epoch, engine.steps, "epoch %d, its steps done and its validation "
                       "stopped: the next run validates it first" % engine.epoch)
        elif not engine.last_epoch and self._agreed(engine):
            self._save(engine, engine.epoch + 1, 0, "the end of epoch %d" % engine.epoch)


class FinalModelHook(Hook):
    """After a completed run: the final model and its metadata into the model directory."""

    main_only = True

    def __init__(self, write_final_fn):
        self.write_final_fn = write_final_fn

    def after_train(self, engine):
        if engine.completed:
            self.write_final_fn(engine)
