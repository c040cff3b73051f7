"""What a training run has, once main.run_job has built it: one value that the hooks
(main.make_hooks) and the loop (core/engine.py Engine) take, instead of a dozen arguments each.

It holds; it does nothing. Built after the loaders (main.run_job), so every field is final; what
changes as the run goes (epoch, step, best score, history) is the engine's.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class RunContext:
    config: object  # the typed, frozen hyperparameters (job/config.py Config)
    env: object  # the job's /opt/ml snapshot (job/sm_env.py Environment)
    dist: object  # this rank's distributed adapter (core/distributed.py); ``world`` is its world
    stop: object  # this rank's stop request: ``requested()`` (job/stop.py RankStop)
    family: object  # the detector family (families/base.py DetectorFamily)
    ctx: object  # this rank's MXNet context (its GPU, else the CPU)
    datasets: object  # training and validation data (data/common.py Datasets)
    network: object  # the network fitted to the data: net, fitted, sizes (main.Network)
    loaders: object  # this rank's training and validation loaders, steps per epoch (main.Loaders)
    validator: object  # scores the network on the validation data, every rank together (validator.py)
    per_rank_batch: int  # images per step on each rank
    base_lr: float  # the learning rate after scaling to the global batch (config.effective_lr)
    effective: dict  # the effective configuration, as logged and saved (config.json)
    checkpoints: object  # the checkpoint directory (core/checkpoint.py CheckpointManager)

    @property
    def world(self):
        """Rank, size, local rank, is-main (core/distributed.py World)."""
        return self.dist.world

    @property
    def net(self):
        return self.network.net
