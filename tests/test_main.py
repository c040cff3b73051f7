"""main.py, the job of one rank, piece by piece: in milliseconds, with a toy family (a one-weight
network fitting ``w * x`` to ``2 * x``), a list of batches for a loader and fake validation.

Only what no real part can give here is faked: the family's networks and data (GluonCV's need
minutes; the end-to-end tests train them), validation's scores and, on this CPU machine, a GPU.
The engine, hooks, checkpoints, model directory and configuration are the job's own."""

import json
import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from detector_training import main
from detector_training import validator as validator_module
from detector_training.core.checkpoint import CheckpointManager
from detector_training.core.distributed import SingleProcess, World
from detector_training.core.hooks import (CheckpointHook, EarlyStoppingHook, EpochSetupHook, FinalModelHook,
                                          LearningRateHook, MetricLogHook, StopHook, ValidationHook)
from detector_training.core.run_context import RunContext
from detector_training.core.tensorboard_events import TensorBoardHook
from detector_training.data.formats.custom import CustomVOC
from detector_training.job.config import from_hyperparameters
from detector_training.validator import Validator

CLASSES = ("a", "b")


def make_config(**overrides):
    return from_hyperparameters(dict({"dataset": "custom", "epochs": "2", "batch_size": "1",
                                      "log_interval": "2", "num_workers": "0"}, **overrides))


class Batches:
    """Loader and sampler in one: batches 1..4 (the first ``skip`` left out when resuming)."""

    def __init__(self):
        self.skip = 0
        self.epochs = []

    def set_epoch(self, epoch, skip=0):
        self.epochs.append(epoch)
        self.skip = skip

    def __iter__(self):
        return iter([1.0, 2.0, 3.0, 4.0][self.skip:])


class FitStep:
    def __init__(self, net):
        self.net = net
        self.mix_ratio = 1.0

    def __call__(self, batch):
        x = mx.nd.array([[batch]])
        with autograd.record():
            loss = ((self.net(x) - 2 * x) ** 2).mean()
        loss.backward()
        return {"fit_loss": loss}


class Net(mx.gluon.nn.Dense):
    """A one-weight network that records hybridize calls."""

    def __init__(self):
        super().__init__(1, use_bias=False)
        self.hybridized = []

    def hybridize(self, active=True, **kwargs):
        self.hybridized.append(kwargs)
        super().hybridize(active, **kwargs)


class ToyFamily:
    name = "toy"
    loss_names = ("fit_loss",)
    metric_names = ()
    score_names = ("mAP", "AP50")
    objective = "mAP"
    mixup_draw = ("uniform", 0.5, 0.5)
    mixup_loss_weight = 0.5

    def __init__(self):
        self.calls, self.formats = [], []

    def check_config(self, config):
        self.calls.append("check_config")

    def read_datasets(self, config, root, data_format=None):
        self.calls.append(("read_datasets", root))
        self.formats.append(data_format)
        return SimpleNamespace(train=list(range(4)), val=list(range(3)), classes=CLASSES)

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        self.calls.append(("build_network", tuple(classes), per_rank_batch))
        return Net()

    def fit_to_data(self, net, config, datasets):
        return {"fitted": True}

    def image_sizes(self, config, net):
        return (96, 128), 128, 160

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, workers):
        batches = Batches()
        self.calls.append(("train_loader", steps, workers))
        return SimpleNamespace(loader=batches, sampler=batches, mixup=None, first_batch=lambda: 1.0)

    def val_loader(self, config, net, datasets, world, workers):
        return "val-loader", [0, 1, 2]

    def materialize(self, net, batch, ctx):
        self.calls.append(("materialize", batch))
        net.initialize(mx.init.Constant(0.5), ctx=ctx)
        net(mx.nd.array([[batch]]))

    def make_step(self, net, config, ctx, amp_trainer):
        return FitStep(net)

    def export(self, config, classes, params_path, prefix, fitted):
        with open(prefix + "-symbol.json", "w") as handle:
            json.dump({"fitted": fitted}, handle)


def make_env(tmp_path, model_channel=None):
    return SimpleNamespace(
        paths=SimpleNamespace(model_dir=str(tmp_path / "model"), channels_dir=str(tmp_path),
                              tensorboard_dir=str(tmp_path / "output" / "tensorboard")),
        checkpoint_dir=str(tmp_path / "checkpoints"), work_dir=str(tmp_path / "work"),
        stop_file=str(tmp_path / "work" / "stop-requested"), pretrained_dirs=(), environ={},
        channel_dir=lambda name: model_channel if name == "model" else None,
        data_channel=lambda names: ("coco", str(tmp_path / "coco")) if "coco" in names
        else (None, None))


class Stop:
    def __init__(self, at=None):
        self.at, self.calls = at, 0

    def requested(self):
        self.calls += 1
        return self.at is not None and self.calls >= self.at


class RankDist(SingleProcess):
    """A single process that says it is rank ``rank`` of ``size`` and records broadcasts."""

    def __init__(self, rank=0, size=1):
        super().__init__()
        self.world = World(rank=rank, size=size)
        self.broadcasts = []

    def broadcast_object(self, obj, name):
        self.broadcasts.append(name)
        return obj

    def broadcast_parameters(self, params):
        self.broadcasts.append("parameters")


# --- the module ---------------------------------------------------------------------------------

def test_importing_main_imports_no_mxnet_so_the_engine_threads_can_still_be_set():
    code = "import sys, detector_training.main; print(sorted(m for m in ('mxnet', 'gluoncv') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_engine_threads_come_from_the_configuration_unless_set():
    environ = {"MXNET_CPU_WORKER_NTHREADS": "7"}
    main.set_engine_threads(make_config(executor_threads="3"), environ)
    assert environ == {"MXNET_CPU_WORKER_NTHREADS": "7", "MXNET_GPU_WORKER_NTHREADS": "3"}


# --- 1. device and seeds --------------------------------------------------------------------------

def test_a_rank_without_gpus_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(main, "gpu_count", lambda: 0)
    assert main.device_for(World(local_rank=1)) == mx.cpu()


def test_a_rank_with_gpus_runs_on_its_local_gpu_after_one_checked_operation(monkeypatch):
    checked = []
    monkeypatch.setattr(main, "gpu_count", lambda: 2)
    monkeypatch.setattr(main, "check_gpu_runs", checked.append)
    assert main.device_for(World(rank=3, local_rank=1)) == mx.gpu(1)
    assert checked == [mx.gpu(1)]


def test_seeds_repeat_per_rank_and_differ_between_ranks():
    def draws(seed, rank):
        main.seed_everything(seed, rank)
        return (np.random.rand(), mx.nd.random.uniform(shape=(1,)).asscalar())

    assert draws(7, 0) == draws(7, 0)
    assert draws(7, 0) != draws(7, 1)
    assert draws(7, 0) != draws(8, 0)


# --- 2. data --------------------------------------------------------------------------------------

def test_the_data_is_read_through_one_instance_of_the_configured_format(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(CustomVOC, "data_root",
                        lambda self, config, env, world: asked.append(self) or "/voc")
    family = ToyFamily()
    main.read_data(make_config(), make_env(tmp_path), World(), family)
    assert family.calls[0] == ("read_datasets", "/voc")  # the configured format's root
    assert len(asked) == 1 and family.formats == asked  # the instance that found it read the data


def test_read_data_hands_the_root_to_the_family_and_logs_the_sizes(tmp_path, caplog):
    family = ToyFamily()
    with caplog.at_level(logging.INFO, logger="detector_training"):
        datasets = main.read_data(make_config(dataset="coco"), make_env(tmp_path), World(), family)
    assert family.calls == [("read_datasets", str(tmp_path / "coco"))]
    assert datasets.classes == CLASSES
    assert "data: 4 training images, 3 validation images, classes=a,b" in caplog.text


def test_read_data_writes_the_data_report_of_what_the_job_reads(tmp_path, caplog):
    from detector_training.data.generated.synthetic_coco import generate

    generate(str(tmp_path / "coco"), 4, 2, seed=2)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        main.read_data(make_config(dataset="coco"), make_env(tmp_path), World(), ToyFamily())
    assert sorted(os.listdir(tmp_path / "model")) == ["data_report.md", "data_report.png"]
    report = (tmp_path / "model" / "data_report.md").read_text()
    assert "dataset=coco" in report and "## Training: COCO-format JSON" in report
    assert "data check: training: COCO-format JSON" in caplog.text


def test_a_data_report_that_cannot_be_made_leaves_the_job_going(tmp_path, caplog, monkeypatch):
    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(main.check_data, "describe", broken)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        datasets = main.read_data(make_config(dataset="coco"), make_env(tmp_path), World(),
                                  ToyFamily())
    assert datasets.classes == CLASSES
    assert "data check: no report (RuntimeError: disk full)" in caplog.text


def test_a_data_report_that_does_not_fit_on_the_disk_ends_the_job_at_its_start(tmp_path):
    """A full disk is not the report's fault: the job's checkpoints and model would not fit
    either, so it stops now with the project's DiskFullError, not hours later."""
    from detector_training.data.generated.synthetic_coco import generate
    from detector_training.errors import DiskFullError

    generate(str(tmp_path / "coco"), 4, 2, seed=2)
    model = tmp_path / "model"
    model.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(model)], check=True)
    try:
        with pytest.raises(OSError):
            with open(model / "filler", "wb") as handle:
                handle.write(b"x" * (1 << 20))
        with pytest.raises(DiskFullError, match="the disk is full: %s" % (model / "data_report")):
            main.read_data(make_config(dataset="coco"), make_env(tmp_path), World(), ToyFamily())
    finally:
        subprocess.run(["umount", "-l", str(model)], check=False)


def test_num_classes_other_than_the_datas_stops_before_the_network_is_built(tmp_path):
    from detector_training.errors import ConfigError

    family = ToyFamily()
    assert main.read_data(make_config(dataset="coco", num_classes="2"), make_env(tmp_path), World(),
                          family).classes == CLASSES
    with pytest.raises(ConfigError) as err:
        main.read_data(make_config(dataset="coco", num_classes="3"), make_env(tmp_path), World(), family)
    assert err.value.cause == "num_classes=3, but the training data has 2 classes (a,b)."
    assert "set num_classes=2, or leave it out" in err.value.fix


# --- 3. network and 4. loaders --------------------------------------------------------------------

def test_the_network_is_built_for_the_classes_and_carries_its_image_sizes(tmp_path):
    family = ToyFamily()
    datasets = family.read_datasets(None, None)
    network = main.build_network(make_config(), make_env(tmp_path), family, datasets, 2, mx.cpu())
    assert family.calls[-1] == ("build_network", CLASSES, 2)
    assert network.fitted == {"fitted": True}
    assert network.train_shorts == (96, 128) and network.max_size == 160


def test_loaders_give_every_rank_the_same_steps_and_shape_every_parameter(tmp_path, monkeypatch):
    monkeypatch.setattr(main, "adapt_workers", lambda workers, *args: workers)
    family = ToyFamily()
    datasets = family.read_datasets(None, None)
    network = main.build_network(make_config(), make_env(tmp_path), family, datasets, 1, mx.cpu())
    loaders = main.make_loaders(make_config(), family, network, datasets, World(rank=1, size=3), 1,
                                mx.cpu())
    assert loaders.steps == 2  # ceil(4 images / 3 ranks) at one image per rank
    assert ("train_loader", 2, 0) in family.calls
    assert family.calls[-1] == ("materialize", 1.0)
    assert loaders.val == "val-loader" and loaders.val_indices == [0, 1, 2]
    assert network.net.weight.shape == (1, 1)


# --- 5. start ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank, checkpoint, channel, expect_reads, expect_channel", [
    (0, None, None, True, False),
    (0, None, "/model", True, True),
    (0, "resume-state", "/model", True, False),  # a checkpoint wins over the model channel
    (1, None, "/model", False, False),  # only the main rank reads; the others get its result
])
def test_the_main_rank_resumes_or_starts_from_the_model_channel_and_every_rank_gets_it(
        tmp_path, monkeypatch, rank, checkpoint, channel, expect_reads, expect_channel):
    reads, channels = [], []
    monkeypatch.setattr(main, "load_latest", lambda manager, net, ctx: reads.append(1) or checkpoint)
    monkeypatch.setattr(main, "start_from_channel", lambda net, path, ctx: channels.append(path))
    dist = RankDist(rank=rank, size=2)
    manager = CheckpointManager(str(tmp_path / "checkpoints"), 2)
    resume = main.starting_point(manager, make_env(tmp_path, channel), dist, Net(), mx.cpu())
    assert bool(reads) == expect_reads and channels == (["/model"] if expect_channel else [])
    assert resume == (checkpoint if rank == 0 else None)
    assert dist.broadcasts == ["resume", "parameters"]


# --- 6. optimizer: hybridization -----------------------------------------------------------------

def test_hybridize_follows_the_configuration():
    net = Net()
    main.hybridize(net, make_config(static_alloc="true"))
    assert net.hybridized == [{"static_alloc": True}]
    main.hybridize(net, make_config(disable_hybridization="true"))
    assert net.hybridized == [{"static_alloc": True}]


# --- 7. hooks ---------------------------------------------------------------------------------------

def hooks_for(tmp_path, monkeypatch, config, validated):
    monkeypatch.setattr(main, "adapt_workers", lambda workers, *args: workers)
    family, env, dist = ToyFamily(), make_env(tmp_path), RankDist()
    datasets = family.read_datasets(None, None)
    network = main.build_network(config, env, family, datasets, 1, mx.cpu())
    loaders = main.make_loaders(config, family, network, datasets, dist.world, 1, mx.cpu())
    validator = Validator(family, config, datasets, loaders.val, loaders.val_indices, dist, mx.cpu())
    run = RunContext(config=config, env=env, dist=dist, stop=Stop(), family=family, ctx=mx.cpu(),
                     datasets=datasets, network=network, loaders=loaders, per_rank_batch=1,
                     base_lr=0.1, effective={"epochs": 2}, validator=validator,
                     checkpoints=CheckpointManager(env.checkpoint_dir, 2))
    monkeypatch.setattr(validator_module, "validate", lambda *args: validated.append(
        (list(network.net.hybridized), args)) or {"mAP": 0.5, "AP50": 0.6, "per_class": {}, "images": 3})
    return main.make_hooks(run), network, run, loaders


def test_hooks_run_in_the_documented_order(tmp_path, monkeypatch):
    hooks, _network, run, _loaders = hooks_for(tmp_path, monkeypatch, make_config(), [])
    # TensorBoard last: at the end it writes what the final model's hook published (the report)
    # StopHook after validation, which a stop request may end part-way (StopHook then checkpoints)
    assert [type(h) for h in hooks] == [LearningRateHook, EpochSetupHook, MetricLogHook, ValidationHook,
                                        EarlyStoppingHook, StopHook, CheckpointHook,
                                        FinalModelHook, TensorBoardHook]
    # one checkpoint hook, on the run's checkpoint directory: the epoch's and the stop request's
    checkpoints = hooks[6]
    assert checkpoints.manager is run.checkpoints and hooks[5].checkpoint_hook is checkpoints
    assert checkpoints.config_dict is run.effective


def test_validation_hybridizes_the_network_first_then_validates(tmp_path, monkeypatch):
    validated = []
    hooks, network, _, loaders = hooks_for(tmp_path, monkeypatch, make_config(), validated)
    hooks[3].validate_fn()
    (hybridized, args), = validated
    assert hybridized == [{"static_alloc": False}]  # hybridized once, before validate ran
    family, net, loader, indices, ctx = args[:5]
    # the training network on this rank's validation shard, not the training data
    assert net is network.net and loader is loaders.val and indices is loaders.val_indices
    assert loader is not loaders.train and ctx == mx.cpu() and family.name == "toy"
    validated.clear()
    network.net.hybridized.clear()
    hooks, network, _, _ = hooks_for(tmp_path, monkeypatch, make_config(disable_hybridization="true"),
                                     validated)
    hooks[3].validate_fn()
    assert [hybridized for hybridized, _args in validated] == [[]]


# --- 8. the loop, and the whole job in pieces ----------------------------------------------------

def test_run_job_trains_validates_checkpoints_and_writes_the_model(tmp_path, monkeypatch, caplog):
    family = ToyFamily()
    monkeypatch.setattr(main, "families", SimpleNamespace(get=lambda network: family))
    monkeypatch.setattr(main, "data_root", lambda *args: str(tmp_path / "voc"))
    scores = iter([0.5, 0.25])  # epoch 0 is the best
    monkeypatch.setattr(validator_module, "validate", lambda *args: dict(zip(("mAP", "AP50"), [next(scores)] * 2),
                                                             per_class={"a": 0.5}, images=3))
    closed = []
    monkeypatch.setattr(main, "close_loader", closed.append)
    config = make_config(epochs="2", lr="0.01", lr_warmup="0")
    with caplog.at_level(logging.INFO, logger="detector_training"):
        result = main.run_job(config, make_env(tmp_path), RankDist(), Stop())
    assert len(closed) == 2 and closed[1] == "val-loader"  # both loaders, before returning
    assert os.path.exists(tmp_path / "work" / "job-finished")  # train's exit clock starts
    assert result["mAP"] == 0.25 and result["epoch"] == 1  # the last validation, stamped with its epoch
    assert family.calls[0] == "check_config"
    model = tmp_path / "model"
    assert {"model.params", "model-best.params", "classes.json", "config.json", "history.json",
            "model-symbol.json"} <= set(os.listdir(model))
    history = json.load(open(model / "history.json"))
    assert [(r["epoch"], r["mAP"]) for r in history] == [(0, 0.5), (1, 0.25)]  # each epoch its own score
    best = json.load(open(model / "validation-best.json"))
    assert (best["epoch"], best["mAP"]) == (0, 0.5)  # the better epoch, not the last one
    effective = json.load(open(model / "config.json"))
    assert effective["short"] == [96, 128] and effective["max_size"] == 160  # the network's sizes
    assert [h["epoch"] for h in json.load(open(model / "history.json"))] == [0, 1]
    assert os.listdir(tmp_path / "checkpoints")
    assert "training: epochs 0..1, 4 steps per epoch, 1 image(s) per rank" in caplog.text
    assert "finished: rank=0 steps=8 epochs=0..1" in caplog.text


def test_a_stop_request_ends_the_loop_with_a_checkpoint_and_no_final_model(tmp_path, monkeypatch,
                                                                           caplog):
    family = ToyFamily()
    monkeypatch.setattr(main, "families", SimpleNamespace(get=lambda network: family))
    monkeypatch.setattr(main, "data_root", lambda *args: str(tmp_path / "voc"))
    monkeypatch.setattr(validator_module, "validate", lambda *args: pytest.fail("validated after a stop"))
    with caplog.at_level(logging.INFO, logger="detector_training"):
        main.run_job(make_config(), make_env(tmp_path), RankDist(), Stop(at=3))
    assert "stopped: rank=0 steps=3 at epoch 0 iteration 2" in caplog.text
    assert os.listdir(tmp_path / "checkpoints")
    assert not os.path.exists(tmp_path / "model" / "model.params")
    assert not os.path.exists(tmp_path / "work" / "job-finished")  # stopped, not finished


# --- the evaluation report of the best model, every family ---------------------------------------

@pytest.mark.parametrize("family", ["faster_rcnn", "yolo3", "mask_rcnn"])
def test_a_jobs_model_directory_holds_its_best_models_evaluation_report(trained_models, family):
    """Tiny real jobs of each family (conftest's SERVED_JOBS): the report's files, its classes,
    its image count, and the same pictures and page in TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from detector_training.core import eval_report

    model_dir = trained_models[family]
    assert set(eval_report.FILES) <= set(os.listdir(model_dir))
    classes = json.load(open(os.path.join(model_dir, "classes.json")))
    best = json.load(open(os.path.join(model_dir, "validation-best.json")))
    page = open(os.path.join(model_dir, eval_report.REPORT_MD)).read()
    assert page.startswith("# Evaluation\n\n%d image(s), %d class(es)." % (best["images"], len(classes)))
    thresholds = open(os.path.join(model_dir, eval_report.THRESHOLDS_CSV)).read().splitlines()
    assert [line.split(",")[0] for line in thresholds[1:]] == classes
    confusion = open(os.path.join(model_dir, eval_report.CONFUSION_CSV)).read().splitlines()
    assert confusion[-1].startswith("background,") and len(confusion) == len(classes) + 2
    events = EventAccumulator(os.path.join(os.path.dirname(model_dir), "output", "tensorboard"),
                              size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    assert {"evaluation/precision_recall", "evaluation/confusion_matrix",
            "evaluation/validation_images"} <= set(events.Tags()["images"])
    assert "evaluation/report/text_summary" in events.Tags()["tensors"]
