"""summary()'s onnx_model: the path of model.onnx when a downloaded model directory holds it with
its onnx.json (a job run with export_onnx=true), else None. No Docker: the example notebook's
test runs detect_onnx on a real job's export."""

import io
import json
import os
import tarfile

import pytest

from sagemaker_launch import detect_onnx, download_model, summary
from sagemaker_launch.run_onnx import detect


def model_tar(path, names):
    """A model.tar.gz holding validation.json and ``names`` (placeholder bytes) at its top."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("validation.json", json.dumps({"mAP": 0.5}).encode())] + [(n, b"{}") for n in names]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_a_downloaded_model_with_its_onnx_files_names_model_onnx(tmp_path):
    directory = download_model("file://" + model_tar(tmp_path / "model.tar.gz", ["model.onnx", "onnx.json"]),
                               str(tmp_path / "model"))
    found = summary(directory)
    assert found["onnx_model"] == os.path.join(directory, "model.onnx")
    assert os.path.isfile(found["onnx_model"]) and found["mAP"] == 0.5


@pytest.mark.parametrize("names", [[], ["model.onnx"], ["onnx.json"]], ids=["neither", "no onnx.json", "no model.onnx"])
def test_without_both_onnx_files_there_is_no_onnx_model(tmp_path, names):
    directory = download_model("file://" + model_tar(tmp_path / "model.tar.gz", names), str(tmp_path / "model"))
    assert sorted(os.listdir(directory)) == sorted(names + ["validation.json"])
    assert summary(directory)["onnx_model"] is None


def test_detect_onnx_is_the_documented_scripts_detect():
    assert detect_onnx is detect
