"""Which runtime ``serve`` runs the model with, chosen once in the master from the setting
``DETECTOR_RUNTIME`` and the model directory, without importing either runtime:

* ``mxnet``: the MXNet export (``model-symbol.json`` + ``model-0000.params``), every model has it;
* ``onnxruntime``: the verified ONNX export (``model.onnx`` + ``onnx.json``, written by a job
  with ``export_onnx=true`` or by ``detector-export-onnx``), on the CPU;
* ``auto`` (the default): ONNX Runtime where the model has its ONNX export, the host has no GPU
  and the model's family declares ONNX Runtime the faster on a CPU (``cpu_runtime``, as
  benchmarks/serving.py measured it); MXNet otherwise.

Both answer the same detections: the export is refused unless ONNX Runtime answers what MXNet
answers (onnx_export.py).
"""

from detector_training import families, inference
from detector_training.core import model_dir
from detector_training.errors import ConfigError

AUTO = "auto"
CHOICES = (AUTO,) + inference.RUNTIMES


def choose(requested, export, gpus):
    """``(runtime, why)`` for the setting ``requested`` (CHOICES), a model directory's export
    (model_dir.read_export) and the number of GPUs of the host. ConfigError when ONNX Runtime is
    asked for on a GPU host, InferenceError when it is asked for a model without its ONNX export."""
    setting = "DETECTOR_RUNTIME=%s" % requested
    onnx = model_dir.has_onnx(export.directory)
    if requested == inference.MXNET:
        return inference.MXNET, setting
    if requested == inference.ONNXRUNTIME:
        if gpus:
            raise ConfigError("%s: this image runs ONNX Runtime on the CPU only, and this host has %d GPU(s)."
                              % (setting, gpus), "unset DETECTOR_RUNTIME (MXNet on the GPUs) or set it to mxnet.")
        if not onnx:
            raise inference.InferenceError(
                "%s, but the model %s has no ONNX export (%s); train it with export_onnx=true or run "
                "detector-export-onnx on it, or unset DETECTOR_RUNTIME"
                % (setting, export.directory, " + ".join(model_dir.ONNX_FILES)))
        return inference.ONNXRUNTIME, setting
    if gpus:
        return inference.MXNET, "auto: a GPU host"
    if not onnx:
        return inference.MXNET, "auto: the model has no ONNX export"
    family = families.get(export.config.get("network"))  # serve checked it is one
    return family.cpu_runtime, "auto: the model has an ONNX export and %s is the faster for %s on a CPU" % (
        family.cpu_runtime, family.name)
