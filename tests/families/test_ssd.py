"""The SSD family: its networks and train_ssd.py's presets, the network's anchors at any data shape
given to GluonCV's target generator, the multibox loss scaled to the engine's update, data shapes
the network cannot take, fine-tuning onto other classes, COCO-format data, and whole jobs (one
rank, two Horovod ranks, stop and resume, a model channel) on generated data."""

import json
import os
import re
import subprocess

import mxnet as mx
import numpy as np
import pytest

from conftest import BIN, make_job, run_rank_job, stop_mid_epoch_and_resume, two_rank_job_finishes

from detector_training import families
from detector_training.core.distributed import World
from detector_training.core.engine import MetricSums
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_voc import generate
from detector_training.errors import ConfigError
from detector_training.families.ssd import SSD, base_size
from detector_training.job.config import from_hyperparameters
from detector_training.job.metrics import definitions_for

NET = {"network": "ssd_512_mobilenet1.0_voc", "dataset": "custom", "pretrained_base": "false",
       "train_splits": "2007_trainval", "num_workers": "0", "short": "64"}


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("voc"))
    generate(root, train_2007=6, test_2007=2, train_2012=0, seed=5)
    return root


def ssd_config(**overrides):
    return from_hyperparameters(dict(NET, **{k: str(v) for k, v in overrides.items()}))


def test_the_family_has_gluoncvs_four_ssd_networks_and_train_ssd_presets():
    bases = ("300_vgg16_atrous", "512_vgg16_atrous", "512_resnet50_v1", "512_mobilenet1.0")
    assert set(SSD.networks) == {"ssd_%s_%s" % (b, d) for b in bases for d in ("voc", "coco", "custom")}
    for network in SSD.networks:
        assert families.family_of(network) == "ssd"
    for dataset in ("voc", "coco", "custom"):
        config = from_hyperparameters({"network": "ssd_300_vgg16_atrous_%s" % dataset,
                                       "dataset": "custom" if dataset == "custom" else dataset})
        assert (config.epochs, config.lr, config.lr_decay_epoch, config.wd,
                config.lr_base_batch_size, config.warmup_iters) == (240, 0.001, (160, 200), 5e-4, 32, 0)
    assert [d["Name"] for d in definitions_for("ssd") if d["Name"].startswith("train:") and
            d["Name"].endswith(("entropy", "l1"))] == ["train:cross_entropy", "train:smooth_l1"]
    assert base_size("ssd_300_vgg16_atrous_voc") == 300 and base_size("ssd_512_mobilenet1.0_custom") == 512


def test_the_data_shape_is_short_by_default_the_networks_own():
    family = SSD()
    assert family.image_sizes(ssd_config(), None) == ((64,), 64, 64)
    default = from_hyperparameters({"network": "ssd_300_vgg16_atrous_voc"})
    assert family.image_sizes(default, None) == ((300,), 300, 300)
    with pytest.raises(ConfigError, match="one square input size"):
        family.check_config(ssd_config(short="64,96"))


def test_anchors_keep_the_networks_sizes_at_any_data_shape_and_are_what_the_forward_pass_gives():
    """As train_ssd.py at another --data-shape: the network's anchor sizes (51.2 pixels first for
    the 512 networks), tiled by the feature strides; the transform gets what its forward pass in
    training mode returns. At 128 pixels every demo-sized object then has several positive
    anchors (sizes scaled to the image left most with the one its target generator forces)."""
    from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform

    family = SSD()
    config = ssd_config(short=128)
    net = family.build_network(config, ("a", "b"), 1, False, None, mx.cpu())
    assert net.anchor_generators[0]._sizes[0] == pytest.approx(51.2)  # pylint: disable=protected-access
    anchors = family.anchors(config, net)
    with mx.autograd.train_mode():
        _, _, forward = net(mx.nd.zeros((1, 3, 128, 128)))
    assert anchors.shape == forward.shape == (1, 390, 4)
    np.testing.assert_allclose(anchors.asnumpy(), forward.asnumpy())
    centre = anchors[0, :, :2].asnumpy()
    assert centre.min() == 8 and sorted(set(centre[:256, 0])) == list(range(8, 128, 16))  # stride 16
    # objects of a fifth to a half of the image, anywhere: several positives each on average
    # (5.1; with sizes a quarter of these, scaled to the image: 1.6), two or more from a third up
    transform = SSDDefaultTrainTransform(128, 128, anchors)
    rng = np.random.RandomState(0)
    positives = []
    for _ in range(40):
        side = rng.uniform(26, 64)
        x0, y0 = rng.uniform(0, 128 - side, 2)
        label = np.array([[x0, y0, x0 + side, y0 + side, 0]], dtype="float32")
        targets = transform._target_generator(anchors, None, mx.nd.array(label[None, :, :4]),  # pylint: disable=protected-access
                                              mx.nd.array(label[None, :, 4:5]))[0]
        positives.append((side, int((targets.asnumpy() > 0).sum())))
    assert np.mean([count for _, count in positives]) >= 3, positives
    assert all(count >= 2 for side, count in positives if side >= 43), positives


def test_a_data_shape_the_vgg_layers_cannot_take_is_a_config_error_naming_the_smallest(voc_root):
    config = from_hyperparameters(dict(NET, network="ssd_300_vgg16_atrous_voc", short="128"))
    family = families.get(config.network)
    net = family.build_network(config, ("a",), 1, False, None, mx.cpu())
    with pytest.raises(ConfigError) as err:
        family.fit_to_data(net, config, build_datasets(config, voc_root))
    assert "short=128 is too small for ssd_300_vgg16_atrous_voc" in str(err.value)
    assert "set short to at least 257" in str(err.value)


def test_the_backward_pass_gives_train_ssds_gradient_under_the_engines_update(voc_root):
    """GluonCV's script steps the trainer with 1 on a loss normalised by positive anchors; the
    engine steps with the batch size, so the step's gradient is the batch size times GluonCV's."""
    from gluoncv.loss import SSDMultiBoxLoss

    config = ssd_config()
    family = families.get(config.network)
    datasets = build_datasets(config, voc_root)
    net = family.build_network(config, datasets.classes, 2, False, None, mx.cpu())
    batch = family.train_loader(config, net, datasets, World(), 2, 1, 0).first_batch()
    family.materialize(net, batch, mx.cpu())
    weight = net.class_predictors[0].predictor.weight
    data, cls_targets, box_targets = [part.as_in_context(mx.cpu()) for part in batch]
    with mx.autograd.record():
        cls_pred, box_pred, _ = net(data)
        sum_loss, _, _ = SSDMultiBoxLoss()(cls_pred, box_pred, cls_targets, box_targets)
    mx.autograd.backward(sum_loss)
    gluoncv_grad = weight.grad().asnumpy().copy()
    values = family.make_step(net, config, mx.cpu())(batch)
    np.testing.assert_allclose(weight.grad().asnumpy(), 2 * gluoncv_grad, rtol=1e-4, atol=1e-7)
    sums = MetricSums()
    sums.add_step(values)
    losses = MetricSums.values_from_flat(family.loss_names, sums.flat(family.loss_names))
    assert set(losses) == {"cross_entropy", "smooth_l1"}
    assert all(np.isfinite(v) and v > 0 for v in losses.values()), losses
    assert batch[1].shape == (2, 108) and (batch[1].asnumpy() > 0).any()  # positive anchors


def test_an_ssd_model_starts_a_job_on_other_classes(tmp_path, caplog):
    from detector_training.core.start_model import start_from_channel

    def net_for(classes):
        config = ssd_config()
        net = SSD().build_network(config, classes, 1, False, None, mx.cpu())
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
    assert summary["reinitialised"] and all(n.startswith("class_predictors.")
                                            for n in summary["reinitialised"])
    old_p, new_p = old._collect_params_with_prefix(), new._collect_params_with_prefix()  # pylint: disable=protected-access
    kept = [n for n in new_p if n.startswith(("features.", "box_predictors."))]
    assert kept and all(np.array_equal(new_p[n].data().asnumpy(), old_p[n].data().asnumpy())
                        for n in kept)
    old_w = old.class_predictors[0].predictor.weight.data().asnumpy()
    new_w = new.class_predictors[0].predictor.weight.data().asnumpy()
    assert new_w.shape[0] == 4 * (2 + 1)  # 4 anchors per cell x (background + 2 classes)
    for anchor in range(4):  # per anchor: background and 'square' rows kept, 'hexagon' new
        o, n = anchor * 4, anchor * 3
        np.testing.assert_array_equal(new_w[n], old_w[o])
        np.testing.assert_array_equal(new_w[n + 1], old_w[o + 2])
        assert not np.array_equal(new_w[n + 2], old_w[o + 3])
    assert "class head re-initialised" in caplog.text


def test_ssd_on_coco_format_data_scores_with_cocos_metric_in_original_pixels(tmp_path):
    from detector_training.core.distributed import SingleProcess
    from detector_training.core.evaluation import validate
    from detector_training.data.generated.synthetic_coco import generate as generate_coco

    root = generate_coco(str(tmp_path / "coco"), n_train=2, n_val=2, seed=1)
    config = from_hyperparameters({"network": "ssd_512_mobilenet1.0_coco", "dataset": "coco",
                                   "pretrained_base": "false", "num_workers": "0", "short": "64"})
    family, dist = families.get(config.network), SingleProcess()
    datasets = build_datasets(config, root)
    net = family.build_network(config, datasets.classes, 1, False, None, mx.cpu())
    family.materialize(net, family.train_loader(config, net, datasets, World(), 1, 1, 0).first_batch(),
                       mx.cpu())
    loader, indices = family.val_loader(config, net, datasets, dist.world, 0)
    result = validate(family, net, loader, indices, mx.cpu(), dist, config, datasets, str(tmp_path))
    assert result["images"] == 2 and 0.0 <= result["mAP"] <= result["AP50"] <= 1.0
    detected = family.detect(net, loader, indices, mx.cpu(), datasets)
    perfect = []
    for (index, boxes, _ids, _scores, gt_boxes, gt_ids, _difficult) in detected:
        img, label = datasets.val[index]
        assert boxes[..., 0::2].max() <= img.shape[1] and boxes[..., 1::2].max() <= img.shape[0]
        np.testing.assert_allclose(gt_boxes[0], label[:, :4], rtol=1e-5)  # original pixels
        keep = gt_ids[0, :, 0] >= 0
        perfect.append((index, gt_boxes[:, keep], gt_ids[:, keep], np.ones_like(gt_ids[:, keep]),
                        None, None, None))
    assert family.evaluate(config, datasets, [perfect], str(tmp_path))["mAP"] == pytest.approx(1.0)


@pytest.mark.parametrize("option", ["mixup", "label_smooth", "multi_scale"])
def test_options_ssd_does_not_take_are_config_errors(option):
    with pytest.raises(ConfigError, match="%s=true applies to .* not to ssd_512_mobilenet1.0_voc" % option):
        from_hyperparameters({"network": "ssd_512_mobilenet1.0_voc", option: "true"})


# --- whole jobs -------------------------------------------------------------------------------

JOB = {"network": "ssd_512_mobilenet1.0_voc", "short": "64", "max_size": "64", "lr": "0.01",
       "lr_base_batch_size": "4", "lr_warmup": "4", "clip_gradient": "5"}


def test_one_rank_ssd_job_trains_validates_exports_and_predicts(job_dir):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size="2"), n_train=6, n_test=3)
    result = run_rank_job(base)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "family=ssd" in out
    assert re.search(r"\[Epoch 1\]\[Batch 1/3\] lr=\S+ speed=\S+ samples/s cross_entropy=[0-9.]+ "
                     r"smooth_l1=[0-9.]+", out)
    for definition in definitions_for("ssd"):  # each of them matches this job's lines
        assert re.search(definition["Regex"], out), definition["Name"]
    model = os.path.join(base, "model")
    for name in ("model.params", "model-best.params", "model-symbol.json", "model-0000.params",
                 "classes.json", "config.json", "validation.json", "history.json"):
        assert os.path.isfile(os.path.join(model, name)), name
    history = json.load(open(os.path.join(model, "history.json")))
    assert [h["epoch"] for h in history] == [0, 1] and all(np.isfinite(h["cross_entropy"]) for h in history)
    assert json.load(open(os.path.join(model, "validation.json")))["images"] == 3
    image = os.path.join(base, "input", "data", "voc", "VOCdevkit", "VOC2007", "JPEGImages")
    image = os.path.join(image, sorted(os.listdir(image))[0])
    picture = os.path.join(str(job_dir), "boxes.png")
    drawn = subprocess.run([os.path.join(BIN, "detector-predict"), model, image, "--output",
                            picture, "--threshold", "0"], capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr
    assert os.path.getsize(picture) > 0 and re.search(r"drew [1-9]\d* detection", drawn.stdout)


def test_two_horovod_ranks_train_an_ssd_job(job_dir):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size="4"), n_train=7, n_test=3)
    out, validation = two_rank_job_finishes(base)
    assert "world: rank=1 size=2" in out and "family=ssd" in out
    assert "training: epochs 0..1, 2 steps per epoch, 2 image(s) per rank" in out
    assert validation["images"] == 3  # both ranks' shards scored together


# Two ranks only: one rank's stop and resume is the same checkpoint code for every family
# (tests/end_to_end/test_job_contract.py runs it with one rank and with two).
@pytest.mark.parametrize("processes", [2])
def test_a_stopped_ssd_job_resumes_at_the_next_iteration(job_dir, processes):
    base = make_job(job_dir, dict(JOB, epochs="2", batch_size=str(processes), log_interval="1",
                                  processes_per_host=str(processes)), n_train=16, n_test=2)
    _took, _out, result = stop_mid_epoch_and_resume(base, processes, 16 // processes)
    assert "family=ssd" in result.stdout
    assert os.path.isfile(os.path.join(base, "model", "model-symbol.json"))


def test_an_ssd_job_fine_tunes_from_a_model_channel_on_other_classes(trained_models, job_dir):
    base = make_job(job_dir, dict(JOB, epochs="1", batch_size="2", classes="triangle,circle"),
                    n_train=4, n_test=2)
    channel = os.path.join(base, "input", "data", "model")
    os.makedirs(channel)
    for name in ("model-best.params", "classes.json"):
        with open(os.path.join(trained_models["ssd"], name), "rb") as src, \
                open(os.path.join(channel, name), "wb") as dst:
            dst.write(src.read())
    result = run_rank_job(base)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    assert re.search(r"start model: \S+model-best.params: reused \d+ of \d+ parameter arrays: features", out)
    assert "classes circle,square,triangle -> triangle,circle: class head re-initialised" in out
    assert json.load(open(os.path.join(base, "model", "classes.json"))) == ["triangle", "circle"]
