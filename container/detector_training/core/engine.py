"""A small training loop and the hooks around it.

The loop does forward/backward and the optimizer update; everything else is a hook, run in list
order at each point: learning rate, epoch set-up (sampler epoch, mixup), metric logging,
validation, early stopping, checkpointing, model export. ``after_train`` runs in ``finally``. Hooks that write
files do so on the main rank only, and say so once (``main_only``); hooks that call collectives
run on every rank at the same point, since every rank runs the same number of steps.
"""

import logging
import math
import time
from dataclasses import dataclass, field

from detector_training.core.checkpoint import Position, save_checkpoint
from detector_training.errors import JobError

LOG = logging.getLogger("detector_training")


@dataclass
class MetricSums:
    """Running (sum, count) pairs, so ranks can add theirs together before dividing.

    Values may be NDArrays: they are summed on the device and read back only in ``flat`` (at log
    time), so a step never waits for its metrics to be copied to the host."""

    sums: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)

    def add(self, name, total, count):
        self.sums[name] = self.sums.get(name, 0.0) + total
        self.counts[name] = self.counts.get(name, 0.0) + count

    def add_step(self, values):
        """Add what a step returned by name: a (total, count) pair as it is, any other value (a
        loss: the batch's mean) with count 1."""
        for name, value in values.items():
            total, count = value if isinstance(value, tuple) else (value, 1)
            self.add(name, total, count)

    def flat(self, names):
        return [_scalar(self.sums.get(n, 0.0)) for n in names] + \
            [_scalar(self.counts.get(n, 0.0)) for n in names]

    @staticmethod
    def values_from_flat(names, flat):
        k = len(names)
        return {n: (flat[i] / flat[k + i] if flat[k + i] else float("nan")) for i, n in enumerate(names)}

    def reset(self):
        self.sums.clear()
        self.counts.clear()


def _scalar(value):
    return float(value.asscalar()) if hasattr(value, "asscalar") else float(value)


class Hook:
    main_only = False

    def before_train(self, engine):
        pass

    def before_epoch(self, engine):
        pass

    def before_step(self, engine):
        pass

    def after_step(self, engine):
        pass

    def after_epoch(self, engine):
        pass

    def after_train(self, engine):
        pass


class Engine:
    """Runs epochs ``position.epoch .. config.epochs-1`` of ``steps`` steps each.

    ``step(batch)`` is the family's forward/backward; it returns ``{name: value}`` for exactly
    the names in ``loss_names`` and ``metric_names``, which the engine sums by name;
    ``trainer.step(n)`` is the optimizer update."""

    def __init__(self, *, config, world, dist, net, trainer, step, loader, steps, per_rank_batch,
                 loss_names, metric_names=(), position=None, hooks=()):
        position = position or Position()
        self.config = config
        self.world = world
        self.dist = dist
        self.net = net
        self.trainer = trainer
        self.step = step
        self.loader = loader
        self.steps = steps
        self.per_rank_batch = per_rank_batch
        self.loss_names = tuple(loss_names)
        self.log_names = tuple(loss_names) + tuple(metric_names)
        self.epoch = self.start_epoch = position.epoch
        self.global_step = self.start_global_step = position.global_step
        self.iteration = 0
        self.start_iteration = position.iteration  # > 0 only when resuming a stopped epoch
        self.stopped = False  # a stop was agreed by all ranks; the loop ends after this step
        # Set by EarlyStoppingHook when all ranks agreed: this epoch is the last, and the run counts
        # as completed. {'epoch', 'best_epoch', 'best', 'objective', 'reason', ...}.
        self.early_stop = None
        self.sums = MetricSums()
        self.hooks = [h for h in hooks if world.is_main or not h.main_only]
        self.completed = False
        self.times = StepTimes()  # this epoch's steps: data wait, forward/backward, update
        # Scalars a hook published at the current point (name -> value), and pictures (tag -> PNG
        # bytes) and texts (tag -> Markdown), for the writers after it (TensorBoard); emptied
        # before each point.
        self.scalars = {}
        self.pictures = {}
        self.texts = {}
        self.best_map = position.best_map if position.best_map is not None else float("-inf")
        self.history = list(position.history)  # one dict per finished epoch: losses, metrics, mAP
        self.last_validation = None

    def position(self, next_epoch, next_iteration):
        """The state a checkpoint taken now resumes from."""
        return Position(epoch=next_epoch, iteration=next_iteration, global_step=self.global_step,
                        best_map=self.best_map if math.isfinite(self.best_map) else None,
                        history=list(self.history))

    @staticmethod
    def _sync():
        import mxnet as mx

        mx.nd.waitall()

    def _call(self, point):
        self.scalars, self.pictures, self.texts = {}, {}, {}
        for hook in self.hooks:
            getattr(hook, point)(self)

    def run(self):
        self._call("before_train")
        try:
            while self.epoch < self.config.epochs:
                self._call("before_epoch")
                self.times = StepTimes()
                batches = iter(self.loader)
                first, self.start_iteration = self.start_iteration, 0
                for self.iteration in range(first, self.steps):
                    waited = time.perf_counter()
                    batch = next(batches)
                    loaded = time.perf_counter()
                    self._call("before_step")
                    started = time.perf_counter()
                    self.sums.add_step(self._checked(self.step(batch)))
                    # A sync after forward/backward and one after the update, as GluonCV's loop
                    # has through its metrics: they bound the queue of pending operations and let
                    # each part of the step be timed apart.
                    self._sync()
                    computed = time.perf_counter()
                    self.trainer.step(self.per_rank_batch)
                    self._sync()
                    self.times.add(loaded - waited, computed - started, time.perf_counter() - computed)
                    self.global_step += 1
                    self._call("after_step")
                    if self.stopped:
                        return
                self._call("after_epoch")
                if self.early_stop is not None:
                    break
                self.epoch += 1
            self.completed = True
        finally:
            self._call("after_train")

    def _checked(self, values):
        """A step's values, when they are named as the family declares (else JobError)."""
        if set(values) != set(self.log_names):
            raise JobError("the training step returned %s, not the declared losses and metrics %s."
                           % (", ".join(sorted(values)), ", ".join(self.log_names)),
                           "make the family's step return loss_names and metric_names by name.")
        return values

    @property
    def last_epoch(self):
        """This epoch ends the run: the configured last, or the one early stopping ends it at (the
        hooks after EarlyStoppingHook then checkpoint it as a last epoch)."""
        return self.epoch == self.config.epochs - 1 or self.early_stop is not None


@dataclass
class StepTimes:
    """Seconds this rank's steps spent waiting for data, in forward/backward and in the update
    (the distributed gradient allreduce and the optimizer), summed over ``steps``."""

    data_wait: float = 0.0
    forward_backward: float = 0.0
    update: float = 0.0
    steps: int = 0

    def add(self, data_wait, forward_backward, update):
        self.data_wait += data_wait
        self.forward_backward += forward_backward
        self.update += update
        self.steps += 1

    def per_step(self):
        """Mean seconds per step: {step_data_s, step_forward_backward_s, step_update_s}."""
        steps = max(self.steps, 1)
        return {"step_data_s": self.data_wait / steps,
                "step_forward_backward_s": self.forward_backward / steps,
                "step_update_s": self.update / steps}


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
    ``objective``: the one a new best model is chosen by."""

    def __init__(self, validate_fn, save_best_fn, scores=("mAP", "AP50"), objective="mAP"):
        self.validate_fn = validate_fn  # () -> {'mAP', 'AP50', 'per_class', 'images', ...}
        self.save_best_fn = save_best_fn  # (engine) -> None, main rank only
        self.scores = tuple(scores)
        self.objective = objective

    def after_epoch(self, engine):
        if not every(engine.config.val_interval, engine.epoch, engine.last_epoch):
            return
        start = time.time()
        result = self.validate_fn()
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
        if engine.dist.allreduce_sum([1.0 if decision else 0.0])[0] <= 0:
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
        if every(engine.config.save_interval, engine.epoch, engine.last_epoch):
            self.save(engine, engine.epoch + 1, 0)


class StopHook(Hook):
    """A stop request (SIGTERM: job stopped, spot interruption) ends the job at a step boundary.

    Each rank reads its request (``requested()``: a signal seen by this process, or the host's
    stop file written by the launcher); the ranks agree with one allreduce per step, so every
    rank stops after the same step. The main rank then writes a complete mid-epoch checkpoint
    that the next run resumes from (same epoch, next iteration).
    """

    def __init__(self, requested, checkpoint_hook):
        self.requested = requested
        self.checkpoint_hook = checkpoint_hook

    def after_step(self, engine):
        local = 1.0 if self.requested() else 0.0
        if engine.dist.allreduce_sum([local])[0] <= 0:
            return
        engine.stopped = True
        next_epoch, next_iteration = engine.epoch, engine.iteration + 1
        if next_iteration >= engine.steps:
            next_epoch, next_iteration = engine.epoch + 1, 0
        if engine.world.is_main:
            LOG.warning("stop requested: saving a checkpoint at epoch %d, iteration %d", engine.epoch,
                        engine.iteration)
            self.checkpoint_hook.save(engine, next_epoch, next_iteration)
        engine.dist.barrier()  # no rank exits before the checkpoint is complete


class FinalModelHook(Hook):
    """After a completed run: the final model and its metadata into the model directory."""

    main_only = True

    def __init__(self, write_final_fn):
        self.write_final_fn = write_final_fn

    def after_train(self, engine):
        if engine.completed:
            self.write_final_fn(engine)
