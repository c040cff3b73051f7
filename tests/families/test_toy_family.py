"""A family defined outside the package trains through the ordinary job once it is registered:
the proof that a new family is one module (what it declares, and its methods) and nothing else."""

import json
import logging
import os

import pytest
from conftest import make_job
from detector_training import families
from detector_training.core.step import TrainingStep
from detector_training.data.loaders import shard_loader, val_shard_loader
from detector_training.families.base import DetectorFamily
from detector_training.main import job_main

SIZE = 32  # the toy looks at a 32x32 thumbnail of each image


def thumbnail_and_first_box(src, label):
    """The image as a small normalised array, and its first box in fractions of the image."""
    import mxnet as mx

    height, width = src.shape[:2]
    image = mx.image.imresize(src, SIZE, SIZE).transpose((2, 0, 1)).astype("float32") / 255.0
    box = label[0, :4] / [width, height, width, height]
    return image, mx.nd.array(box)


class ToyFamily(DetectorFamily):
    """Regresses the first object's box from a thumbnail; scores 1 / (1 + mean L1 error)."""

    name = "toy"
    networks = ("toy_box_regressor",)
    presets = {"voc": dict(epochs=2, lr=0.1, lr_decay_epoch=(2,))}  # custom data is voc-style
    loss_names = ("box_l1_loss",)

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        from mxnet.gluon import nn

        net = nn.HybridSequential()
        net.add(nn.Conv2D(4, 3, activation="relu"), nn.GlobalAvgPool2D(), nn.Dense(4))
        net.initialize(ctx=ctx)
        return net

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, num_workers):
        from gluoncv.data.batchify import Stack, Tuple

        return shard_loader(config, datasets, world, per_rank_batch, steps,
                            thumbnail_and_first_box, Tuple(Stack(), Stack()), num_workers)

    def val_loader(self, config, net, datasets, world, num_workers):
        from gluoncv.data.batchify import Stack, Tuple

        return val_shard_loader(datasets, world, thumbnail_and_first_box,
                                Tuple(Stack(), Stack()), num_workers)

    def materialize(self, net, batch, ctx):
        net(batch[0].as_in_context(ctx))

    def make_step(self, net, config, ctx, amp_trainer=None):
        return ToyStep(net, ctx, amp_trainer)

    def detect(self, net, loader, indices, ctx, datasets):
        return [float((net(image.as_in_context(ctx)) - box.as_in_context(ctx)).abs().mean()
                      .asscalar()) for image, box in loader]

    def evaluate(self, config, datasets, gathered, scratch_dir):
        errors = [e for rank in gathered for e in rank]
        score = 1.0 / (1.0 + sum(errors) / len(errors))
        return {"mAP": score, "AP50": score, "per_class": {}}

    def export(self, config, classes, params_path, prefix, fitted):
        import mxnet as mx

        net = self.build_network(config, classes, 1, False, None, mx.cpu())
        net.load_parameters(params_path, ctx=mx.cpu())
        net.hybridize()
        net(mx.nd.zeros((1, 3, SIZE, SIZE)))
        net.export(prefix, epoch=0)


class ToyStep(TrainingStep):
    """The toy's loss; forward and backward are the base's."""

    def forward(self, batch):
        image, box = (part.as_in_context(self.ctx) for part in batch)
        return {"box_l1_loss": (self.net(image) - box).abs().mean(axis=1)}, None


@pytest.fixture
def toy_registered():
    families.register(ToyFamily)
    yield ToyFamily
    families.unregister(ToyFamily.name)


@pytest.fixture
def restored_logging():
    """job_main sets up the process's logging for a rank; the tests after this one keep theirs."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_a_registered_toy_family_trains_through_the_ordinary_job(tmp_path, toy_registered,
                                                                  restored_logging, capsys):
    base = make_job(tmp_path / "job", {"network": "toy_box_regressor", "batch_size": "2",
                                       "log_interval": "1"}, n_train=6, n_test=2)
    assert job_main(base, install_signals=False) == 0, open(os.path.join(base, "output", "failure")).read()
    out = capsys.readouterr().out
    assert "family=toy" in out
    assert "[Epoch 0][Batch 0/3]" in out and "[Epoch 1][Batch 2/3]" in out  # 6 images, 2 a step
    assert "[Epoch 1] summary:" in out and " box_l1_loss=" in out
    assert "finished: rank=0 steps=6 epochs=0..1" in out  # epochs=2: the toy's preset
    model = os.path.join(base, "model")
    history = json.load(open(os.path.join(model, "history.json")))
    assert [h["epoch"] for h in history] == [0, 1] and all("box_l1_loss" in h for h in history)
    assert history[-1]["box_l1_loss"] < history[0]["box_l1_loss"]
    assert 0.0 < json.load(open(os.path.join(model, "validation.json")))["mAP"] <= 1.0
    for name in ("model.params", "model-symbol.json", "model-0000.params", "classes.json",
                 "config.json", "training_curves.png", "per_class_ap.md"):
        assert os.path.isfile(os.path.join(model, name)), name
    assert json.load(open(os.path.join(model, "config.json")))["network"] == "toy_box_regressor"


def test_without_registration_the_job_refuses_the_toy_network(tmp_path, restored_logging):
    base = make_job(tmp_path / "job", {"network": "toy_box_regressor"}, n_train=2, n_test=1)
    assert job_main(base, install_signals=False) == 1
    failure = open(os.path.join(base, "output", "failure")).read()
    assert "network=toy_box_regressor: expected one of: faster_rcnn_resnet50_v1b_voc" in failure
