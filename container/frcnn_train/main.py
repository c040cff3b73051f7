"""Entry points.

``run_job`` is the training job of one rank. Three commands reach it:

* ``train`` / ``frcnn-train-job``: the job described by ``$SAGEMAKER_BASE_DIR`` (default
  ``/opt/ml``); under ``horovodrun``/``mpirun`` every rank runs it.
* ``frcnn-run`` (``make run``): writes a SageMaker-style tree with a generated VOC dataset and
  CPU-sized hyperparameters, then runs the very same job on it.
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

from . import config as config_mod
from .errors import failure_text_for

LOG = logging.getLogger("frcnn_train")


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


def run_job(config, env, dist):
    """Train, validate, checkpoint and write the model. Returns the final validation result."""
    import mxnet as mx

    from .checkpoint import (CheckpointManager, apply_optimizer_state, optimizer_state_digest,
                             read_optimizer_state)
    from .datasets import (build_datasets, build_train_loader, build_val_loader, image_sizes,
                           steps_per_epoch)
    from .engine import (CheckpointHook, Engine, EpochSetupHook, FinalModelHook, LearningRateHook,
                         MetricLogHook, StopHook, ValidationHook, dump_json)
    from .guards import adapt_workers, check_gpu_runs
    from .evaluation import make_metric, validate
    from .model import build_network, fit_proposals_to_images
    from .solver import lr_at, make_trainer
    from .step import ForwardBackward

    world = dist.world
    on_gpu = gpu_count() > 0
    ctx = mx.gpu(world.local_rank) if on_gpu else mx.cpu()
    if on_gpu:
        check_gpu_runs(ctx)
    per_rank_batch = config.per_rank_batch(world.size)
    effective = config.resolved(world.size)
    LOG.info("world: rank=%d size=%d local_rank=%d local_size=%d host=%s device=%s", world.rank,
             world.size, world.local_rank, world.local_size, socket.gethostname(), ctx)
    if world.is_main:
        LOG.info("effective configuration: %s", json.dumps(effective, sort_keys=True))
    seed_everything(config.seed, world.rank)

    from .voc_fetch import acquire_voc

    # Once per host: local rank 0 fetches, verifies and extracts; the others wait for its marker.
    work_dir = os.environ.get("FRCNN_WORK_DIR") or env.paths.work_dir
    data_root = env.require_coco_dir() if config.dataset == "coco" else \
        acquire_voc(config, env, world, work_dir)
    datasets = build_datasets(config, data_root)
    if world.is_main:
        LOG.info("data: %d training images, %d validation images, classes=%s", len(datasets.train),
                 len(datasets.val), ",".join(datasets.classes))
    net = build_network(config, datasets.classes, per_rank_batch, config.pretrained_base,
                        env.pretrained_dirs, ctx)
    proposals = fit_proposals_to_images(net, config, datasets)
    train_shorts, _, image_max = image_sizes(config, net)
    effective.update(short=list(train_shorts), max_size=image_max)  # the network's when not set
    model_dir = env.paths.model_dir
    manager = CheckpointManager(env.checkpoint_dir, config.keep_checkpoints)
    steps = steps_per_epoch(len(datasets.train), world.size, per_rank_batch)
    short, max_size = config_mod_short(config, net)
    workers = adapt_workers(config.num_workers, per_rank_batch, short, max_size, world.local_size)
    train_data = build_train_loader(config, net, datasets, world, per_rank_batch, steps, workers)
    loader, sampler, mixup = train_data.loader, train_data.sampler, train_data.mixup
    val_loader, val_indices = build_val_loader(config, net, datasets, world, workers)
    # Every parameter gets its shape now (one training-mode forward on one sample), so loading,
    # broadcasting and the optimizer state never meet a deferred parameter.
    materialize_parameters(net, train_data.first_batch(), ctx)

    # Resume: the main rank finds the newest complete checkpoint and shares what it holds.
    resume = None
    if world.is_main:
        latest = manager.latest()
        if latest:
            path, state = latest
            net.load_parameters(os.path.join(path, "model.params"), ctx=ctx)
            resume = dict(state, optimizer=read_optimizer_state(path), path=path)
        elif env.channel_dir("model"):
            from .start_model import start_from_channel

            start_from_channel(net, env.channel_dir("model"), ctx)
    resume = dist.broadcast_object(resume, "resume")
    dist.broadcast_parameters(net.collect_params())

    def hybridize():
        # Training and inference call the network with different inputs, so the cached graph is
        # rebuilt at each switch (as GluonCV's script does).
        if not config.disable_hybridization:
            net.hybridize(static_alloc=config.static_alloc)

    hybridize()
    base_lr = config.effective_lr(world.size)
    trainer = make_trainer(config, net, dist, base_lr, on_gpu)
    start_epoch, start_iteration, global_step = 0, 0, 0
    if resume:
        apply_optimizer_state(trainer, *resume["optimizer"])
        start_epoch, global_step = resume["epoch"], resume["global_step"]
        start_iteration = resume.get("iteration", 0)
        LOG.info("resume: from %s at epoch %d iteration %d (global step %d); optimizer state "
                 "restored: %s", resume["path"], start_epoch, start_iteration, global_step,
                 optimizer_state_digest(trainer))

    metric = make_metric(config, datasets, os.path.join(tempfile.mkdtemp(prefix="frcnn-val-"), "rank%d" % world.rank))
    step = ForwardBackward(net, config, ctx, amp_trainer=trainer if config.amp else None)

    def save_best(engine):
        os.makedirs(model_dir, exist_ok=True)
        tmp = os.path.join(model_dir, ".tmp-model-best.params")
        engine.net.save_parameters(tmp)
        os.replace(tmp, os.path.join(model_dir, "model-best.params"))
        dump_json(os.path.join(model_dir, "validation-best.json"), engine.last_validation)

    def write_final(engine):
        os.makedirs(model_dir, exist_ok=True)
        tmp = os.path.join(model_dir, ".tmp-model.params")
        engine.net.save_parameters(tmp)
        os.replace(tmp, os.path.join(model_dir, "model.params"))
        dump_json(os.path.join(model_dir, "classes.json"), list(datasets.classes))
        dump_json(os.path.join(model_dir, "config.json"), effective)
        dump_json(os.path.join(model_dir, "history.json"), engine.history)
        if engine.last_validation is not None:
            dump_json(os.path.join(model_dir, "validation.json"), engine.last_validation)
        export_symbol(config, datasets.classes, os.path.join(model_dir, "model.params"),
                      os.path.join(model_dir, "model"), config_mod_short(config, net), proposals)
        from .report import write_report

        try:
            write_report(model_dir, engine.history, engine.last_validation, list(datasets.classes))
        except Exception as exc:  # the report is a convenience: it must never fail a trained job
            LOG.warning("report: not written (%s: %s)", type(exc).__name__, exc)
        LOG.info("model: written to %s", model_dir)

    checkpoints = CheckpointHook(manager, effective)
    hooks = [
        LearningRateHook(lambda epoch, gstep: lr_at(config, base_lr, epoch, gstep)),
        EpochSetupHook(sampler, mixup, hybridize),
        MetricLogHook(),
        StopHook(stop_requested, checkpoints),
        ValidationHook(lambda: hybridize() or validate(net, val_loader, val_indices, ctx, metric, dist,
                                        coco=config.dataset == "coco"), save_best),
        checkpoints,
        FinalModelHook(write_final),
    ]
    engine = Engine(config=config, world=world, dist=dist, net=net, trainer=trainer, step=step,
                    loader=loader, steps=steps, per_rank_batch=per_rank_batch,
                    start_epoch=start_epoch, start_iteration=start_iteration,
                    global_step=global_step, hooks=hooks)
    if resume:
        engine.history = list(resume.get("history") or [])
        if resume.get("best_map") is not None:
            engine.best_map = resume["best_map"]
    if world.is_main:
        LOG.info("training: epochs %d..%d, %d steps per epoch, %d image(s) per rank, base lr %.6g",
                 start_epoch, config.value("epochs") - 1, steps, per_rank_batch, base_lr)
    engine.run()
    if engine.stopped:
        LOG.info("stopped: rank=%d steps=%d at epoch %d iteration %d", world.rank,
                 engine.global_step - global_step, engine.epoch, engine.iteration)
    else:
        LOG.info("finished: rank=%d steps=%d epochs=%d..%d", world.rank,
                 engine.global_step - global_step, start_epoch, engine.epoch - 1)
    return engine.last_validation


_STOP = {"signal": False}


def stop_requested():
    """A stop was asked for: a signal reached this process, or the launcher wrote the stop file."""
    path = os.environ.get("FRCNN_STOP_FILE")
    return _STOP["signal"] or bool(path and os.path.exists(path))


def _on_stop_signal(signum, _frame):
    if not _STOP["signal"]:
        _STOP["signal"] = True
        LOG.warning("received signal %d: stopping at the next step boundary", signum)


def install_stop_signals():
    """SIGTERM asks this process to stop at the next step boundary; processes forked from it
    (data-loader workers) keep the default action."""
    import signal

    from .signals import install_for_this_process

    install_for_this_process(_on_stop_signal, (signal.SIGTERM,))


def materialize_parameters(net, batch, ctx):
    from mxnet import autograd

    data, label = [(part[0] if isinstance(part, (list, tuple)) else part).as_in_context(ctx)
                   for part in batch[:2]]
    with autograd.train_mode():
        net(data, label[:, :, :4], label[:, :, 4:5])


def config_mod_short(config, net):
    short = config.short if config.short is not None else net.short
    short = short[-1] if isinstance(short, (list, tuple)) else short
    max_size = config.max_size if config.max_size is not None else net.max_size
    return short, max_size


def export_symbol(config, classes, params_path, prefix, sizes, proposals):
    """A symbol/params pair for deployment, from a fresh network in inference mode, with the
    proposal counts the job trained and validated with."""
    import mxnet as mx

    from .model import build_network, set_proposal_counts

    net = build_network(config, classes, 1, False, None, mx.cpu())
    set_proposal_counts(net, *proposals)
    net.load_parameters(params_path, ctx=mx.cpu(), ignore_extra=True)  # training-only encoders
    net.hybridize()
    short, max_size = sizes
    net(mx.nd.zeros((1, 3, short, min(max_size, int(short * 4 / 3)))))
    net.export(prefix, epoch=0)


def load_config(env):
    return config_mod.from_hyperparameters(env.hyperparameters)


def job_main(base=None, install_signals=True):
    """One rank of the job in ``base`` (default: $SAGEMAKER_BASE_DIR or /opt/ml)."""
    from .sm_env import Environment, JobPaths, base_dir

    if install_signals:
        install_stop_signals()
    failure_path = JobPaths(base or base_dir()).failure_file
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    setup_logging(rank)
    try:
        env = Environment.read(base or base_dir())
        config = load_config(env)
        _set_engine_threads(config)
        from .distributed import init_distributed

        dist = init_distributed()
        setup_logging(dist.world.rank, config.verbose)
        run_job(config, env, dist)
        dist.shutdown()
        return 0
    except BaseException as exc:  # the one top-level handler of a rank
        return report_failure(exc, failure_path)


def engine_cli(argv=None):
    parser = argparse.ArgumentParser(description="Run one rank of the training job in a SageMaker-style directory tree.")
    parser.add_argument("--base-dir", default=None, help="the /opt/ml root (default: $SAGEMAKER_BASE_DIR or /opt/ml)")
    args = parser.parse_args(argv)
    sys.exit(job_main(args.base_dir))


# CPU-sized defaults for `make run`: the small network, small images, a few minutes on 2 cores.
# From scratch at a global batch of 2, lr 0.04 (0.02 after scaling) kept the detector head noisy:
# held-out mAP after 4 epochs of 160 images was 0.21 at 0.02, 0.29 at 0.01, 0.33 at 0.005 and
# a decay step helped only at the lower rates (issue 15); 0.01 gives 0.005 after scaling.
RUN_DEFAULTS = {
    "network": "faster_rcnn_resnet18_v1b_voc",
    "dataset": "custom",
    "pretrained_base": "false",
    "short": "128",
    "max_size": "200",
    "batch_size": "2",
    "epochs": "8",
    "lr": "0.01",
    "lr_decay_epoch": "7",
    "lr_warmup": "20",
    "lr_base_batch_size": "4",  # as the VOC presets, also for a generated COCO-format dataset
    "num_workers": "1",
    "log_interval": "20",
    "seed": "7",
}
# The generated demo data: more distinct images rather than more passes over few (72 before).
RUN_IMAGES = dict(n_train=120, n_test=48, n_train_2012=60)


def prepare_run_tree(base, hyperparameters, n_train=RUN_IMAGES["n_train"], n_test=RUN_IMAGES["n_test"],
                     n_train_2012=RUN_IMAGES["n_train_2012"], seed=0):
    """A SageMaker-style tree with generated data: a VOCdevkit in the 'voc' channel, or for
    dataset=coco a COCO-format dataset (own categories) in the 'coco' channel."""
    if str(hyperparameters.get("dataset", "")).strip('"') == "coco":
        from .synthetic_coco import generate as generate_coco

        channel = os.path.join(base, "input", "data", "coco")
        if not os.path.isdir(os.path.join(channel, "annotations")):
            generate_coco(channel, n_train + n_train_2012, n_test, seed=seed)
    else:
        from .synthetic_voc import generate

        channel = os.path.join(base, "input", "data", "voc")
        if not os.path.isdir(os.path.join(channel, "VOCdevkit")):
            generate(channel, n_train, n_test, n_train_2012, seed=seed)
    config_dir = os.path.join(base, "input", "config")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "hyperparameters.json"), "w") as handle:
        json.dump({k: str(v) for k, v in hyperparameters.items()}, handle, indent=1)
    return base


def run_cli(argv=None):
    parser = argparse.ArgumentParser(
        description="Generate a small VOC-format dataset and run the training job on it (CPU).")
    parser.add_argument("--output", default="out/run", help="directory for the job tree")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a hyperparameter (repeatable)")
    args = parser.parse_args(argv)
    hyperparameters = dict(RUN_DEFAULTS)
    for item in args.set:
        key, _, value = item.partition("=")
        hyperparameters[key] = value
    base = os.path.abspath(args.output)
    prepare_run_tree(base, hyperparameters)
    code = job_main(base)
    model_dir = os.path.join(base, "model")
    if code == 0:
        print("model directory: %s" % model_dir)
        print("files: %s" % ", ".join(sorted(os.listdir(model_dir))))
    else:
        print("job failed; reason in %s" % os.path.join(base, "output", "failure"))
    sys.exit(code)
