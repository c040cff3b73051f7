"""The job of one rank: ``job_main`` reads the job and runs ``run_job``, whose pieces read top to
bottom: where the rank runs and its seeds, the data, the network, the loaders, where training
starts (checkpoint or model channel), the optimizer, the hooks, the loop. Once the loaders are
built, what the run has is one value (core/run_context.py RunContext) that the hooks and the loop
take.

What differs between detector families is behind ``family`` (families/base.py). The commands
(commands.py) run it in-process for one rank; mpirun runs it on every rank through rank.py.

MXNet reads ``MXNET_*_WORKER_NTHREADS`` once, when its engine starts: no module imported here
imports mxnet at import time, and ``job_main`` sets them from the configuration before the first
piece that needs mxnet (``device_for``) imports it.
"""

import itertools
import json
import logging
import os
import random
import shutil
import socket
import tempfile
from dataclasses import dataclass

from detector_training import families, inference, onnx_export
from detector_training.data import formats
from detector_training.core.checkpoint import CheckpointManager, load_latest, resume_trainer
from detector_training.core.distributed import init_distributed
from detector_training.core.engine import Engine
from detector_training.core.evaluation import Interrupted
from detector_training.core.hooks import (CheckpointHook, EarlyStoppingHook, EpochSetupHook,
                                          FinalModelHook, LearningRateHook, MetricLogHook, StopHook,
                                          ValidationHook)
from detector_training.core.model_dir import (BEST_PARAMS, CLASSES_FILE, CONFIG_FILE, EXPORT_PREFIX,
                                              ModelDirectory)
from detector_training.core.run_context import RunContext
from detector_training.core.tensorboard_events import TensorBoardHook
from detector_training.evaluate import run_evaluation
from detector_training.core.solver import init_amp, lr_at, make_trainer
from detector_training.core.start_model import start_from_channel
from detector_training.data.loaders import close_loader
from detector_training.data.samplers import steps_per_epoch
from detector_training.errors import ConfigError, DiskFullError
from detector_training.job import check_data
from detector_training.job.config_file import load_config
from detector_training.job.failure import report_failure
from detector_training.job.guards import adapt_workers, check_gpu_runs, gpu_count
from detector_training.job.logs import setup_logging
from detector_training.job.sm_env import Environment, JobPaths, base_dir
from detector_training.job.stop import RankStop, begin_exit, mark_finished
from detector_training.validator import Validator

LOG = logging.getLogger("detector_training")


def job_main(base=None, install_signals=True):
    """One rank of the job in ``base`` (default: $SAGEMAKER_BASE_DIR or /opt/ml); the exit code.
    ``install_signals``: the process is this rank's own, so its SIGTERM handler and its exit
    bound (stop.begin_exit) are set here; false where the caller owns them (the launcher)."""
    env = None
    failure_path = JobPaths(base or base_dir()).failure_file
    try:
        env = Environment.read(base)
        stop = RankStop(env.stop_file)
        if install_signals:
            stop.install()
        setup_logging(env.rank_hint)
        config = load_config(env)
        set_engine_threads(config)
        dist = init_distributed(env.environ)
        setup_logging(dist.world.rank, config.verbose)
        if config.mode == "evaluate":
            run_evaluation(config, env, dist, device_for(dist.world), stop.requested)
            if dist.world.is_main:
                mark_finished(env.stop_file)  # as a trained job: the launcher's exit clock
        else:
            run_job(config, env, dist, stop)
        dist.shutdown()
        code = 0
    except BaseException as exc:  # the one top-level handler of a rank
        if env is None:
            setup_logging(0)
        code = report_failure(exc, failure_path)
    if install_signals:
        begin_exit(code)  # the model or the failure file is written: leave within a bound
    return code


def set_engine_threads(config, environ=os.environ):
    """MXNet's engine worker threads (an explicit environment value wins)."""
    for var in ("MXNET_GPU_WORKER_NTHREADS", "MXNET_CPU_WORKER_NTHREADS"):
        environ.setdefault(var, str(config.executor_threads))


def run_job(config, env, dist, stop):
    """Train, validate, checkpoint and write the model. Returns the final validation result."""
    world, family = dist.world, families.get(config.network)
    family.check_config(config)
    ctx = device_for(world)
    per_rank_batch = config.per_rank_batch(world.size)
    effective = config.resolved(world.size)
    log_start(config, world, family, ctx, effective)
    seed_everything(config.seed, world.rank)
    init_amp(config, ctx.device_type == "gpu")  # before any network is built

    datasets = read_data(config, env, world, family)
    network = build_network(config, env, family, datasets, per_rank_batch, ctx)
    effective = dict(effective, short=list(network.train_shorts), test_short=network.test_short,
                     max_size=network.max_size)
    loaders = make_loaders(config, family, network, datasets, world, per_rank_batch, ctx)
    validator = Validator(family, config, datasets, loaders.val, loaders.val_indices, dist, ctx, stop.requested)
    try:
        run = RunContext(config=config, env=env, dist=dist, stop=stop, family=family, ctx=ctx,
                         datasets=datasets, network=network, loaders=loaders, validator=validator,
                         per_rank_batch=per_rank_batch, base_lr=config.effective_lr(world.size),
                         effective=effective,
                         checkpoints=CheckpointManager(env.checkpoint_dir, config.keep_checkpoints))
        resume = starting_point(run.checkpoints, env, dist, network.net, ctx)
        hybridize(network.net, config)
        trainer = make_trainer(config, network.net, dist, run.base_lr)
        if resume:
            resume_trainer(resume, trainer)

        engine = Engine(run, trainer=trainer,
                        step=family.make_step(network.net, config, ctx,
                                              trainer if config.amp else None),
                        position=resume.position if resume else None, hooks=make_hooks(run))
        result = train(engine, run.base_lr)
    finally:
        loaders.close()  # now: left to their destructors or to interpreter exit, they can hang
        validator.close()
    if engine.completed and world.is_main:
        mark_finished(env.stop_file)  # the launcher's exit clock starts here (job/launcher.py)
    return result


# --- 1. where this rank runs, and its seeds ---------------------------------------------------

def device_for(world):
    """This rank's device: its local GPU (checked with one operation), else the CPU."""
    import mxnet as mx  # not at the top: set_engine_threads must run first (module docstring)

    if gpu_count() > 0:
        ctx = mx.gpu(world.local_rank)
        check_gpu_runs(ctx)
        return ctx
    return mx.cpu()


def log_start(config, world, family, ctx, effective):
    LOG.info("world: rank=%d size=%d local_rank=%d local_size=%d host=%s device=%s family=%s",
             world.rank, world.size, world.local_rank, world.local_size, socket.gethostname(), ctx,
             family.name)
    if world.is_main:
        LOG.info("effective configuration: %s", json.dumps(effective, sort_keys=True))
        by_source = {}
        for name, source in config.sources.items():
            by_source.setdefault(source, []).append(name)
        for source, names in by_source.items():
            LOG.info("configuration: from %s: %s", source, ", ".join(
                "%s=%s" % (name, json.dumps(effective[name])) for name in names))


def seed_everything(seed, rank):
    """Python's, numpy's and MXNet's generators, seeded per rank (ranks draw different
    augmentations, a rerun draws the same)."""
    import mxnet as mx
    import numpy as np

    rank_seed = seed * 1000 + rank
    random.seed(rank_seed)
    np.random.seed(rank_seed % (2 ** 32))
    mx.random.seed(rank_seed)


# --- 2. data: once per host (local rank 0 fetches, verifies and extracts; the others wait) ----

def read_data(config, env, world, family):
    """The job's data, read by its one instance of the data format: training reads each
    annotation file, and the data report describes the sets that reading kept."""
    fmt = formats.get(config.dataset)
    root = data_root(config, env, world, fmt)
    datasets = family.read_datasets(config, root, data_format=fmt)
    if config.num_classes is not None and len(datasets.classes) != config.num_classes:
        raise ConfigError("num_classes=%d, but the training data has %d classes (%s)."
                          % (config.num_classes, len(datasets.classes), ",".join(datasets.classes)),
                          "set num_classes=%d, or leave it out (the data's classes are used), or name "
                          "the classes to train with classes." % len(datasets.classes))
    if world.is_main:
        LOG.info("data: %d training images, %d validation images, classes=%s", len(datasets.train),
                 len(datasets.val), ",".join(datasets.classes))
        report_data(config, env, root, fmt)
    return datasets


def report_data(config, env, root, fmt):
    """The data check of what this job read, into the log and the model directory (its
    data_report.md and .png); the job goes on whatever it says (the data was read already), but
    not past a full disk: its checkpoints and model would not fit either."""
    try:
        report = check_data.DataReport(env.paths.channels_dir, config.dataset, "the job's dataset")
        check_data.describe(report, fmt, fmt.labelled_root(root, env.paths.channels_dir), config)
        report.log()
        check_data.write_report(report, env.paths.model_dir)
    except DiskFullError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        LOG.warning("data check: no report (%s: %s)", type(exc).__name__, exc)


def data_root(config, env, world, fmt):
    """The folder the data format reads: its channel (the VOC tree acquired once per host for
    voc; a Pipe-mode manifest drained once per host)."""
    return fmt.data_root(config, env, world)


# --- 3. the network, fitted to the data's image sizes ------------------------------------------

@dataclass(frozen=True)
class Network:
    net: object
    fitted: object  # what fit_to_data returned; the family's export needs it
    train_shorts: tuple  # the training scales (the network's when not configured)
    max_size: int
    test_short: int  # the size validation (and so inference) resizes to


def build_network(config, env, family, datasets, per_rank_batch, ctx):
    net = family.build_network(config, datasets.classes, per_rank_batch, config.pretrained_base,
                               env.pretrained_dirs, ctx)
    fitted = family.fit_to_data(net, config, datasets)
    train_shorts, test_short, max_size = family.image_sizes(config, net)
    return Network(net, fitted, tuple(train_shorts), max_size, test_short)


# --- 4. loaders: this rank's shard, the same number of steps on every rank --------------------

@dataclass(frozen=True)
class Loaders:
    train: object  # the family's training loader (loader, sampler, mixup, first_batch)
    val: object
    val_indices: object
    steps: int  # per epoch, on every rank

    def close(self):
        """End the loaders' worker processes (data/loaders.py close_loader)."""
        close_loader(self.train.loader)
        close_loader(self.val)


def make_loaders(config, family, network, datasets, world, per_rank_batch, ctx):
    """The loaders; then every parameter gets its shape from a first batch, so loading,
    broadcasting and the optimizer state never meet a deferred parameter."""
    steps = steps_per_epoch(len(datasets.train), world.size, per_rank_batch)
    workers = adapt_workers(config.num_workers, per_rank_batch, network.train_shorts[-1],
                            network.max_size, world.local_size)
    train_data = family.train_loader(config, network.net, datasets, world, per_rank_batch, steps,
                                     workers)
    val_loader = None
    try:
        val_loader, val_indices = family.val_loader(config, network.net, datasets, world, workers)
        family.materialize(network.net, train_data.first_batch(), ctx)
    except BaseException:
        close_loader(train_data.loader)
        close_loader(val_loader)
        raise
    return Loaders(train_data, val_loader, val_indices, steps)


# --- 5. start: the newest checkpoint (main rank reads, all ranks get it), else the model channel

def starting_point(manager, env, dist, net, ctx):
    """The checkpoint to resume from (None for a fresh start), the same on every rank; every rank
    leaves with the main rank's parameters."""
    resume = None
    if dist.world.is_main:
        resume = load_latest(manager, net, ctx)
        if resume is None and env.channel_dir("model"):
            start_from_channel(net, env.channel_dir("model"), ctx)
    resume = dist.broadcast_object(resume, "resume")
    dist.broadcast_parameters(net.collect_params())
    return resume


# --- 6. the optimizer (Horovod's DistributedTrainer under ranks), restored when resuming -------

def hybridize(net, config):
    """Training and inference call the network with different inputs, so the cached graph is
    rebuilt at each switch (as GluonCV's scripts do)."""
    if not config.disable_hybridization:
        net.hybridize(static_alloc=config.static_alloc)


# --- 7. the hooks, in the order they run at each point ------------------------------------------

def make_hooks(run):
    """The hooks of ``run`` (core/run_context.py), in the order they run at each point."""
    config, net, world = run.config, run.net, run.world
    model_dir = ModelDirectory(run.env.paths.model_dir)

    def learning_rate(epoch, global_step):
        return lr_at(config, run.base_lr, epoch, global_step, run.loaders.steps)

    def validate_now():  # EpochSetupHook hybridizes again for training inputs
        return run.validator.score(net)

    def write_final(engine):
        validation = engine.last_validation
        if engine.early_stop is not None:  # the model is the best one, not the last
            validation = model_dir.load_best(engine.net, run.ctx) or validation
        model_dir.write_final(family=run.family, config=config, net=engine.net,
                              classes=run.datasets.classes, effective_config=run.effective,
                              history=engine.history, validation=validation,
                              fitted=run.network.fitted, stopped=engine.early_stop)
        evaluation_report(engine, run, model_dir.path)
        if config.export_onnx:
            export_onnx(run, model_dir.path)

    family, train_data = run.family, run.loaders.train
    checkpoints = CheckpointHook(run.checkpoints, run.effective)
    return [
        LearningRateHook(learning_rate),
        EpochSetupHook(train_data.sampler, train_data.mixup, lambda: hybridize(net, config),
                       family.mixup_draw, family.mixup_loss_weight),
        MetricLogHook(),
        ValidationHook(validate_now,
                       lambda engine: model_dir.save_best(engine.net, engine.last_validation),
                       scores=family.score_names, objective=family.objective),
        EarlyStoppingHook(family.objective),
        StopHook(run.stop.requested, checkpoints),  # after validation: it may stop part-way
        checkpoints,
        FinalModelHook(write_final),
        TensorBoardHook(run.env.paths.tensorboard_dir, run.effective),  # last: it writes what they published
    ]


def evaluation_report(engine, run, model_path):
    """The best model (its export, run by inference.py as serve runs it) on the validation
    images: core/eval_report.py's pictures and tables into the model directory, published for
    TensorBoard. A convenience like the report: it never fails a trained job, but for a full disk
    (the job's outputs no longer fit); a stop request ends it (the model is written)."""
    config, family, datasets = run.config, run.family, run.datasets
    best = os.path.join(model_path, BEST_PARAMS)
    if datasets.val is None or not os.path.isfile(best):
        LOG.info("evaluation: no report (no validated model)")
        return
    if run.stop.requested():
        LOG.warning("evaluation: no report (a stop was requested; the model is written)")
        return
    scratch = tempfile.mkdtemp(prefix="detector-eval-")
    try:
        family.export(config, datasets.classes, best, os.path.join(scratch, EXPORT_PREFIX), run.network.fitted)
        for name in (CLASSES_FILE, CONFIG_FILE):
            shutil.copy(os.path.join(model_path, name), scratch)
        evaluation, pictures, text = run.validator.report(scratch, model_path)
        engine.pictures.update(("evaluation/" + name.rsplit(".", 1)[0], png) for name, png in pictures.items())
        engine.texts["evaluation/report"] = text
        LOG.info("evaluation: the best model on %d validation image(s): mAP %.4f at IoU %.2f; "
                 "pictures and tables in %s", evaluation.images, evaluation.mean_ap, evaluation.iou,
                 model_path)
    except Interrupted as exc:
        LOG.warning("evaluation: report not written: %s (the model is written)", exc)
    except DiskFullError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        LOG.warning("evaluation: report not written (%s: %s)", type(exc).__name__, exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_onnx(run, model_path):
    """model.onnx and onnx.json (onnx_export.py), verified on the first validation images (generated
    ones without a validation split); an OnnxExportError fails the job."""
    images = []
    if run.datasets.val is not None:
        samples = inference.dataset_samples(run.datasets.val)
        images = [rgb for _name, rgb, *_rest in itertools.islice(samples, onnx_export.MAX_SAMPLE_IMAGES)]
    onnx_export.export_model_directory(model_path, images)
    LOG.info("onnx: %s and %s written, verified on %d image(s)", onnx_export.ONNX_FILE, onnx_export.ONNX_JSON,
             len(images) or onnx_export.SAMPLE_IMAGES)


# --- 8. the loop ---------------------------------------------------------------------------------

def train(engine, base_lr):
    """Run the loop; its last validation result."""
    config, world = engine.config, engine.world
    if world.is_main:
        LOG.info("training: epochs %d..%d, %d steps per epoch, %d image(s) per rank, base lr %.6g",
                 engine.start_epoch, config.epochs - 1, engine.steps, engine.per_rank_batch,
                 base_lr)
    engine.run()
    done = engine.global_step - engine.start_global_step
    if engine.stopped:
        LOG.info("stopped: rank=%d steps=%d at epoch %d iteration %d", world.rank, done,
                 engine.epoch, engine.iteration)
    elif engine.early_stop is not None:
        LOG.info("finished early: rank=%d steps=%d epochs=%d..%d of %d (early stopping; the model is "
                 "the best, from epoch %s)", world.rank, done, engine.start_epoch, engine.epoch,
                 config.epochs, engine.early_stop.get("best_epoch"))
    else:
        LOG.info("finished: rank=%d steps=%d epochs=%d..%d", world.rank, done, engine.start_epoch,
                 engine.epoch - 1)
    return engine.last_validation
