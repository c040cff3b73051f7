"""Which runtime `serve` runs a model with (serve/runtime.py): ``DETECTOR_RUNTIME`` and the
model's ONNX export decide, each family's declared faster runtime on a CPU for ``auto``; ONNX
Runtime refused, with the reason, where it cannot run the model; an ONNX export that does not
belong to its model directory refused at load."""

import json
import os
import shutil
import tempfile

import pytest

from conftest import copy_export, wait_for
from detector_training import families, inference
from detector_training.core import model_dir
from detector_training.errors import ConfigError
from detector_training.serve import runtime
from detector_training.serve.environment import read_environment
from served import Served


def export_of(tmp_path, network, onnx):
    """A model directory's export as serve's master reads it (its files need not hold a network:
    the choice reads none), with or without the two ONNX files."""
    directory = tempfile.mkdtemp(dir=str(tmp_path))
    for name in model_dir.ONNX_FILES if onnx else ():
        with open(os.path.join(directory, name), "w") as handle:
            handle.write("{}")
    return model_dir.ExportedModel(directory, ["a"], {"network": network})


@pytest.mark.parametrize("network, chosen", [
    ("ssd_512_mobilenet1.0_voc", "onnxruntime"), ("yolo3_mobilenet0.25_custom", "onnxruntime"),
    ("faster_rcnn_resnet18_v1b_voc", "onnxruntime"), ("mask_rcnn_fpn_resnet18_v1b_coco", "mxnet")])
def test_auto_runs_the_export_where_its_family_declares_onnx_runtime_the_faster(tmp_path, network, chosen):
    assert families.get(network).cpu_runtime == chosen
    assert runtime.choose("auto", export_of(tmp_path, network, onnx=True), gpus=0)[0] == chosen
    assert runtime.choose("auto", export_of(tmp_path, network, onnx=False), gpus=0) == (
        "mxnet", "auto: the model has no ONNX export")
    assert runtime.choose("auto", export_of(tmp_path, network, onnx=True), gpus=1) == ("mxnet", "auto: a GPU host")
    assert runtime.choose("mxnet", export_of(tmp_path, network, onnx=True), gpus=0) == (
        "mxnet", "DETECTOR_RUNTIME=mxnet")
    assert runtime.choose("onnxruntime", export_of(tmp_path, network, onnx=True), gpus=0) == (
        "onnxruntime", "DETECTOR_RUNTIME=onnxruntime")


def test_onnx_runtime_asked_for_without_an_export_or_on_a_gpu_host_is_refused_with_the_fix(tmp_path):
    with pytest.raises(inference.InferenceError, match=r"DETECTOR_RUNTIME=onnxruntime, but the model .* has no "
                                                       r"ONNX export \(model.onnx \+ onnx.json\); train it with export_onnx=true"):
        runtime.choose("onnxruntime", export_of(tmp_path, "ssd_512_mobilenet1.0_voc", onnx=False), gpus=0)
    with pytest.raises(ConfigError, match="runs ONNX Runtime on the CPU only, and this host has 2 GPU"):
        runtime.choose("onnxruntime", export_of(tmp_path, "ssd_512_mobilenet1.0_voc", onnx=True), gpus=2)


def test_the_setting_is_read_and_checked():
    assert read_environment({}, 2, 0).runtime == "auto"
    assert read_environment({"DETECTOR_RUNTIME": " ONNXRuntime "}, 2, 0).runtime == "onnxruntime"
    with pytest.raises(ConfigError, match=r"DETECTOR_RUNTIME='tensorrt' is not one of auto, mxnet, onnxruntime"):
        read_environment({"DETECTOR_RUNTIME": "tensorrt"}, 2, 0)


def edited(source, target, name, change):
    directory = copy_export(source, target)
    for onnx_file in model_dir.ONNX_FILES:
        shutil.copy(os.path.join(source, onnx_file), directory)
    path = os.path.join(directory, name)
    with open(path, "rb") as handle:
        data = change(handle.read())
    with open(path, "wb") as handle:
        handle.write(data)
    return directory


def with_fields(**fields):
    return lambda data: json.dumps(dict(json.loads(data), **fields)).encode()


@pytest.mark.parametrize("name, change, words", [
    ("onnx.json", with_fields(classes=["circle", "triangle", "square"]),
     "onnx.json lists the classes [\"circle\", \"triangle\", \"square\"], classes.json [\"circle\", \"square\", \"triangle\"]"),
    ("onnx.json", with_fields(height=512, width=512), "onnx.json's height, width {\"height\": 512, \"width\": 512}"),
    ("onnx.json", with_fields(std=[1.0, 1.0, 1.0]), "onnx.json's mean"),
    ("onnx.json", with_fields(outputs=["ids", "scores"]), "is not a name and a list of three or four names"),
    ("onnx.json", with_fields(outputs=["ids", "scores", "boxes"]), "model.onnx has no input \"data\" or not every output"),
    ("onnx.json", lambda data: b"[1, 2]", "onnx.json is not an object"),
    ("model.onnx", lambda data: data[: len(data) // 2], "ONNX Runtime cannot load model.onnx"),
], ids=["classes", "size", "normalisation", "outputs", "output-names", "not-an-object", "truncated"])
def test_an_onnx_export_that_is_not_its_models_is_refused_at_load(exported_models, tmp_path, name, change, words):
    directory = edited(exported_models["yolo3"], tmp_path / "model", name, change)
    with pytest.raises(inference.InferenceError) as caught:
        inference.load_model(directory, runtime="onnxruntime")
    assert words in str(caught.value) and "detector-export-onnx" in str(caught.value)
    assert inference.load_model(directory).runtime == "mxnet"  # the MXNet export still serves


@pytest.mark.parametrize("case", ["no-export", "other-classes"])
def test_serve_refuses_onnx_runtime_it_cannot_use_in_the_log_and_never_turns_healthy(
        trained_models, exported_models, tmp_path, case):
    if case == "no-export":
        directory, status, words = trained_models["ssd"], 2, "DETECTOR_RUNTIME=onnxruntime, but the model"
    else:
        directory = edited(exported_models["ssd"], tmp_path / "model", "onnx.json", with_fields(classes=["a", "b", "c"]))
        status, words = 3, "invalid ONNX export in %s: onnx.json lists the classes" % directory
    server = Served(directory, tmp_path / "serve.log", DETECTOR_RUNTIME="onnxruntime", SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        pings = []
        assert wait_for(lambda: pings.append(server.ping()) or server.proc.poll() is not None, 120)
        assert server.proc.returncode == status, server.log[-3000:]
        assert 200 not in pings and words in server.log and "Traceback" not in server.log
    finally:
        server.stop()
