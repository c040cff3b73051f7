"""The seam every family fulfils: a network of each family and kind of build (ONE_STEP_NETWORKS)
builds from scratch, trains one step and validates on tiny images (the real builder, transform and
batchify, the step with its named losses, the SGD update, and the distributed validation at size
1); Faster R-CNN networks on VOC-format data, Mask R-CNN networks on COCO-format instances."""

import math

import mxnet as mx
import pytest
from detector_training import families
from detector_training.core.distributed import SingleProcess
from detector_training.core.engine import MetricSums
from detector_training.core.evaluation import validate
from detector_training.core.networks import (
    trainable_params,
)
from detector_training.data.generated.synthetic_coco import generate as generate_coco
from detector_training.data.generated.synthetic_voc import generate
from detector_training.job.config import from_hyperparameters


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


# One network per family and kind of build: each builder path (our own network, GluonCV's zoo
# name, the zoo's *_custom builder that takes the classes), each head (C4, FPN) and each backbone
# kind (ResNet v1b / v1d, MobileNet, VGG, Darknet). The other listed names differ from one of these
# only in GluonCV's dataset defaults (_voc / _coco / _custom) or depth (ResNet-50 / 101, MobileNet
# 0.25 / 1.0, SSD 300 / 512), through the same code of ours; each is checked to exist below.
# (Every listed name trained a step here before: 34 tests, 245 s on an idle 2-core machine; these 10
# took 56 s of it.)
ONE_STEP_NETWORKS = (
    "faster_rcnn_resnet18_v1b_voc",  # ours (OWN_NETWORKS)
    "faster_rcnn_resnet50_v1b_voc",  # zoo, C4, ResNet v1b
    "faster_rcnn_fpn_resnet101_v1d_coco",  # zoo, FPN, ResNet v1d
    "mask_rcnn_resnet18_v1b_coco",  # C4 with a mask head
    "mask_rcnn_fpn_resnet18_v1b_coco",  # FPN with a mask head
    "yolo3_mobilenet0.25_voc",  # zoo, MobileNet
    "yolo3_darknet53_custom",  # the *_custom builder, Darknet
    "ssd_512_mobilenet1.0_voc",  # zoo, MobileNet
    "ssd_300_vgg16_atrous_voc",  # VGG (unpadded convolutions: 257 pixels and more)
    "ssd_512_resnet50_v1_custom",  # the *_custom builder, ResNet v1
)


def test_every_listed_network_is_ours_or_in_the_model_zoo_and_has_a_one_step_representative():
    from gluoncv.model_zoo.model_zoo import _models as zoo
    from detector_training.families.faster_rcnn import OWN_NETWORKS

    for network in families.network_names():
        assert network in OWN_NETWORKS or network in zoo, network
    assert set(ONE_STEP_NETWORKS) <= set(families.network_names())
    assert {families.get(n).name for n in ONE_STEP_NETWORKS} == {f.name for f in families.all_families()}


@pytest.mark.parametrize("network", ONE_STEP_NETWORKS)
def test_every_listed_network_trains_one_step_and_validates_from_scratch(voc_root, coco_root, network,
                                                                        tmp_path):
    hyperparameters = {"network": network, "short": "64", "max_size": "96"}
    if families.get(network).name in ("faster_rcnn", "mask_rcnn"):
        # The ResNet-50/101 C4 heads run a whole ResNet stage on every RoI: 16 sampled RoIs and
        # 32-pixel images (90 proposals) keep their step and validation to seconds.
        hyperparameters.update(short="32", max_size="48", rcnn_num_samples="16")
    if "vgg16" in network:  # SSD's VGG layers take 257 pixels and more
        hyperparameters.update(short="257", max_size="257")
    if families.get(network).name == "mask_rcnn":  # instance masks come in COCO format
        hyperparameters.update(dataset="coco", train_splits="instances_train2017")
    losses, result = one_step_and_validation(
        coco_root if hyperparameters.get("dataset") == "coco" else voc_root, hyperparameters, tmp_path)
    assert set(losses) == set(families.get(network).loss_names)
    assert all(math.isfinite(v) for v in losses.values()), losses
    assert result["images"] == 1
    scores = families.get(network).score_names
    assert scores and all(0.0 <= result[name] <= 1.0 for name in scores), result
