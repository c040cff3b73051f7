"""Learning-rate schedule (pure) and the optimizer.

Linear warm-up from ``lr * lr_warmup_factor`` to ``lr`` over the first ``lr_warmup`` iterations,
then, by ``lr_mode``:

* ``step`` (GluonCV's Faster R-CNN and YOLOv3 default): decay by ``lr_decay`` at each epoch in
  ``lr_decay_epoch`` (epochs counted from 0, so decay at 14 applies from the 15th epoch);
* ``poly``: ``lr * (1 - p) ** lr_poly_power``, ``p`` the share of the post-warm-up iterations done;
* ``cosine``: ``lr * (1 + cos(pi * p)) / 2``.

The optimizer is ``config.optimizer`` (MXNet's by name: sgd, adam, rmsprop, adadelta) under the
same schedule, through the same distributed trainer for every family.

Iterations are this rank's steps (every rank runs the same number; ``steps_per_epoch`` is the
per-rank count), never images or global batches, so a job with more ranks does not run the
schedule faster. The base ``lr`` is already scaled to the global batch (TrainConfig.effective_lr).
"""

import logging
import math

from detector_training.errors import ConfigError
from detector_training.core.networks import apply_no_wd, trainable_params

LOG = logging.getLogger("detector_training")


def lr_at(config, base_lr, epoch, global_step, steps_per_epoch=None):
    """Learning rate for iteration ``global_step`` (0-based, counted over the whole job) in ``epoch``."""
    mode = getattr(config, "lr_mode", "step")
    warmup = config.warmup_iters
    if mode == "step":
        decays = sum(1 for boundary in config.lr_decay_epoch if epoch >= boundary)
        lr = base_lr * (config.lr_decay ** decays)
    else:
        if not steps_per_epoch:
            raise ValueError("lr_mode=%s needs the steps per epoch" % mode)
        total = max(1, config.epochs * steps_per_epoch - warmup)
        done = min(1.0, max(0, global_step - warmup) / float(total))
        if mode == "poly":
            lr = base_lr * (1.0 - done) ** config.lr_poly_power
        else:
            lr = base_lr * 0.5 * (1.0 + math.cos(math.pi * done))
    if warmup and global_step < warmup:
        alpha = float(global_step) / warmup
        lr *= config.lr_warmup_factor * (1.0 - alpha) + alpha
    return lr


def optimizer_params(config, base_lr):
    """MXNet's arguments for ``config.optimizer``: the learning rate and weight decay for all,
    momentum for SGD only (Adam, RMSProp and AdaDelta keep their own moment estimates at MXNet's
    defaults)."""
    params = {"learning_rate": base_lr, "wd": config.wd}
    if config.optimizer == "sgd":
        params["momentum"] = config.momentum
    if config.clip_gradient > 0:
        params["clip_gradient"] = config.clip_gradient
    return params


def freeze_layers(net, pattern):
    """Parameters whose name ``pattern`` finds (``re.search``) get no gradient, so no optimizer
    touches them; returns their names. A pattern that finds none is a ConfigError naming a few
    of the names it could have found."""
    if not pattern:
        return []
    import re

    params = net.collect_params()
    frozen = [name for name in params.keys() if re.search(pattern, name)]
    if not frozen:
        names = list(params.keys())
        raise ConfigError("freeze_layer_pattern=%s finds none of the network's %d parameters (e.g. %s)."
                          % (pattern, len(names), ", ".join(names[:3])),
                          "write a regular expression over these names (the network's first "
                          "parameters' names are shown above).")
    for name in frozen:
        params[name].grad_req = "null"
    return frozen


def init_amp(config, on_gpu):
    """MXNet's automatic mixed precision (float16 where it is safe, as GluonCV's scripts use it):
    ``amp.init()`` patches the operators, so it runs before the network is built; the trainer
    then gets dynamic loss scaling (``make_trainer``) and the step scales its loss."""
    if not config.amp:
        return
    if not on_gpu:
        raise ConfigError("amp=true needs a GPU, and this job runs on CPU.",
                          "set amp=false, or run on a GPU instance.")
    from mxnet.contrib import amp

    amp.init()


def make_trainer(config, net, dist, base_lr):
    """``config.optimizer`` over the trainable parameters (less those freeze_layer_pattern
    finds); Horovod's DistributedTrainer when there are ranks."""
    if config.no_wd:
        apply_no_wd(net)
    frozen = set(freeze_layers(net, config.freeze_layer_pattern))
    if frozen:
        LOG.info("freeze_layer_pattern: %d parameters not trained (%s, ...)", len(frozen),
                 sorted(frozen)[0])
    params = {name: p for name, p in trainable_params(net).items() if name not in frozen}
    trainer = dist.make_trainer(params, config.optimizer,
                                optimizer_params(config, base_lr), config.kv_store)
    if config.amp:
        from mxnet.contrib import amp

        amp.init_trainer(trainer)
    return trainer
