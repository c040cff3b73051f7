"""The YOLOv3 family: sharded loaders (two ranks read different images at every step), multi-scale,
label smoothing, mixup, fine-tuning onto other classes, configuration errors, and whole jobs
(one rank, two Horovod ranks, stop and resume) on generated data."""

import json
import os
import re
import signal
import subprocess
import time

import mxnet as mx
import numpy as np
import pytest

from conftest import BIN, make_job, run_horovod_job

from detector_training import families
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import World
from detector_training.core.engine import MetricSums
from detector_training.core.hooks import EpochSetupHook
from detector_training.data.common import Datasets
from detector_training.data.formats import build_datasets
from detector_training.data.samplers import steps_per_epoch
from detector_training.data.generated.synthetic_voc import generate
from detector_training.errors import ConfigError
from detector_training.job.metrics import definitions_for

YOLO = {"network": "yolo3_mobilenet0.25_voc", "dataset": "custom", "pretrained_base": "false",
        "train_splits": "2007_trainval", "num_workers": "0", "short": "64"}


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("voc"))
    generate(root, train_2007=12, test_2007=2, train_2012=0, seed=5)
    return root


def yolo_config(**overrides):
    return from_hyperparameters(dict(YOLO, **{k: str(v) for k, v in overrides.items()}))


class RecordingDataset:
    """The training set, recording which images are read (dataset indices, in order)."""

    def __init__(self, base):
        self.base = base
        self.read = []

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        self.read.append(index)
        return self.base[index]

    def transform(self, fn, lazy=True):
        return mx.gluon.data.SimpleDataset(self).transform(fn, lazy)


def rank_loader(config, datasets, rank, size, per_rank_batch):
    family = families.get(config.network)
    recording = RecordingDataset(datasets.train)
    shard = Datasets(train=recording, val=datasets.val, classes=datasets.classes,
                     aspect_ratios=datasets.aspect_ratios)
    steps = steps_per_epoch(len(datasets.train), size, per_rank_batch)
    net = family.build_network(config, datasets.classes, per_rank_batch, False, None, mx.cpu())
    data = family.train_loader(config, net, shard, World(rank=rank, size=size), per_rank_batch,
                               steps, 0)
    return data, recording, steps


@pytest.mark.parametrize("multi_scale", [False, True])
def test_two_ranks_read_different_images_at_every_step(voc_root, multi_scale):
    config = yolo_config(multi_scale=multi_scale, multi_scale_interval=1, short=96)
    datasets = build_datasets(config, voc_root)
    per_step = {}
    for rank in (0, 1):
        data, recording, steps = rank_loader(config, datasets, rank, 2, 2)
        assert data.loader._batch_sampler is data.sampler  # pylint: disable=protected-access
        for epoch in (0, 1):
            data.sampler.set_epoch(epoch)
            start = len(recording.read)
            batches = [batch for batch in data.loader]
            assert len(batches) == steps == 3
            read = recording.read[start:]
            per_step[rank, epoch] = [set(read[i:i + 2]) for i in range(0, len(read), 2)]
            for batch in batches:  # image, five targets, padded boxes: GluonCV's YOLOv3 batch
                assert len(batch) == 7 and batch[0].shape[0] == 2
    for epoch in (0, 1):
        for step in range(3):
            assert not per_step[0, epoch][step] & per_step[1, epoch][step], (epoch, step)
        seen = set().union(*per_step[0, epoch], *per_step[1, epoch])
        assert seen == set(range(12))  # together the ranks read the whole set each epoch
    assert per_step[0, 0] != per_step[0, 1]  # and a new order each epoch


def test_gluoncvs_plain_shuffled_loader_gives_every_rank_the_same_batches():
    """What the test above guards against: GluonCV's train_yolo3.py under Horovod (a shuffled
    DataLoader seeded alike on every rank) feeds both ranks the very same images."""
    orders = []
    for _rank in (0, 1):
        mx.random.seed(233)
        np.random.seed(233)
        loader = mx.gluon.data.DataLoader(mx.gluon.data.SimpleDataset(list(range(12))), 2,
                                          shuffle=True, last_batch="rollover")
        orders.append([b.asnumpy().tolist() for b in loader])
    assert orders[0] == orders[1]


def test_multi_scale_draws_a_size_per_interval_reproducibly(voc_root):
    from detector_training.families.yolo3 import multi_scale_sizes

    assert multi_scale_sizes(416) == tuple(range(320, 609, 32))  # GluonCV's 320..608
    config = yolo_config(multi_scale=True, multi_scale_interval=2, short=96)
    datasets = build_datasets(config, voc_root)
    data, _, _ = rank_loader(config, datasets, 0, 1, 2)
    sizes = multi_scale_sizes(96)
    assert sizes == (96, 128)
    data.sampler.set_epoch(3)
    shapes = [batch[0].shape[2] for batch in data.loader]
    # each sample is ((image index, size choice), its draw)
    plan = [sizes[batch[0][0][1]] for batch in data.sampler.batches(3)]
    assert shapes == plan and len(shapes) == 6
    assert all(plan[i] == plan[i + 1] for i in (0, 2, 4))  # one size per 2 batches
    assert len(set(s for e in range(6) for s in
                   [sizes[b[0][0][1]] for b in data.sampler.batches(e)])) == 2
    data.sampler.set_epoch(3, skip=4)  # resuming at iteration 4 sees the same sizes
    assert [batch[0].shape[2] for batch in data.loader] == plan[4:]
    wide = yolo_config(multi_scale=True, multi_scale_interval=1, short=128)
    data, _, _ = rank_loader(wide, datasets, 0, 1, 2)
    assert multi_scale_sizes(128) == (96, 128, 160, 192)
    for epoch in range(5):  # resumed mid-epoch: the same size choices as the whole epoch's
        whole = [b[0][0][1] for b in data.sampler.batches(epoch)]
        data.sampler.set_epoch(epoch, skip=2)
        assert [b[0][0][1] for b in data.sampler] == whole[2:]


def one_step_losses(config, voc_root, net=None, batch=None):
    family = families.get(config.network)
    datasets = build_datasets(config, voc_root)
    if net is None:
        net = family.build_network(config, datasets.classes, 1, False, None, mx.cpu())
        data = family.train_loader(config, net, datasets, World(), 2, 1, 0)
        batch = data.first_batch()
        family.materialize(net, batch, mx.cpu())
    step, sums = family.make_step(net, config, mx.cpu()), MetricSums()
    values = step(batch)
    assert set(values) == set(family.loss_names)
    sums.add_step(values)
    return net, MetricSums.values_from_flat(family.loss_names, sums.flat(family.loss_names)), batch


def test_the_network_computes_four_losses_and_label_smoothing_changes_the_class_loss(voc_root):
    net, plain, batch = one_step_losses(yolo_config(), voc_root)
    assert set(plain) == {"obj_loss", "center_loss", "scale_loss", "cls_loss"}
    assert all(np.isfinite(v) and v > 0 for v in plain.values()), plain
    assert net._target_generator._label_smooth is False  # pylint: disable=protected-access
    # The same network and batch, with label smoothing: only the class loss changes.
    _, smooth, _ = one_step_losses(yolo_config(label_smooth=True), voc_root, net, batch)
    assert net._target_generator._label_smooth is True  # pylint: disable=protected-access
    for name in ("obj_loss", "center_loss", "scale_loss"):
        assert smooth[name] == pytest.approx(plain[name], rel=1e-4)
    assert smooth["cls_loss"] != pytest.approx(plain["cls_loss"], rel=1e-3)


def test_mixup_uses_beta_ratios_without_loss_weight_and_turns_off_at_the_end(voc_root):
    family = families.get("yolo3_mobilenet0.25_voc")
    config = yolo_config(mixup=True, epochs=4, no_mixup_epochs=1)
    _, losses, batch = one_step_losses(config, voc_root)
    assert set(losses) == {"obj_loss", "center_loss", "scale_loss", "cls_loss"} and all(np.isfinite(v) for v in losses.values()), losses

    class Mixup:
        def set_mixup(self, fn=None, *args):
            self.draw = (fn, args)

    class FakeEngine:
        pass

    engine, mixup = FakeEngine(), Mixup()
    engine.config, engine.start_iteration = config, 0
    engine.step = family.make_step(_StubNet(), config, mx.cpu())
    hook = EpochSetupHook(_NoSampler(), mixup, lambda: None, family.mixup_draw,
                          family.mixup_loss_weight)
    engine.epoch = 0
    hook.before_epoch(engine)
    assert mixup.draw == (np.random.beta, (1.5, 1.5)) and engine.step.mix_ratio == 1.0
    engine.epoch = 3
    hook.before_epoch(engine)
    assert mixup.draw == (None, ())
    # Faster R-CNN keeps GluonCV's even mixing with halved losses.
    rcnn = families.get("faster_rcnn_resnet18_v1b_voc")
    assert (rcnn.mixup_draw, rcnn.mixup_loss_weight) == (("uniform", 0.5, 0.5), 0.5)


class _StubNet:
    class _TargetGenerator:
        _label_smooth = False

    _target_generator = _TargetGenerator()


class _NoSampler:
    def set_epoch(self, epoch, skip=0):
        pass


def test_a_yolo_model_starts_a_job_on_other_classes(tmp_path, caplog):
    from detector_training.core.start_model import start_from_channel

    def net_for(classes):
        config = yolo_config()
        net = families.get(config.network).build_network(config, classes, 1, False, None, mx.cpu())
        with mx.autograd.train_mode():
            net(mx.nd.zeros((1, 3, 64, 64)))
        return net

    old = net_for(("circle", "square", "triangle"))
    channel = tmp_path / "model"
    channel.mkdir()
    old.save_parameters(str(channel / "model-best.params"))
    (channel / "classes.json").write_text(json.dumps(["circle", "square", "triangle"]))
    new = net_for(("square", "hexagon"))
    with caplog.at_level("INFO"):
        summary = start_from_channel(new, str(channel), mx.cpu())
    assert list(new.classes) == ["square", "hexagon"]
    old_p, new_p = old._collect_params_with_prefix(), new._collect_params_with_prefix()  # pylint: disable=protected-access
    backbone = [n for n in new_p if n.startswith("stages.")]
    assert backbone and all(np.array_equal(new_p[n].data().asnumpy(), old_p[n].data().asnumpy())
                            for n in backbone)
    assert summary["reinitialised"] == ["yolo_outputs.%d.prediction.%s" % (i, w)
                                        for i in range(3) for w in ("weight", "bias")]
    old_w = old.yolo_outputs[0].prediction.weight.data().asnumpy()
    new_w = new.yolo_outputs[0].prediction.weight.data().asnumpy()
    assert new_w.shape[0] == 3 * (5 + 2)
    for anchor in range(3):  # per anchor: objectness + box rows kept, 'square' row kept
        o, n = anchor * 8, anchor * 7
        np.testing.assert_array_equal(new_w[n:n + 5], old_w[o:o + 5])
        np.testing.assert_array_equal(new_w[n + 5], old_w[o + 5 + 1])
        assert not np.array_equal(new_w[n + 6], old_w[o + 5 + 2])
    assert "class head re-initialised (yolo_outputs (6))" in caplog.text
    assert not any(n.startswith("yolo_outputs") and "prediction" in n for n in summary["reused"])


@pytest.mark.parametrize("overrides, words", [
    ({"short": "100"}, "short=100: a YOLOv3 network"),
    ({"short": "64,96"}, "one square input size"),
])
def test_yolo_sizes_it_cannot_use_are_config_errors(overrides, words):
    config = yolo_config(**overrides)
    with pytest.raises(ConfigError, match=re.escape(words)):
        families.get(config.network).check_config(config)


@pytest.mark.parametrize("option", ["label_smooth", "multi_scale"])
def test_yolo_options_on_another_family_are_config_errors(option):
    with pytest.raises(ConfigError, match="%s=true applies to yolo3 networks only" % option):
        from_hyperparameters({"network": "faster_rcnn_resnet18_v1b_voc", option: "true"})


# --- whole jobs -------------------------------------------------------------------------------

JOB = {"network": "yolo3_mobilenet0.25_voc", "short": "96", "max_size": "96", "lr": "0.004",
       "lr_base_batch_size": "4", "lr_warmup": "4", "clip_gradient": "5"}


def test_one_rank_yolo_job_trains_validates_exports_and_predicts(job_dir):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size="2", multi_scale="true",
                                  multi_scale_interval="2"), n_train=8, n_test=3)
    result = subprocess.run([os.path.join(BIN, "detector-train-job"), "--base-dir", base],
                            capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "family=yolo3" in out and "multi-scale training: sizes 96,128" in out
    assert re.search(r"\[Epoch 1\]\[Batch 1/4\] lr=\S+ speed=\S+ samples/s obj_loss=[0-9.]+ "
                     r"center_loss=[0-9.]+ scale_loss=[0-9.]+ cls_loss=[0-9.]+", out)
    names = [d["Name"] for d in definitions_for("yolo3")]
    assert "train:obj_loss" in names and "train:rpn_conf_loss" not in names
    for definition in definitions_for("yolo3"):  # each of them matches this job's lines
        assert re.search(definition["Regex"], out), definition["Name"]
    model = os.path.join(base, "model")
    for name in ("model.params", "model-best.params", "model-symbol.json", "model-0000.params",
                 "classes.json", "config.json", "validation.json", "history.json",
                 "training_curves.png", "per_class_ap.md"):
        assert os.path.isfile(os.path.join(model, name)), name
    history = json.load(open(os.path.join(model, "history.json")))
    assert [h["epoch"] for h in history] == [0, 1] and all(np.isfinite(h["cls_loss"]) for h in history)
    assert json.load(open(os.path.join(model, "validation.json")))["images"] == 3
    # The prediction picture, from the exported model.
    image = os.path.join(base, "input", "data", "voc", "VOCdevkit", "VOC2007", "JPEGImages")
    image = os.path.join(image, sorted(os.listdir(image))[0])
    picture = os.path.join(str(job_dir), "boxes.png")
    drawn = subprocess.run([os.path.join(BIN, "detector-predict"), model, image, "--output",
                            picture, "--threshold", "0"], capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr
    assert os.path.getsize(picture) > 0 and re.search(r"drew \d+ detection", drawn.stdout)


def test_two_horovod_ranks_train_a_yolo_job(job_dir):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size="4"), n_train=7, n_test=3)
    result, out = run_horovod_job(base, ranks=2)
    assert result.returncode == 0, out[-4000:]
    assert "world: rank=1 size=2" in out and "family=yolo3" in out
    assert "training: epochs 0..1, 2 steps per epoch, 2 image(s) per rank" in out
    assert len(re.findall(r"finished: rank=\d steps=4 epochs=0\.\.1", out)) == 2
    assert re.search(r"validation: epoch=1 images=3 time=\S+ mAP=[0-9.]+", out)
    assert os.path.isfile(os.path.join(base, "model", "model-symbol.json"))


def wait_for(predicate, seconds, proc):
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.2)
    return False


# Two ranks only: one rank's stop and resume is the same checkpoint code for every family
# (tests/end_to_end/test_job_contract.py runs it with one rank and with two).
@pytest.mark.parametrize("processes", [2])
def test_a_stopped_yolo_job_resumes_at_the_next_iteration(job_dir, processes):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size=str(processes), log_interval="1",
                                  multi_scale="true", multi_scale_interval="3",
                                  processes_per_host=str(processes)),
                    n_train=16, n_test=2)
    env = dict(os.environ, SAGEMAKER_BASE_DIR=base, PYTHONUNBUFFERED="1")
    log_path = os.path.join(str(job_dir), "..", "first.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([os.path.join(BIN, "train")], stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        assert wait_for(lambda: "[Epoch 0][Batch 3/" in open(log_path).read(), 300, proc), \
            open(log_path).read()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, open(log_path).read()[-3000:]
    out = open(log_path).read()
    assert "stop requested: saving a checkpoint at epoch 0" in out
    latest = open(os.path.join(base, "checkpoints", "latest")).read().strip()
    state = json.load(open(os.path.join(base, "checkpoints", latest, "state.json")))
    assert state["epoch"] == 0 and 0 < state["iteration"] < 16 // processes
    assert not os.path.exists(os.path.join(base, "model", "model.params"))
    assert len(re.findall(r"stopped: rank=\d", out)) == processes  # every rank stopped

    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resume: from %s at epoch 0 iteration %d" % (
        os.path.join(base, "checkpoints", latest), state["iteration"]) in result.stdout
    steps_left = 2 * (16 // processes) - state["global_step"]
    assert re.search(r"finished: rank=0 steps=%d epochs=0\.\.1" % steps_left, result.stdout)
    assert os.path.isfile(os.path.join(base, "model", "model.params"))


def test_yolo_on_coco_format_data_scores_with_cocos_metric_in_original_pixels(tmp_path):
    """COCO-format data with its own categories: one step, then validation whose detections are
    mapped back to original pixels (COCO's metric reads them so); ground truth given back as
    detections scores 1.0."""
    from detector_training.core.distributed import SingleProcess
    from detector_training.core.evaluation import validate
    from detector_training.data.generated.synthetic_coco import generate as generate_coco

    root = generate_coco(str(tmp_path / "coco"), n_train=4, n_val=3, seed=1)
    config = from_hyperparameters({"network": "yolo3_mobilenet0.25_coco", "dataset": "coco",
                                   "pretrained_base": "false", "num_workers": "0", "short": "64"})
    family, dist = families.get(config.network), SingleProcess()
    datasets = build_datasets(config, root)
    net, losses, _ = one_step_losses(config, root)
    assert set(losses) == {"obj_loss", "center_loss", "scale_loss", "cls_loss"} and all(np.isfinite(v) for v in losses.values()), losses
    loader, indices = family.val_loader(config, net, datasets, dist.world, 0)
    result = validate(family, net, loader, indices, mx.cpu(), dist, config, datasets,
                      str(tmp_path))
    assert result["images"] == 3 and 0.0 <= result["mAP"] <= result["AP50"] <= 1.0
    assert set(result["per_class"]) == set(datasets.classes)
    detected = family.detect(net, loader, indices, mx.cpu(), datasets)
    perfect = []
    for (index, boxes, _ids, _scores, gt_boxes, gt_ids, _difficult) in detected:
        img, label = datasets.val[index]
        assert boxes[..., 0::2].max() <= img.shape[1] and boxes[..., 1::2].max() <= img.shape[0]
        np.testing.assert_allclose(gt_boxes[0], label[:, :4], rtol=1e-5)  # original pixels
        keep = gt_ids[0, :, 0] >= 0  # an image without objects has one -1 row
        perfect.append((index, gt_boxes[:, keep], gt_ids[:, keep], np.ones_like(gt_ids[:, keep]),
                        None, None, None))
    assert family.evaluate(config, datasets, [perfect], str(tmp_path))["mAP"] == pytest.approx(1.0)
