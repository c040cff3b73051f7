"""Fetch what a job produced (model.tar.gz) and open it for a look."""

import os
import tarfile
from urllib.parse import urlparse


def download_model(model_data, directory):
    """Unpack ``model_data`` (file:// or s3:// URI of model.tar.gz) into ``directory``; return it.
    A job run with ``export_onnx=true`` also wrote ``model.onnx`` and ``onnx.json``: they come along
    (``summary(directory)["onnx_model"]``, ``detect_onnx(directory, image)``)."""
    os.makedirs(directory, exist_ok=True)
    parsed = urlparse(model_data)
    if parsed.scheme == "s3":
        import boto3

        local = os.path.join(directory, "model.tar.gz")
        boto3.client("s3").download_file(parsed.netloc, parsed.path.lstrip("/"), local)
    elif parsed.scheme in ("file", ""):
        local = parsed.path
    else:
        raise ValueError("unsupported model location %s" % model_data)
    with tarfile.open(local) as tar:
        tar.extractall(directory, filter="data")  # refuses absolute paths, .. and outside links
    return directory


def summary(directory):
    """Paths of the files people look at, and the headline figure."""
    import json

    validation = {}
    path = os.path.join(directory, "validation.json")
    if os.path.exists(path):
        with open(path) as handle:
            validation = json.load(handle)
    onnx = os.path.join(directory, "model.onnx")
    return {
        "curves": os.path.join(directory, "training_curves.png"),
        "per_class_table": os.path.join(directory, "per_class_ap.md"),
        # the evaluation report of the best model (docs/model-directory.md)
        "precision_recall": os.path.join(directory, "precision_recall.png"),
        "confusion_matrix": os.path.join(directory, "confusion_matrix.png"),
        "validation_images": os.path.join(directory, "validation_images.png"),
        "mAP": validation.get("mAP"),
        # model.onnx, for detect_onnx (docs/onnx.md), when the job exported it with its onnx.json
        "onnx_model": onnx if os.path.exists(onnx) and os.path.exists(os.path.join(directory, "onnx.json")) else None,
    }
