"""Every network the README lists builds from scratch, trains one step and validates, on tiny images.

The real pieces run: the network builder, the training transform and batchify, the step with its
losses (Mask R-CNN: and the mask loss), the SGD update, and the distributed validation (size 1);
Faster R-CNN networks on VOC-format data, Mask R-CNN networks on COCO-format instances."""

import math
import os

import mxnet as mx
import numpy as np
import pytest
from conftest import make_backbone_file
from detector_training import families
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import SingleProcess
from detector_training.core.engine import MetricSums
from detector_training.core.evaluation import validate
from detector_training.core.networks import (
    local_weight_file,
    offline_first_weights,
    trainable_params,
)
from detector_training.data.datasets import build_datasets
from detector_training.data.synthetic_coco import generate as generate_coco
from detector_training.data.synthetic_voc import generate
from detector_training.errors import ConfigError, PretrainedWeightsError
from detector_training.families import build_network
from detector_training.families.faster_rcnn import fit_proposals_to_images


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("voc"))
    generate(root, train_2007=2, test_2007=1, train_2012=0, seed=3)
    return root


@pytest.fixture(scope="module")
def coco_root(tmp_path_factory):
    return generate_coco(str(tmp_path_factory.mktemp("coco")), n_train=2, n_val=1, seed=3)


def one_step_and_validation(root, hyperparameters, scratch):
    config = from_hyperparameters(dict({"dataset": "custom", "pretrained_base": "false",
                                        "train_splits": "2007_trainval", "num_workers": "0",
                                        "batch_size": "1"}, **hyperparameters))
    dist, ctx, family = SingleProcess(), mx.cpu(), families.get(config.network)
    datasets = family.read_datasets(config, root)
    net = family.build_network(config, datasets.classes, 1, False, None, ctx)
    family.fit_to_data(net, config, datasets)
    train = family.train_loader(config, net, datasets, dist.world, 1, 1, 0)
    family.materialize(net, train.first_batch(), ctx)
    net.hybridize()
    trainer = mx.gluon.Trainer(trainable_params(net), "sgd", {"learning_rate": 0.001})
    step, sums = family.make_step(net, config, ctx), MetricSums()
    for batch in train.loader:
        values = step(batch)
        assert set(values) == set(family.log_names)
        sums.add_step(values)
        trainer.step(1)
        break
    losses = MetricSums.values_from_flat(family.loss_names, sums.flat(family.loss_names))
    net.hybridize()  # inference takes other inputs: the job rebuilds the graph the same way
    val_loader, indices = family.val_loader(config, net, datasets, dist.world, 0)
    return losses, validate(family, net, val_loader, indices, ctx, dist, config, datasets,
                            str(scratch))


@pytest.mark.parametrize("network", families.network_names())
def test_every_listed_network_trains_one_step_and_validates_from_scratch(voc_root, coco_root, network,
                                                                        tmp_path):
    hyperparameters = {"network": network, "short": "64", "max_size": "96"}
    if families.get(network).name == "mask_rcnn":  # instance masks come in COCO format
        hyperparameters.update(dataset="coco", train_splits="instances_train2017")
    losses, result = one_step_and_validation(
        coco_root if hyperparameters.get("dataset") == "coco" else voc_root, hyperparameters, tmp_path)
    assert set(losses) == set(families.get(network).loss_names)
    assert all(math.isfinite(v) for v in losses.values()), losses
    assert result["images"] == 1
    assert all(0.0 <= result[name] <= 1.0 for name in families.get(network).score_names)


@pytest.mark.parametrize("width, height, short, max_size", [
    (160, 120, 64, 96), (120, 160, 64, 96), (200, 120, 64, 96), (500, 375, 600, 1000),
    (1000, 100, 600, 1000), (333, 500, 96, 2000)])
def test_resized_shape_is_gluoncvs_resize_short_within(width, height, short, max_size):
    from detector_training.families.faster_rcnn import resized_shape
    from gluoncv.data.transforms.image import resize_short_within

    image = mx.nd.zeros((height, width, 3), dtype="uint8")
    assert resized_shape(width, height, short, max_size) == resize_short_within(image, short, max_size).shape[:2]


@pytest.mark.parametrize("network, shape", [("faster_rcnn_resnet18_v1b_voc", (64, 85)),
                                            ("faster_rcnn_fpn_resnet50_v1b_coco", (72, 100))])
def test_anchor_count_is_what_the_network_generates(network, shape):
    from detector_training.families.faster_rcnn import anchor_counter

    config = from_hyperparameters({"network": network, "dataset": "custom"})
    net = build_network(config, ("a",), 1, False, None, mx.cpu())
    anchors = [net.rpn.anchor_generator] if not isinstance(
        net.rpn.anchor_generator, mx.gluon.nn.HybridSequential) else list(net.rpn.anchor_generator)
    features = net.features(mx.nd.zeros((1, 3) + shape))
    features = features if isinstance(features, (list, tuple)) else [features]
    real = sum(g(f).shape[1] for g, f in zip(anchors, features))
    assert anchor_counter(net)(shape) == real


def test_default_network_at_short_96_caps_its_proposals_and_says_so(voc_root, caplog):
    config = from_hyperparameters({"dataset": "custom", "pretrained_base": "false",
                                   "train_splits": "2007_trainval", "short": "96"})
    datasets = build_datasets(config, voc_root)
    net = build_network(config, datasets.classes, 1, False, None, mx.cpu())
    with caplog.at_level("INFO"):
        train_post, test_post = families.get(config.network).fit_to_data(
            net, config, datasets)["rpn_post_nms"]
    assert 128 <= train_post < 2000 and test_post == 300
    assert net.rpn._train_post_nms == train_post and net._rpn_test_post_nms == test_post
    assert "rpn proposals: post-NMS proposals capped" in caplog.text
    assert "training 2000 -> %d" % train_post in caplog.text


def test_images_too_small_for_the_sampled_regions_stop_with_the_smallest_size_that_works(voc_root):
    config = from_hyperparameters({"network": "faster_rcnn_fpn_resnet50_v1b_coco", "dataset": "custom",
                                   "pretrained_base": "false", "train_splits": "2007_trainval",
                                   "short": "32", "max_size": "48"})
    datasets = build_datasets(config, voc_root)
    net = build_network(config, datasets.classes, 1, False, None, mx.cpu())
    with pytest.raises(ConfigError) as err:
        fit_proposals_to_images(net, config, datasets)
    text = str(err.value)
    assert "short=32 max_size=48 are too small" in text and "512 regions" in text
    assert "Fix: set short to at least" in text
    size = int(text.split("short to at least ")[1].split()[0])
    bigger = from_hyperparameters({"network": "faster_rcnn_fpn_resnet50_v1b_coco", "dataset": "custom",
                                   "pretrained_base": "false", "train_splits": "2007_trainval",
                                   "short": str(size), "max_size": str(max(48, size))})
    fit_proposals_to_images(net, bigger, datasets)  # the size it names works


def test_local_weight_file_lookup(tmp_path):
    assert local_weight_file(str(tmp_path), "resnet18_v1b") is None
    (tmp_path / "resnet18_v1b-0000abcd.params").write_bytes(b"x")
    assert local_weight_file(str(tmp_path), "resnet18_v1b").endswith("resnet18_v1b-0000abcd.params")
    (tmp_path / "resnet18_v1b.params").write_bytes(b"x")
    assert local_weight_file(str(tmp_path), "resnet18_v1b").endswith("resnet18_v1b.params")
    assert local_weight_file(None, "resnet18_v1b") is None
    # A list: the first directory that has the file wins (channel before baked-in weights).
    other = tmp_path / "other"
    other.mkdir()
    (other / "resnet50_v1b-0ecdba34.params").write_bytes(b"x")
    assert local_weight_file([str(tmp_path / "missing"), str(tmp_path), str(other)],
                             "resnet50_v1b").startswith(str(other))
    assert local_weight_file([str(tmp_path), str(other)], "resnet18_v1b").startswith(str(tmp_path))


def test_backbone_is_read_from_the_local_directory(tmp_path):
    path, base = make_backbone_file(str(tmp_path))
    config = from_hyperparameters({"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom"})
    net = build_network(config, ("a", "b"), 1, True, str(tmp_path), mx.cpu())
    assert net.classes == ["a", "b"] or tuple(net.classes) == ("a", "b")
    expected = base.conv1.weight.data().asnumpy()
    got = net.features[0].weight.data().asnumpy()
    np.testing.assert_array_equal(got, expected)


def test_neither_local_nor_download_gives_an_error_naming_both(tmp_path, monkeypatch):
    # GluonCV's download goes to MXNET_GLUON_REPO: point it at a closed loopback port.
    monkeypatch.setenv("MXNET_GLUON_REPO", "http://127.0.0.1:9/")
    monkeypatch.setenv("MXNET_HOME", str(tmp_path / "mxhome"))
    config = from_hyperparameters({"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom"})
    with pytest.raises(PretrainedWeightsError) as err:
        build_network(config, ("a",), 1, True, str(tmp_path / "empty"), mx.cpu())
    text = str(err.value)
    assert "resnet18_v1b" in text and str(tmp_path / "empty") in text and "download failed" in text
    assert "pretrained" in text  # says where to put the file


def test_patch_is_removed_afterwards(tmp_path):
    from gluoncv.model_zoo import model_store

    original = model_store.get_model_file
    with offline_first_weights(str(tmp_path)):
        assert model_store.get_model_file is not original
    assert model_store.get_model_file is original


def test_from_scratch_trains_every_layer():
    config = from_hyperparameters({"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom"})
    net = build_network(config, ("a",), 1, False, None, mx.cpu())
    trainable = net.collect_train_params()
    assert any("conv0_weight" in name for name in trainable.keys())  # the stem is trained too
