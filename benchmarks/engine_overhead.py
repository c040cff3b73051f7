"""Engine benchmarks, each against a baseline measured in the same run.

1. Engine overhead: images/s of our Engine (with its training hooks: LR schedule, epoch set-up,
   metric logging) against a bare GluonCV forward/backward/step loop, on the same network,
   loader, data and batch. Rounds alternate (bare, engine, bare, engine, ...) so drift hits both.
   Goal: engine/bare >= 0.95.
2. Input pipeline: the share of step time spent waiting for the loader, with the default
   num_workers and with num_workers=0 (the baseline: loading inline).

Prints the table that benchmarks/README.md keeps; ``--json`` also writes every figure.

Usage: python benchmarks/engine_overhead.py [--rounds 3] [--images 48] [--json out.json]
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import mxnet as mx

from detector_training import families
from detector_training.core.checkpoint import Position
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import SingleProcess
from detector_training.core.engine import Engine, MetricSums
from detector_training.core.hooks import EpochSetupHook, LearningRateHook, MetricLogHook
from detector_training.core.run_context import RunContext
from detector_training.core.solver import lr_at, make_trainer
from detector_training.data.formats import build_datasets
from detector_training.data.loaders import TrainData
from detector_training.main import Loaders, Network
from detector_training.data.samplers import steps_per_epoch
from detector_training.data.generated.synthetic_voc import generate

HPS = {"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom", "pretrained_base": "false",
       "short": "128", "max_size": "176", "batch_size": "2", "lr": "0.01",
       "train_splits": "2007_trainval", "log_interval": "10", "epochs": "1000"}


def setup(root, num_workers, n_images, hps=HPS):
    """The network, loader and trainer of a job with ``hps`` reading the data at ``root``."""
    config = from_hyperparameters(dict(hps, num_workers=str(num_workers)))
    data = build_datasets(config, root)
    dist = SingleProcess()
    per_rank = config.per_rank_batch(1)
    family = families.get(config.network)
    net = family.build_network(config, data.classes, per_rank, False, None, mx.cpu())
    family.fit_to_data(net, config, data)
    net.hybridize()
    steps = steps_per_epoch(len(data.train), 1, per_rank)
    train_data = family.train_loader(config, net, data, dist.world, per_rank, steps,
                                     config.num_workers)
    loader, sampler, mixup = train_data.loader, train_data.sampler, train_data.mixup
    trainer = make_trainer(config, net, dist, config.effective_lr(1))
    return config, dist, net, loader, sampler, mixup, trainer, per_rank, steps


def bare_loop(net, loader, trainer, per_rank, steps, config):
    """GluonCV's forward/backward/step with nothing else (one sync per step, as any loop has)."""
    task = families.get(config.network).make_step(net, config, mx.cpu())
    sink = MetricSums()
    start = time.perf_counter()
    batches = iter(loader)
    for _ in range(steps):
        batch = next(batches)
        sink.add_step(task(batch))
        trainer.step(per_rank)
        mx.nd.waitall()
    return steps * per_rank / (time.perf_counter() - start)


def engine_loop(config, dist, net, loader, sampler, mixup, trainer, per_rank, steps, epoch):
    family = families.get(config.network)
    step = family.make_step(net, config, mx.cpu())
    hooks = [LearningRateHook(lambda e, g: lr_at(config, config.effective_lr(1), e, g)),
             EpochSetupHook(sampler, mixup, lambda: None), MetricLogHook()]
    # What the engine reads of a run: the configuration, world, network, training loader, steps,
    # batch and the family's names (no data set, validation, checkpoints or model directory here).
    run = RunContext(config=config, env=None, dist=dist, stop=None, family=family, ctx=mx.cpu(),
                     datasets=None, network=Network(net, None, (), None, None),
                     loaders=Loaders(TrainData(loader, sampler, mixup, None), None, None, steps),
                     per_rank_batch=per_rank, base_lr=config.effective_lr(1), effective={},
                     checkpoints=None, validator=None)  # no validation hook here
    engine = Engine(run, trainer=trainer, step=step, position=Position(epoch=epoch), hooks=hooks)
    engine.config = dataclasses.replace(config, epochs=epoch + 1)  # this epoch is the last
    start = time.perf_counter()
    engine.run()
    elapsed = time.perf_counter() - start
    return steps * per_rank / elapsed, engine.history[-1]["data_wait_pct"]


def table(result):
    """The result as the markdown table benchmarks/README.md keeps."""
    return "\n".join([
        "| benchmark | figure |",
        "|---|---|",
        "| engine overhead: engine / bare loop, images/s (median of %d rounds) | **%.3f** (engine %s; bare %s) |"
        % (len(result["engine_images_per_s"]), result["engine_over_bare_ratio_median"],
           ", ".join("%.1f" % x for x in result["engine_images_per_s"]),
           ", ".join("%.1f" % x for x in result["bare_images_per_s"])),
        "| input pipeline: share of step time waiting for data, num_workers=%d | **%.2f %%** |"
        % (result["default_num_workers"], result["data_wait_pct_default_workers"]),
        "| input pipeline: the same, loading inline (num_workers=0) | %.2f %% |"
        % result["data_wait_pct_inline_loading"],
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-engine-")
    generate(root, train_2007=args.images, test_2007=2, train_2012=0, seed=11)

    # 1. overhead, default workers
    default_workers = from_hyperparameters({}).num_workers
    parts = setup(root, default_workers, args.images)
    config, dist, net, loader, sampler, mixup, trainer, per_rank, steps = parts
    bare_loop(net, loader, trainer, per_rank, 4, config)  # warm-up: graph build, allocations
    bare, eng, waits = [], [], []
    for r in range(args.rounds):
        bare.append(bare_loop(net, loader, trainer, per_rank, steps, config))
        speed, wait = engine_loop(config, dist, net, loader, sampler, mixup, trainer, per_rank, steps, r)
        eng.append(speed)
        waits.append(wait)
    ratio = statistics.median(e / b for e, b in zip(eng, bare))

    # 2. input pipeline baseline: loading inline (num_workers=0)
    parts0 = setup(root, 0, args.images)
    inline_waits = []
    for r in range(max(1, args.rounds - 1)):
        _, wait0 = engine_loop(*parts0, r)
        inline_waits.append(wait0)

    result = {
        "bare_images_per_s": [round(x, 3) for x in bare],
        "engine_images_per_s": [round(x, 3) for x in eng],
        "engine_over_bare_ratio_median": round(ratio, 3),
        "data_wait_pct_default_workers": round(statistics.median(waits), 2),
        "default_num_workers": default_workers,
        "data_wait_pct_inline_loading": round(statistics.median(inline_waits), 2),
        "steps_per_round": steps, "batch": per_rank, "cpus": os.cpu_count(),
    }
    print(table(result))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0 if ratio >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
