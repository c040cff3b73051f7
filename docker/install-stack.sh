#!/bin/sh
# The pinned Python stack of one image variant (gpu or cpu), into the venv on PATH.
# Every version comes from constraints.txt, the pin source of the local install too.
set -eu
VARIANT=${1:?usage: install-stack.sh gpu|cpu}
PINS=/opt/detector-training/constraints.txt

case "$VARIANT" in
  gpu)
    MXNET=mxnet-cu112
    # mxnet-cu112 bundles no CUDA library: CUDA 11.8's runtime libraries from PyPI serve it
    # (minor-version compatibility; 11.8's NVRTC keeps the libnvrtc.so.11.2 soname).
    CUDA_LIBS="nvidia-cuda-runtime-cu11 nvidia-cuda-nvrtc-cu11 nvidia-cublas-cu11 nvidia-cufft-cu11
               nvidia-curand-cu11 nvidia-cusolver-cu11 nvidia-nvtx-cu11 nvidia-cudnn-cu11
               nvidia-nccl-cu11" ;;
  cpu)
    MXNET=mxnet
    CUDA_LIBS= ;;
  *)
    echo "VARIANT must be gpu or cpu, not '$VARIANT'" >&2
    exit 2 ;;
esac

pip install -q -c "$PINS" pip setuptools wheel
# shellcheck disable=SC2086  # word splitting of the package lists is intended
pip install -q -c "$PINS" "$MXNET" numpy gluoncv $CUDA_LIBS
# Horovod's runtime dependencies (its wheel is installed --no-deps), the toolkit, mpi4py.
pip install -q -c "$PINS" cloudpickle psutil pyyaml packaging sagemaker-training mpi4py
# Serving (gunicorn: the WSGI server of `serve`) and TensorBoard event files (tensorboardX, no TensorFlow).
pip install -q -c "$PINS" gunicorn tensorboardX

if [ -n "$CUDA_LIBS" ]; then
  # Put the wheels' libraries on the loader path for every process (mxnet's libmxnet.so finds
  # them by soname), as a CUDA base image would have them in /usr/local/cuda.
  SITE=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ls -d "$SITE"/nvidia/*/lib > /etc/ld.so.conf.d/nvidia-cu11.conf
  ldconfig
  cat /etc/ld.so.conf.d/nvidia-cu11.conf
fi
