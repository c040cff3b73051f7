"""The job of one rank: ``run_job``, read top to bottom.

Three commands reach it: ``train`` (job/launcher.py; under ``mpirun`` every rank runs
``job/rank.py``), ``detector-train-job`` (one rank in a given tree) and ``detector-run``
(job/demo.py: generated data, CPU-sized hyperparameters).
"""

import argparse
import json
import logging
import os
import random
import socket
import sys
import tempfile
import traceback

from detector_training.job import config as config_mod
from detector_training.errors import failure_text_for

LOG = logging.getLogger("detector_training")


def setup_logging(rank=0, verbose=False):
    """One line per record on stdout, tagged with the rank (metric lines come from rank 0 only)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [rank %(rank)s] %(message)s"))
    handler.addFilter(_RankFilter(rank))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


class _RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def write_failure(path, text):
    """Write the failure reason once: the first writer (the first failing rank) wins."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError:
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    return True


def report_failure(exc, failure_path):
    """Log the reason and the traceback, write the failure file once; the exit code to use."""
    if isinstance(exc, SystemExit) and not exc.code:
        raise exc
    text = failure_text_for(exc)
    LOG.error("job failed: %s\n%s", text, traceback.format_exc())
    write_failure(failure_path, text)
    return 1


def seed_everything(seed, rank):
    import mxnet as mx
    import numpy as np

    rank_seed = seed * 1000 + rank
    random.seed(rank_seed)
    np.random.seed(rank_seed % (2 ** 32))
    mx.random.seed(rank_seed)


def _set_engine_threads(config):
    # Read by MXNet when its engine starts, so set before the first mxnet import in this process.
    for var in ("MXNET_GPU_WORKER_NTHREADS", "MXNET_CPU_WORKER_NTHREADS"):
        os.environ.setdefault(var, str(config.executor_threads))


def gpu_count():
    import mxnet as mx

    try:
        return mx.context.num_gpus()
    except Exception:  # CPU build of mxnet
        return 0


def run_job(config, env, dist, stop):
    """Train, validate, checkpoint and write the model. Returns the final validation result.

    Read top to bottom: devices and seeds, data, network, loaders, resume, optimizer, hooks, loop.
    What differs between detector families is behind ``family`` (families/base.py)."""
    import mxnet as mx

    from detector_training import families
    from detector_training.core.checkpoint import CheckpointManager, load_latest, resume_trainer
    from detector_training.core.engine import (CheckpointHook, Engine, EpochSetupHook,
                                               FinalModelHook, LearningRateHook, MetricLogHook,
                                               StopHook, ValidationHook)
    from detector_training.core.evaluation import validate
    from detector_training.core.model_dir import ModelDirectory
    from detector_training.core.tensorboard_events import TensorBoardHook
    from detector_training.core.solver import init_amp, lr_at, make_trainer
    from detector_training.data.datasets import steps_per_epoch
    from detector_training.job.guards import adapt_workers, check_gpu_runs

    # 1. Where this rank runs, and its seeds.
    world, family = dist.world, families.get(config.network)
    family.check_config(config)
    on_gpu = gpu_count() > 0
    ctx = mx.gpu(world.local_rank) if on_gpu else mx.cpu()
    if on_gpu:
        check_gpu_runs(ctx)
    per_rank_batch = config.per_rank_batch(world.size)
    effective = config.resolved(world.size)
    LOG.info("world: rank=%d size=%d local_rank=%d local_size=%d host=%s device=%s family=%s",
             world.rank, world.size, world.local_rank, world.local_size, socket.gethostname(), ctx,
             family.name)
    if world.is_main:
        LOG.info("effective configuration: %s", json.dumps(effective, sort_keys=True))
    seed_everything(config.seed, world.rank)
    init_amp(config, on_gpu)  # before any network is built

    # 2. Data: once per host (local rank 0 fetches, verifies and extracts; the others wait).
    datasets = family.read_datasets(config, data_root(config, env, world))
    if world.is_main:
        LOG.info("data: %d training images, %d validation images, classes=%s", len(datasets.train),
                 len(datasets.val), ",".join(datasets.classes))

    # 3. The network, fitted to the data's image sizes.
    net = family.build_network(config, datasets.classes, per_rank_batch, config.pretrained_base,
                               env.pretrained_dirs, ctx)
    fitted = family.fit_to_data(net, config, datasets)
    train_shorts, _, max_size = family.image_sizes(config, net)
    effective.update(short=list(train_shorts), max_size=max_size)  # the network's when not set

    # 4. Loaders: this rank's shard, the same number of steps on every rank.
    steps = steps_per_epoch(len(datasets.train), world.size, per_rank_batch)
    workers = adapt_workers(config.num_workers, per_rank_batch, train_shorts[-1], max_size,
                            world.local_size)
    train_data = family.train_loader(config, net, datasets, world, per_rank_batch, steps, workers)
    val_loader, val_indices = family.val_loader(config, net, datasets, world, workers)
    # Every parameter gets its shape now, so loading, broadcasting and the optimizer state never
    # meet a deferred parameter.
    family.materialize(net, train_data.first_batch(), ctx)

    # 5. Start: the newest checkpoint (main rank reads, all ranks get it), else the model channel.
    manager = CheckpointManager(env.checkpoint_dir, config.keep_checkpoints)
    resume = None
    if world.is_main:
        resume = load_latest(manager, net, ctx)
        if resume is None and env.channel_dir("model"):
            from detector_training.core.start_model import start_from_channel

            start_from_channel(net, env.channel_dir("model"), ctx)
    resume = dist.broadcast_object(resume, "resume")
    dist.broadcast_parameters(net.collect_params())

    # 6. Optimizer (Horovod's DistributedTrainer under ranks), restored when resuming.
    def hybridize():
        # Training and inference call the network with different inputs, so the cached graph is
        # rebuilt at each switch (as GluonCV's scripts do).
        if not config.disable_hybridization:
            net.hybridize(static_alloc=config.static_alloc)

    hybridize()
    base_lr = config.effective_lr(world.size)
    trainer = make_trainer(config, net, dist, base_lr)
    if resume:
        resume_trainer(resume, trainer)

    # 7. The loop and its hooks, in the order they run at each point.
    model_dir = ModelDirectory(env.paths.model_dir)
    scratch = tempfile.mkdtemp(prefix="detector-val-rank%d-" % world.rank)
    checkpoints = CheckpointHook(manager, effective)
    hooks = [
        LearningRateHook(lambda epoch, gstep: lr_at(config, base_lr, epoch, gstep, steps)),
        EpochSetupHook(train_data.sampler, train_data.mixup, hybridize, family.mixup_draw,
                       family.mixup_loss_weight),
        MetricLogHook(),
        StopHook(stop.requested, checkpoints),
        ValidationHook(lambda: hybridize() or validate(family, net, val_loader, val_indices, ctx,
                                                       dist, config, datasets, scratch),
                       lambda engine: model_dir.save_best(engine.net, engine.last_validation),
                       scores=family.score_names, objective=family.objective),
        TensorBoardHook(env.paths.tensorboard_dir, effective),
        checkpoints,
        FinalModelHook(lambda engine: model_dir.write_final(
            family=family, config=config, net=engine.net, classes=datasets.classes,
            effective_config=effective, history=engine.history,
            validation=engine.last_validation, fitted=fitted)),
    ]
    engine = Engine(config=config, world=world, dist=dist, net=net, trainer=trainer,
                    step=family.make_step(net, config, ctx, trainer if config.amp else None),
                    loader=train_data.loader, steps=steps, per_rank_batch=per_rank_batch,
                    loss_names=family.loss_names, metric_names=family.metric_names,
                    position=resume.position if resume else None, hooks=hooks)
    if world.is_main:
        LOG.info("training: epochs %d..%d, %d steps per epoch, %d image(s) per rank, base lr %.6g",
                 engine.start_epoch, config.epochs - 1, steps, per_rank_batch, base_lr)
    engine.run()
    done = engine.global_step - engine.start_global_step
    if engine.stopped:
        LOG.info("stopped: rank=%d steps=%d at epoch %d iteration %d", world.rank, done,
                 engine.epoch, engine.iteration)
    else:
        LOG.info("finished: rank=%d steps=%d epochs=%d..%d", world.rank, done, engine.start_epoch,
                 engine.epoch - 1)
    return engine.last_validation


def data_root(config, env, world):
    """The dataset's root: the COCO-format channel, or the VOC tree acquired once per host."""
    if config.dataset == "coco":
        # Annotation files named by path lie anywhere inside the channels.
        return env.paths.channels_dir if config.train_annotation_file else env.require_coco_dir()
    from detector_training.data.sources import FetchOptions
    from detector_training.data.voc_fetch import acquire_voc

    return acquire_voc(config, env, world, env.work_dir, FetchOptions.from_environ(env.environ))


def load_config(env):
    from detector_training.job.config_file import hyperparameters_over_file

    return config_mod.from_hyperparameters(hyperparameters_over_file(env))


def job_main(base=None, install_signals=True):
    """One rank of the job in ``base`` (default: $SAGEMAKER_BASE_DIR or /opt/ml)."""
    from detector_training.job.sm_env import Environment, JobPaths, base_dir
    from detector_training.job.stop import RankStop

    env = None
    failure_path = JobPaths(base or base_dir()).failure_file
    try:
        env = Environment.read(base)
        stop = RankStop(env.stop_file)
        if install_signals:
            stop.install()
        setup_logging(env.rank_hint)
        config = load_config(env)
        _set_engine_threads(config)
        from detector_training.core.distributed import init_distributed

        dist = init_distributed(env.environ)
        setup_logging(dist.world.rank, config.verbose)
        run_job(config, env, dist, stop)
        dist.shutdown()
        return 0
    except BaseException as exc:  # the one top-level handler of a rank
        if env is None:
            setup_logging(0)
        return report_failure(exc, failure_path)


def engine_cli(argv=None):
    parser = argparse.ArgumentParser(description="Run one rank of the training job in a SageMaker-style directory tree.")
    parser.add_argument("--base-dir", default=None, help="the /opt/ml root (default: $SAGEMAKER_BASE_DIR or /opt/ml)")
    args = parser.parse_args(argv)
    sys.exit(job_main(args.base_dir))
