"""Fine-tuning from the 'model' channel: an earlier job's model.tar.gz or directory, the same or a
different class list."""

import io
import json
import os
import re
import shutil
import tarfile

import mxnet as mx
import numpy as np
import pytest

from conftest import make_job, run_rank_job

from detector_training.job.config import from_hyperparameters
from detector_training.errors import DataError
from detector_training.core.start_model import start_from_channel, start_model_files


def tiny_net(classes):
    config = from_hyperparameters({"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom"})
    from detector_training.families import build_network

    net = build_network(config, tuple(classes), 1, False, None, mx.cpu())
    with mx.autograd.predict_mode():
        net(mx.nd.zeros((1, 3, 64, 64)))  # every parameter gets its shape
    return net


def write_model(directory, net, classes):
    os.makedirs(directory, exist_ok=True)
    net.save_parameters(os.path.join(directory, "model-best.params"))
    with open(os.path.join(directory, "classes.json"), "w") as handle:
        json.dump(list(classes), handle)


def pack(directory, tarball):
    with tarfile.open(tarball, "w:gz") as archive:
        for name in sorted(os.listdir(directory)):
            archive.add(os.path.join(directory, name), arcname=name)


def test_a_new_class_list_reuses_backbone_and_rpn_and_resets_the_class_head(tmp_path, caplog):
    old = tiny_net(("circle", "square", "triangle"))
    write_model(str(tmp_path / "job1"), old, ("circle", "square", "triangle"))
    channel = tmp_path / "model"
    channel.mkdir()
    pack(str(tmp_path / "job1"), str(channel / "model.tar.gz"))

    new = tiny_net(("square", "hexagon"))
    with caplog.at_level("INFO"):
        summary = start_from_channel(new, str(channel), mx.cpu())
    assert list(new.classes) == ["square", "hexagon"]
    np.testing.assert_array_equal(new.features[0].weight.data().asnumpy(),
                                  old.features[0].weight.data().asnumpy())  # backbone
    np.testing.assert_array_equal(new.rpn.conv1[0].weight.data().asnumpy(),
                                  old.rpn.conv1[0].weight.data().asnumpy())  # RPN
    weight, old_weight = new.class_predictor.weight.data().asnumpy(), old.class_predictor.weight.data().asnumpy()
    assert weight.shape[0] == 3  # background + 2 classes
    np.testing.assert_array_equal(weight[0], old_weight[0])  # background row kept
    np.testing.assert_array_equal(weight[1], old_weight[2])  # 'square' row kept
    assert not np.array_equal(weight[2], old_weight[3])  # 'hexagon' is new
    assert new.box_predictor.weight.shape[0] == 2 * 4
    assert summary["kept_rows"] == ["square"]
    assert any(n.startswith("features") for n in summary["reused"])
    assert any(n.startswith("rpn") for n in summary["reused"])
    assert not any(n.startswith("class_predictor") for n in summary["reused"])
    text = caplog.text
    assert re.search(r"start model: \S+model-best.params: reused \d+ of \d+ parameter arrays: features", text)
    assert "classes circle,square,triangle -> square,hexagon: class head re-initialised (class_predictor (2), " \
           "box_predictor (2)), trained rows kept for background, square" in text
    # The network still runs with its new head.
    with mx.autograd.predict_mode():
        ids, scores, boxes = new(mx.nd.zeros((1, 3, 64, 64)))
    assert boxes.shape[-1] == 4


def test_the_same_class_list_loads_everything_from_a_directory(tmp_path):
    old = tiny_net(("a", "b"))
    write_model(str(tmp_path / "model"), old, ("a", "b"))
    new = tiny_net(("a", "b"))
    summary = start_from_channel(new, str(tmp_path / "model"), mx.cpu())
    assert len(summary["reused"]) == summary["total"] and not summary["mismatched"]
    np.testing.assert_array_equal(new.class_predictor.weight.data().asnumpy(),
                                  old.class_predictor.weight.data().asnumpy())


@pytest.mark.parametrize("content, words", [
    ({"notes.txt": b"x"}, ["holds neither model-best.params nor model.params"]),
    ({"model.tar.gz": b"not a tarball"}, ["cannot use model.tar.gz", "Fix:"]),
    ({"model-best.params": b"garbage", "classes.json": b"[\"a\"]"}, ["cannot read model-best.params"]),
    ({"model-best.params": b"", "classes.json": b"{oops"}, ["classes.json", "not valid JSON"]),
    ({"model-best.params": b"", "classes.json": b'["a", "' + b"b" * (2 << 20) + b'"]'},
     ["classes.json", "larger than the 1048576 bytes allowed"]),
    ({"model-best.params": b"", "classes.json": b"[" * 100000 + b"]" * 100000}, ["classes.json", "nested more than 64"]),
    ({"model-best.params": b"", "classes.json": b'["a", NaN]'}, ["classes.json", "NaN, which JSON does not allow"]),
    ({"model-best.params": b"", "classes.json": b'["a", 7]'}, ["classes.json: entry 1 is 7; class names are strings"]),
])
def test_unusable_model_channels_are_data_errors(tmp_path, content, words):
    channel = tmp_path / "model"
    channel.mkdir()
    for name, data in content.items():
        (channel / name).write_bytes(data)
    with pytest.raises(DataError) as err:
        start_from_channel(tiny_net(("a",)), str(channel), mx.cpu())
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("form", ["tarball", "directory"])
def test_a_classes_json_that_does_not_fit_the_network_is_refused_before_training(trained_models, tmp_path,
                                                                                  form):
    model = tmp_path / "earlier"
    shutil.copytree(trained_models["faster_rcnn"], model)  # a real job's model: 3 classes
    (model / "classes.json").write_text(json.dumps(["circle", "square"]))
    channel = tmp_path / "model"
    if form == "tarball":
        channel.mkdir()
        pack(str(model), str(channel / "model.tar.gz"))
    else:
        shutil.copytree(model, channel)
    with pytest.raises(DataError) as err:
        start_from_channel(tiny_net(("circle", "square")), str(channel), mx.cpu())
    assert str(err.value).startswith("DataError: the 'model' channel's classes.json lists 2 classes but the "
                                     "network in model-symbol.json predicts 3. Fix: ")


@pytest.mark.parametrize("form", ["tarball", "directory"])
def test_a_jobs_model_starts_another_job_with_a_new_class_list(trained_models, tmp_path, form):
    model = trained_models["faster_rcnn"]  # the model of a job on two ranks
    assert json.load(open(os.path.join(model, "config.json")))["world_size"] == 2
    assert json.load(open(os.path.join(model, "classes.json"))) == ["circle", "square", "triangle"]

    second = make_job(tmp_path / "second", {"epochs": "1", "batch_size": "2",
                                            "classes": "triangle,circle"}, n_train=4, n_test=1)
    channel = os.path.join(second, "input", "data", "model")
    if form == "tarball":  # what SageMaker packs from /opt/ml/model
        os.makedirs(channel)
        pack(model, os.path.join(channel, "model.tar.gz"))
    else:
        shutil.copytree(model, channel)
    result = run_rank_job(second)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    assert re.search(r"start model: \S+model-best.params: reused \d+ of \d+ parameter arrays: features", out)
    assert "classes circle,square,triangle -> triangle,circle: class head re-initialised" in out
    assert "trained rows kept for background, triangle, circle" in out
    assert json.load(open(os.path.join(second, "model", "classes.json"))) == ["triangle", "circle"]


def test_a_mask_rcnn_keeps_its_mask_head_and_resets_its_per_class_masks(tmp_path, caplog):
    from detector_training import families

    family = families.get("mask_rcnn_fpn_resnet18_v1b_coco")
    config = from_hyperparameters({"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco"})

    def mask_net(classes):
        net = family.build_network(config, tuple(classes), 1, False, None, mx.cpu())
        family.set_proposal_counts(net, 300, 50)
        with mx.autograd.predict_mode():
            net(mx.nd.zeros((1, 3, 96, 96)))
        return net

    old = mask_net(("circle", "square", "triangle"))
    write_model(str(tmp_path / "model"), old, ("circle", "square", "triangle"))
    new = mask_net(("square", "hexagon"))
    with caplog.at_level("INFO"):
        summary = start_from_channel(new, str(tmp_path / "model"), mx.cpu())
    np.testing.assert_array_equal(new.mask.deconv[0].weight.data().asnumpy(),
                                  old.mask.deconv[0].weight.data().asnumpy())  # mask head reused
    masks, old_masks = new.mask.mask.weight.data().asnumpy(), old.mask.mask.weight.data().asnumpy()
    assert masks.shape[0] == 2  # one mask per class, no background
    np.testing.assert_array_equal(masks[0], old_masks[1])  # 'square' kept
    assert "mask.mask.weight" in summary["reinitialised"] and "mask.mask.weight" not in summary["reused"]
    assert "box_predictor (2), mask (2)), trained rows kept for background, square" in caplog.text
    with mx.autograd.predict_mode():
        ids, scores, boxes, masks = new(mx.nd.zeros((1, 3, 96, 96)))
    assert masks.shape[:2] == (1, 50)


def test_a_directory_named_like_a_model_tarball_is_a_clear_error(tmp_path):
    channel = tmp_path / "model"
    (channel / "model.tar.gz" / "part").mkdir(parents=True)  # what an S3 prefix with keys under it becomes
    with pytest.raises(DataError, match="model.tar.gz in the 'model' channel is a directory") as err:
        start_model_files(str(channel), str(tmp_path))
    assert "point the 'model' channel at the model.tar.gz object itself" in err.value.fix


def test_a_model_tarball_that_does_not_fit_the_free_disk_is_a_clear_error(tmp_path, small_disk):
    channel = tmp_path / "model"
    channel.mkdir()
    with tarfile.open(str(channel / "model.tar.gz"), "w:gz") as out:
        info = tarfile.TarInfo("model-best.params")
        info.size = 30 << 20  # zeros: a small tarball, more than the 24 MB disk holds
        out.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(DataError, match=r"cannot use model.tar.gz .*expands to 31457280 bytes and \d+ are free") as err:
        start_model_files(str(channel), str(small_disk))
    assert "larger volume" in err.value.fix
    assert os.listdir(small_disk) == []
