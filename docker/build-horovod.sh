#!/bin/sh
# Builder stage only (never shipped): compile the Horovod wheel against the mxnet of this stage,
# with MXNet, MPI and Gloo, and on GPU with NCCL. Writes the wheel to /opt/detector-training/dist and, on GPU,
# NVIDIA's stub libcuda to /opt/detector-training/cuda-stub (the image copies both).
set -eu
VARIANT=${1:?usage: build-horovod.sh gpu|cpu}
PINS=/opt/detector-training/constraints.txt
DIST=/opt/detector-training/dist
STUB=/opt/detector-training/cuda-stub
mkdir -p "$DIST" "$STUB"

pip install -q -c "$PINS" cmake
export HOROVOD_WITH_MXNET=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
       HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
       CMAKE_POLICY_VERSION_MINIMUM=3.5  # pip's cmake 4.x refuses Horovod's bundled Gloo without it
export MAKEFLAGS="-j$(nproc)"

if [ "$VARIANT" = gpu ]; then
  # nvcc 11.8 and the CUDA headers: Debian's non-free nvidia-cuda-toolkit; nvcc 11.8 refuses GCC 12.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed -i 's/^Components: main$/Components: main contrib non-free/' /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ]; then
    sed -i -E 's/^(deb [^#]* main)$/\1 contrib non-free/' /etc/apt/sources.list
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit gcc-11 g++-11 >/dev/null
  nvcc --version | tail -2

  # mxnet-cu112 needs the driver's libcuda.so.1 even to import (Horovod's build imports it):
  # NVIDIA's stub stands in, on LD_LIBRARY_PATH for this build only.
  cp /usr/lib/x86_64-linux-gnu/stubs/libcuda.so "$STUB/libcuda.so.1"
  export LD_LIBRARY_PATH="$STUB"

  # NCCL from the nvidia-nccl-cu11 wheel the image ships, linked shared (the link is for -lnccl).
  NCCL=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/nccl
  ln -sf libnccl.so.2 "$NCCL/lib/libnccl.so"
  export CC=gcc-11 CXX=g++-11 CUDAHOSTCXX=g++-11 \
         HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED \
         HOROVOD_NCCL_INCLUDE="$NCCL/include" HOROVOD_NCCL_LIB="$NCCL/lib" \
         HOROVOD_BUILD_CUDA_CC_LIST=50,60,70,75,80,86
elif [ "$VARIANT" != cpu ]; then
  echo "VARIANT must be gpu or cpu, not '$VARIANT'" >&2
  exit 2
fi

pip wheel -q -c "$PINS" --no-deps --no-build-isolation -w "$DIST" horovod
ls -l "$DIST"
