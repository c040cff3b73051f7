"""The server's settings, read once from the environment SageMaker (and the user) sets.

SageMaker's: ``SAGEMAKER_BIND_TO_PORT`` (default 8080), ``SAGEMAKER_MODEL_SERVER_WORKERS``,
``SAGEMAKER_MODEL_SERVER_TIMEOUT`` (seconds, default 60), and for batch transform
``SAGEMAKER_BATCH``, ``SAGEMAKER_MAX_PAYLOAD_IN_MB``, ``SAGEMAKER_BATCH_STRATEGY`` and
``SAGEMAKER_MAX_CONCURRENT_TRANSFORMS``. Ours: ``DETECTOR_SCORE_THRESHOLD`` (default 0.5) and
``DETECTOR_MAX_DETECTIONS`` (default 100), the defaults of the request's custom attributes,
``DETECTOR_MODEL_DIR`` (default ``/opt/ml/model``) and ``DETECTOR_RUNTIME`` (``auto``, the
default, ``mxnet`` or ``onnxruntime``: serve/runtime.py).

Workers: one per GPU on a GPU host, each pinned to its device. On CPU, one worker per core, each
with one OpenMP thread, so that workers never fight for the same cores (benchmarks/serving.py
measured this at twice the throughput of one worker with every core as its threads, at the same
latency for one client). With fewer workers (``SAGEMAKER_MODEL_SERVER_WORKERS``), the cores are
shared out evenly as each worker's threads, which shortens one large model's forward pass.
"""

from dataclasses import dataclass

from detector_training import settings
from detector_training.errors import ConfigError
from detector_training.inference import DEFAULT_MAX_DETECTIONS, DEFAULT_THRESHOLD
from detector_training.serve.runtime import AUTO, CHOICES as RUNTIME_CHOICES
from detector_training.values import parse_detection_count, parse_int, parse_score_threshold

MODEL_DIR = "/opt/ml/model"
PORT = 8080
TIMEOUT = 60
PAYLOAD_MB = 6  # SageMaker's request limit for endpoints
THRESHOLD = DEFAULT_THRESHOLD
MAX_DETECTIONS = DEFAULT_MAX_DETECTIONS
BATCH_STRATEGY = "SingleRecord"  # one image per request: images cannot be concatenated


@dataclass(frozen=True)
class ServeEnvironment:
    model_dir: str
    port: int
    workers: int
    threads_per_worker: int
    gpus: int
    timeout: int
    max_payload_mb: int
    batch: bool
    threshold: float
    max_detections: int
    runtime: str = AUTO  # as set (serve/runtime.py chooses for "auto")

    @property
    def max_payload_bytes(self):
        return self.max_payload_mb * 1024 * 1024

    def execution_parameters(self):
        """What ``GET /execution-parameters`` answers to batch transform."""
        return {"MaxConcurrentTransforms": self.workers, "BatchStrategy": BATCH_STRATEGY,
                "MaxPayloadInMB": self.max_payload_mb}


def read_environment(environ, cpu_count, gpu_count):
    """The server's settings from ``environ`` on a host with these cores and GPUs. Raises
    ConfigError naming the variable when a value cannot be used."""
    gpus = max(0, int(gpu_count))
    cores = max(1, int(cpu_count))
    workers = _integer(environ, "SAGEMAKER_MODEL_SERVER_WORKERS", None, 1)
    if workers is None:
        workers = gpus or cores
    if gpus and workers > gpus:
        raise ConfigError("SAGEMAKER_MODEL_SERVER_WORKERS=%d is more than the %d GPU(s) of this host."
                          % (workers, gpus), "set it to %d or less, or leave it unset "
                          "(one worker per GPU)." % gpus)
    return ServeEnvironment(
        model_dir=environ.get(settings.name("MODEL_DIR"), "").strip() or MODEL_DIR,
        port=_integer(environ, "SAGEMAKER_BIND_TO_PORT", PORT, 1, 65535),
        workers=workers,
        threads_per_worker=max(1, cores // workers),
        gpus=gpus,
        timeout=_integer(environ, "SAGEMAKER_MODEL_SERVER_TIMEOUT", TIMEOUT, 1),
        max_payload_mb=_integer(environ, "SAGEMAKER_MAX_PAYLOAD_IN_MB", PAYLOAD_MB, 1, 100),
        batch=environ.get("SAGEMAKER_BATCH", "").strip().lower() == "true",
        threshold=_setting(environ, settings.name("SCORE_THRESHOLD"), THRESHOLD, parse_score_threshold),
        max_detections=_setting(environ, settings.name("MAX_DETECTIONS"), MAX_DETECTIONS,
                                parse_detection_count),
        runtime=_setting(environ, settings.name("RUNTIME"), AUTO, _one_of(RUNTIME_CHOICES)),
    )


def _integer(environ, name, default, low, high=None):
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse_int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        allowed = "an integer >= %d" % low if high is None else "an integer in [%d, %d]" % (low, high)
        raise ConfigError("%s=%r is not %s." % (name, raw, allowed),
                          "set %s to %s, or leave it unset." % (name, allowed))
    return value


def _one_of(choices):
    """A parser (for ``_setting``) of a value that is one of ``choices``, in any case."""
    def parse(raw):
        if raw.lower() not in choices:
            raise ValueError("one of %s" % ", ".join(choices))
        return raw.lower()
    return parse


def _setting(environ, name, default, parser):
    """A value read by ``parser`` (values.parse_score_threshold, parse_detection_count, _one_of)."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parser(raw)
    except ValueError as exc:
        raise ConfigError("%s=%r is not %s." % (name, raw, exc),
                          "set %s to %s, or leave it unset." % (name, exc)) from None
