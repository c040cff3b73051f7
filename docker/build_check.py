"""Build-time check of the image: fails the build when the stack is not what we ship.

    LD_LIBRARY_PATH=/opt/detector-training/cuda-stub python build_check.py --variant gpu|cpu

Without a GPU it proves what it can: the variant's mxnet build (CUDA, cuDNN, NCCL on GPU; none on
CPU), Horovod with MXNet, MPI, Gloo (and NCCL on GPU), every shared library of mxnet and Horovod
resolving through the image's own loader path (only the driver's libcuda.so.1 is left to the
host: NVIDIA's stub, named by LD_LIBRARY_PATH for this command only, stands in for it here),
pip check, the project's `train` (entrypoint/) first on PATH, and the networks building with pretrained_base=False.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

# The one library the image must not bring: the host's driver provides it at run time.
DRIVER = "libcuda.so.1"
GPU_FEATURES = ("CUDA", "CUDNN", "NCCL")
# The executables the image runs (the repository's entrypoint/), first on PATH.
ENTRYPOINT_DIR = "/opt/detector-training/entrypoint"


def missing_libraries(path, env):
    """Sonames that ``ldd path`` cannot resolve under ``env``."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, check=True).stdout
    return sorted(set(re.findall(r"^\s*(\S+) => not found", out, re.M)))


def check_libraries(variant, libraries):
    shipped = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for path in libraries:
        # With the image's own loader path alone, only the driver may be missing (GPU), or nothing.
        missing = missing_libraries(path, shipped)
        allowed = [DRIVER] if variant == "gpu" else []
        assert missing == allowed or missing == [], "%s: unresolved %s" % (path, missing)
        if variant == "gpu":
            # ... and with the stub standing in for the driver, everything resolves.
            assert missing_libraries(path, os.environ) == [], "%s: unresolved with the stub" % path
        print("ldd ok:", path, "(left to the host: %s)" % (", ".join(missing) or "nothing"))
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    assert "libcuda.so" not in cache, "a libcuda is on the image's loader path: it would shadow the host's driver"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=("gpu", "cpu"), required=True)
    variant = parser.parse_args().variant

    import mxnet as mx
    import gluoncv
    import horovod.mxnet as hvd
    import mpi4py  # noqa: F401  (the toolkit's MPI runner)
    import sagemaker_training  # noqa: F401
    import onnx, onnxruntime  # noqa: E401,F401  (onnx_export.py: export_onnx, detector-export-onnx)

    import detector_training
    from detector_training.job.config import from_hyperparameters
    from detector_training.families import build_network

    print("variant", variant, "mxnet", mx.__version__, "gluoncv", gluoncv.__version__,
          "detector_training", detector_training.__file__)
    features = mx.runtime.Features()
    enabled = {name: features.is_enabled(name) for name in GPU_FEATURES}
    print("mxnet features:", " ".join("%s=%s" % kv for kv in enabled.items()),
          "num_gpus=%d" % mx.context.num_gpus())
    if variant == "gpu":
        assert all(enabled.values()), "mxnet is not the CUDA build: %s" % enabled
    else:
        assert not any(enabled.values()), "the CPU image has a CUDA mxnet: %s" % enabled

    assert hvd.mpi_built() and hvd.gloo_built(), "horovod must have MPI and Gloo"
    assert bool(hvd.nccl_built()) == (variant == "gpu"), "horovod NCCL built: %s" % hvd.nccl_built()
    check = subprocess.run(["horovodrun", "--check-build"], capture_output=True, text=True, check=True)
    print(check.stdout)
    wanted = ["[X] MXNet", "[X] MPI", "[X] Gloo"] + (["[X] NCCL"] if variant == "gpu" else [])
    for line in wanted:
        assert line in check.stdout, "horovodrun --check-build lacks %s" % line

    mx_lib = os.path.join(os.path.dirname(mx.__file__), "libmxnet.so")
    hvd_libs = glob.glob(os.path.join(os.path.dirname(hvd.__file__), "mpi_lib*.so"))
    assert hvd_libs, "horovod's MXNet library is missing"
    check_libraries(variant, [mx_lib] + hvd_libs)

    subprocess.run([sys.executable, "-m", "pip", "check"], check=True)
    train = shutil.which("train")
    assert train == os.path.join(ENTRYPOINT_DIR, "train"), "`train` on PATH is %s, not %s" % (
        train, os.path.join(ENTRYPOINT_DIR, "train"))
    for network in ("faster_rcnn_resnet50_v1b_voc", "faster_rcnn_resnet18_v1b_voc"):
        config = from_hyperparameters({"network": network})
        net = build_network(config, ("a", "b"), 1, False, None, mx.cpu())
        print("built", network, "with", len(list(net.collect_params().keys())), "parameter arrays")
    print("build check: ok")


if __name__ == "__main__":
    main()
