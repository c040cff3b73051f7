"""The server's settings from the environment: workers per core and per GPU, SageMaker's
variables, our defaults, and a clear ConfigError for values that cannot work."""

import pytest

from detector_training.errors import ConfigError
from detector_training.serve.environment import read_environment


def test_defaults_on_a_two_core_cpu_host():
    env = read_environment({}, cpu_count=2, gpu_count=0)
    assert (env.model_dir, env.port, env.workers, env.threads_per_worker, env.gpus) == (
        "/opt/ml/model", 8080, 2, 1, 0)
    assert (env.timeout, env.max_payload_mb, env.batch, env.threshold, env.max_detections) == (
        60, 6, False, 0.5, 100)
    assert env.execution_parameters() == {"MaxConcurrentTransforms": 2, "BatchStrategy": "SingleRecord",
                                          "MaxPayloadInMB": 6}


@pytest.mark.parametrize("cores", [1, 4, 96])
def test_by_default_each_cpu_worker_has_one_core(cores):
    env = read_environment({}, cpu_count=cores, gpu_count=0)
    assert (env.workers, env.threads_per_worker) == (cores, 1)


@pytest.mark.parametrize("cores, workers, threads", [(2, 1, 2), (8, 3, 2), (16, 4, 4), (18, 4, 4)])
def test_fewer_workers_share_the_cores_out_as_threads_without_overlap(cores, workers, threads):
    env = read_environment({"SAGEMAKER_MODEL_SERVER_WORKERS": str(workers)}, cpu_count=cores, gpu_count=0)
    assert (env.workers, env.threads_per_worker) == (workers, threads)
    assert env.workers * env.threads_per_worker <= cores


def test_one_worker_per_gpu():
    env = read_environment({}, cpu_count=64, gpu_count=8)
    assert (env.workers, env.gpus) == (8, 8)
    assert read_environment({"SAGEMAKER_MODEL_SERVER_WORKERS": "2"}, 64, 8).workers == 2


def test_sagemaker_variables_are_honoured():
    env = read_environment({"SAGEMAKER_MODEL_SERVER_WORKERS": "3", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "120",
                            "SAGEMAKER_BIND_TO_PORT": "9000", "SAGEMAKER_BATCH": "true",
                            "SAGEMAKER_MAX_PAYLOAD_IN_MB": "20", "DETECTOR_SCORE_THRESHOLD": "0.25",
                            "DETECTOR_MAX_DETECTIONS": "7", "DETECTOR_MODEL_DIR": "/models/a"}, 6, 0)
    assert (env.workers, env.threads_per_worker, env.timeout, env.port) == (3, 2, 120, 9000)
    assert (env.batch, env.max_payload_mb, env.max_payload_bytes) == (True, 20, 20 << 20)
    assert (env.threshold, env.max_detections, env.model_dir) == (0.25, 7, "/models/a")
    assert env.execution_parameters()["MaxConcurrentTransforms"] == 3


@pytest.mark.parametrize("environ, named", [
    ({"SAGEMAKER_MODEL_SERVER_WORKERS": "two"}, "SAGEMAKER_MODEL_SERVER_WORKERS='two'"),
    ({"SAGEMAKER_MODEL_SERVER_WORKERS": "0"}, "SAGEMAKER_MODEL_SERVER_WORKERS='0'"),
    ({"SAGEMAKER_MODEL_SERVER_TIMEOUT": "-5"}, "SAGEMAKER_MODEL_SERVER_TIMEOUT='-5'"),
    ({"SAGEMAKER_BIND_TO_PORT": "70000"}, "SAGEMAKER_BIND_TO_PORT='70000'"),
    ({"DETECTOR_SCORE_THRESHOLD": "1.5"}, "DETECTOR_SCORE_THRESHOLD='1.5'"),
    ({"DETECTOR_SCORE_THRESHOLD": "nan"}, "DETECTOR_SCORE_THRESHOLD='nan'"),
    ({"DETECTOR_MAX_DETECTIONS": "0"}, "DETECTOR_MAX_DETECTIONS='0'"),
])
def test_a_value_that_cannot_work_is_a_config_error_naming_it(environ, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")) as caught:
        read_environment(environ, 4, 0)
    assert "Fix:" in str(caught.value)


def test_more_workers_than_gpus_is_refused():
    with pytest.raises(ConfigError, match="more than the 2 GPU"):
        read_environment({"SAGEMAKER_MODEL_SERVER_WORKERS": "3"}, 16, 2)
