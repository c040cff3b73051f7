"""One training step of a detector family: forward, losses, backward. The optimizer update is the
engine's (core/engine.py).

A family's step subclasses :class:`TrainingStep` and writes only how it computes its losses
(``forward``); the step owns the shape around it: the forward pass under ``autograd.record()``,
the backward of the weighted sum of the losses (with AMP's loss scaling when the job trains with
``amp=true``, since the scaled loss is what the AMP trainer's update expects), and the values the
engine sums by name, computed after recording.
"""


class TrainingStep:
    """``step(batch)``: forward and backward on one batch; ``{name: value}`` for the engine.

    What a subclass writes:

    * ``forward(batch)``, run under ``autograd.record()``: the forward pass and the losses;
      returns ``(losses, outputs)``: ``losses`` ``{name: NDArray}`` (the family's ``loss_names``),
      ``outputs`` whatever ``values`` needs besides them (None if nothing);
    * optionally ``total_loss(losses, outputs)`` (what backward differentiates; default: the sum
      of every loss, weighted by ``mix_ratio``) and ``values(losses, outputs)`` (what the engine
      logs; default: each loss's batch mean, weighted as in the backward pass). A metric is a
      ``(total, count)`` pair (core/engine.py MetricSums).

    What a hook may touch (and nothing else):

    * ``mix_ratio``: the weight of the losses while mixup is on, written before each epoch by the
      epoch set-up hook (core/hooks.py EpochSetupHook): the family's ``mixup_loss_weight`` while
      mixing, 1.0 otherwise.
    """

    mix_ratio = 1.0

    def __init__(self, net, ctx, amp_trainer=None):
        self.net = net
        self.ctx = ctx
        # The trainer AMP initialised (core/solver.py make_trainer), whose loss scale the backward
        # pass applies; None: no AMP.
        self.amp_trainer = amp_trainer

    def __call__(self, batch):
        """Forward and backward on one batch; its losses and metrics by name."""
        from mxnet import autograd

        with autograd.record():
            losses, outputs = self.forward(batch)
            self.backward(self.total_loss(losses, outputs))
        return self.values(losses, outputs)

    def forward(self, batch):
        raise NotImplementedError

    def total_loss(self, losses, outputs):
        """What backward differentiates: the sum of every loss, weighted by ``mix_ratio``."""
        return sum(loss.sum() for loss in losses.values()) * self.mix_ratio

    def backward(self, total):
        """Backward of ``total``: scaled by AMP's loss scale when an AMP trainer is given."""
        from mxnet import autograd

        if self.amp_trainer is not None:
            from mxnet.contrib import amp

            with amp.scale_loss(total, self.amp_trainer) as scaled:
                autograd.backward(scaled)
        else:
            autograd.backward(total)

    def values(self, losses, outputs):
        """Each loss as logged: the batch's mean, weighted as in the backward pass."""
        return {name: loss.mean() * self.mix_ratio for name, loss in losses.items()}
