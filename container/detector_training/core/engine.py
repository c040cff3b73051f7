"""A small training loop: the steps of each epoch, and hooks around them.

The loop runs the family's step (forward and backward, core/step.py) and the optimizer update;
everything else is a hook (core/hooks.py), run in list order at each point (``before_train``,
``before_epoch``, ``before_step``, ``after_step``, ``after_epoch``, ``after_train``; the last in
``finally``). A hook with ``main_only`` runs on the main rank only; the others run on every rank,
which all run the same number of steps, so a hook may call collectives. Hooks receive the engine:
its position in the run (epoch, iteration, global step), the summed metrics, and what they
publish for the hooks after them (scalars, pictures, texts).
"""

import math
import time
from dataclasses import dataclass, field

from detector_training.core.checkpoint import Position
from detector_training.errors import JobError


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
    """What runs around the steps (core/hooks.py): any of the six points, each given the engine.
    ``main_only``: on the main rank only (a hook that writes files)."""

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
    """Runs epochs ``position.epoch .. config.epochs-1`` of ``run.loaders.steps`` steps each, from
    ``run``'s training loader (core/run_context.py RunContext).

    ``step(batch)`` is the family's forward/backward (core/step.py); it returns ``{name: value}``
    for exactly the names in the family's ``loss_names`` and ``metric_names``, which the engine
    sums by name; ``trainer.step(n)`` is the optimizer update. ``position``: where a resumed run
    starts (None: the beginning)."""

    def __init__(self, run, *, trainer, step, position=None, hooks=()):
        position = position or Position()
        self.config = run.config
        self.world = run.world
        self.dist = run.dist
        self.net = run.net
        self.trainer = trainer
        self.step = step
        self.loader = run.loaders.train.loader
        self.steps = run.loaders.steps
        self.per_rank_batch = run.per_rank_batch
        self.loss_names = tuple(run.family.loss_names)
        self.log_names = tuple(run.family.loss_names) + tuple(run.family.metric_names)
        self.epoch = self.start_epoch = position.epoch
        self.global_step = self.start_global_step = position.global_step
        self.iteration = 0
        # > 0 only when resuming a stopped epoch; ``steps`` when its steps all ran (its validation
        # was stopped): the epoch's end runs again, without steps.
        self.start_iteration = position.iteration
        self.epoch_first_iteration = 0  # where this run began the current epoch
        self.stopped = False  # a stop was agreed by all ranks; the loop ends after this step (or epoch end)
        # Set by EarlyStoppingHook when all ranks agreed: this epoch is the last, and the run counts
        # as completed. {'epoch', 'best_epoch', 'best', 'objective', 'reason', ...}.
        self.early_stop = None
        self.sums = MetricSums()
        self.hooks = [h for h in hooks if self.world.is_main or not h.main_only]
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
                first, self.start_iteration = self.start_iteration, 0
                self.epoch_first_iteration = first
                batches = iter(self.loader) if first < self.steps else iter(())
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
                if self.stopped:  # validation stopped part-way, or a stop at the epoch's end
                    return
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
