"""core/networks.py: backbone weights found offline first, and from-scratch networks whose every layer trains."""


import mxnet as mx
import numpy as np
import pytest
from conftest import make_backbone_file
from detector_training.core.networks import (
    local_weight_file,
    offline_first_weights,
)
from detector_training.errors import PretrainedWeightsError
from detector_training.families import build_network
from detector_training.job.config import from_hyperparameters


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


@pytest.mark.parametrize("network, default", [("faster_rcnn_resnet18_v1b_voc", 0.3),
                                              ("yolo3_mobilenet0.25_custom", 0.45)])
def test_nms_threshold_is_set_on_the_network_its_other_nms_settings_kept(network, default):
    plain = build_network(from_hyperparameters({"network": network, "dataset": "custom"}),
                          ("a",), 1, False, None, mx.cpu())
    config = from_hyperparameters({"network": network, "dataset": "custom", "nms_threshold": "0.6"})
    net = build_network(config, ("a",), 1, False, None, mx.cpu())
    assert plain.nms_thresh == pytest.approx(default) and net.nms_thresh == pytest.approx(0.6)
    assert (net.nms_topk, net.post_nms) == (plain.nms_topk, plain.post_nms)
    assert getattr(net, "force_nms", None) == getattr(plain, "force_nms", None)
