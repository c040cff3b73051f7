"""The GPU image, really run on a machine without a GPU.

NVIDIA's stub libcuda (shipped in the image at /opt/detector-training/cuda-stub, off its loader path) stands
in for the host's driver on the commands that name it, so mxnet-cu112 imports, runs CPU operations
and reports no GPU. Needs a Docker engine and the GPU image (`make test` builds it with
`make image-gpu`); without any engine these tests skip (under CI=true they fail), with an engine
but no image they fail, since that means the build broke.
"""

import json
import os
import re
import subprocess

import pytest

from conftest import make_job, require_image
from test_container import IMAGE as CPU_IMAGE, docker_run

GPU_IMAGE = os.environ.get("GPU_IMAGE", "detector-training:gpu")
STUB = ["-e", "LD_LIBRARY_PATH=/opt/detector-training/cuda-stub"]

pytestmark = [pytest.mark.docker_engine("GPU image tests"), pytest.mark.timeout(2400)]  # whole jobs


@pytest.fixture(scope="module")
def gpu_image():
    return require_image(GPU_IMAGE, "image-gpu")


def run_in(image, script, extra=(), timeout=300):
    cmd = ["docker", "run", "--rm"] + list(extra) + [image, "python", "-c", script]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


REPORT = """
import json, mxnet as mx, horovod.mxnet as hvd
features = mx.runtime.Features()
print(json.dumps({"features": {n: features.is_enabled(n) for n in ("CUDA", "CUDNN", "NCCL")},
                  "num_gpus": mx.context.num_gpus(), "cpu_op": float((mx.nd.ones((2,)) * 2).sum().asscalar()),
                  "nccl": bool(hvd.nccl_built()), "mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built())}))
"""


def test_the_gpu_image_has_cuda_mxnet_and_horovod_with_nccl(gpu_image):
    result = run_in(gpu_image, REPORT, extra=STUB)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["features"] == {"CUDA": True, "CUDNN": True, "NCCL": True}
    assert report["num_gpus"] == 0 and report["cpu_op"] == 4.0  # the stub: no GPU, CPU ops run
    assert report["nccl"] and report["mpi"] and report["gloo"]
    env = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Env}}", gpu_image],
                         capture_output=True, text=True, check=True).stdout
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env


def test_the_image_brings_no_driver_only_the_host_may(gpu_image):
    # Without the stub named, the driver is the one thing missing: the image's loader path holds
    # every CUDA runtime library, and no libcuda that would shadow the host's mounted driver.
    script = ("import subprocess\n"
              "print(subprocess.run(['ldconfig', '-p'], capture_output=True, text=True).stdout)\n"
              "import mxnet\n")
    result = run_in(gpu_image, script)
    assert result.returncode != 0
    assert "libcuda.so.1: cannot open shared object file" in result.stderr, result.stderr[-2000:]
    cache = result.stdout
    assert not re.search(r"\blibcuda\.so", cache), cache  # (libcudart is the runtime, not the driver)
    for soname in ("libcudart.so.11.0", "libcublas.so.11", "libcudnn.so.8", "libnccl.so.2",
                   "libnvrtc.so.11.2", "libcufft.so.10", "libcurand.so.10", "libcusolver.so.11",
                   "libnvToolsExt.so.1"):
        assert soname in cache, soname
    ldd = subprocess.run(["docker", "run", "--rm", gpu_image, "sh", "-c",
                          "ldd /opt/venv/lib/python3.11/site-packages/mxnet/libmxnet.so"],
                         capture_output=True, text=True, timeout=120)
    assert re.findall(r"(\S+) => not found", ldd.stdout) == ["libcuda.so.1"], ldd.stdout


def test_a_whole_job_trains_in_the_gpu_image_on_cpu_with_two_horovod_ranks(gpu_image, job_dir):
    base = make_job(job_dir, {"epochs": "1", "batch_size": "2", "processes_per_host": "2"},
                    n_train=4, n_test=2)
    result = docker_run(gpu_image, base, extra=STUB)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    for rank in (0, 1):
        assert re.search(r"world: rank=%d size=2" % rank, out), out[-3000:]
    assert re.search(r"validation: epoch=\d+ images=2 time=\S+ mAP=", out), out[-3000:]
    for name in ("model.params", "model-symbol.json", "model-0000.params", "classes.json",
                 "config.json", "validation.json"):
        assert os.path.isfile(os.path.join(base, "model", name)), name
    assert not os.path.exists(os.path.join(base, "output", "failure"))


def test_make_image_leaves_no_old_build_of_either_image_behind(gpu_image):
    # `make image` and `make image-gpu` (which `make test` ran before this) remove the untagged
    # builds a rebuild leaves, found by the label both variants carry.
    label = "org.opencontainers.image.title=detector-training"
    for name in (gpu_image, require_image(CPU_IMAGE, "image")):
        labels = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", name],
                                capture_output=True, text=True, check=True).stdout
        assert json.loads(labels).get("org.opencontainers.image.title") == "detector-training", labels
    left = subprocess.run(["docker", "images", "-q", "--filter", "dangling=true", "--filter",
                           "label=" + label], capture_output=True, text=True, check=True).stdout.split()
    assert left == [], "untagged builds left behind: %s" % left
