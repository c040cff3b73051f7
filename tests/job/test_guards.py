import subprocess
import sys

import pytest

from detector_training.errors import EnvironmentCheckError
from detector_training.job.guards import (check_gpus_visible, classify_gpu_error, gpu_instance,
                                shm_needed_bytes, workers_for_shm)


@pytest.mark.parametrize("name, expected", [("ml.p3.2xlarge", True), ("ml.g5.12xlarge", True),
                                            ("ml.p5.48xlarge", True), ("ml.c5.xlarge", False),
                                            ("local", False), (None, False)])
def test_gpu_instance_families(name, expected):
    assert gpu_instance(name) is expected


def test_gpu_instance_without_visible_gpus_is_refused():
    with pytest.raises(EnvironmentCheckError) as err:
        check_gpus_visible("ml.p3.8xlarge", 0)
    assert "ml.p3.8xlarge" in str(err.value) and "--gpus all" in str(err.value)
    check_gpus_visible("ml.p3.8xlarge", 4)
    check_gpus_visible("ml.c5.xlarge", 0)


def test_unsupported_gpu_architecture_names_working_families():
    error = classify_gpu_error("MXNetError: CUDA: no kernel image is available for execution on the device")
    assert isinstance(error, EnvironmentCheckError)
    text = str(error)
    assert "ml.p3" in text and "ml.g5" in text and "ml.p5" in text and "sm_90" in text
    assert classify_gpu_error("out of memory") is None


def test_workers_shrink_to_fit_shared_memory():
    one = shm_needed_bytes(1, 1, 600, 1000, 8)
    assert workers_for_shm(4, 10 * one, 1, 600, 1000, 8) == 4
    assert workers_for_shm(4, 2 * one, 1, 600, 1000, 8) == 2
    assert workers_for_shm(4, 64 * 2 ** 20, 1, 600, 1000, 8) == 0  # docker's default 64 MB
    assert workers_for_shm(0, 0, 1, 600, 1000, 1) == 0


def test_open_file_limit_is_raised_to_the_hard_limit():
    # In a child process, so the test runner's own limit stays as it is.
    code = (
        "import resource; from detector_training.job.guards import raise_open_file_limit;"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE);"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard));"
        "raise_open_file_limit();"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
