# Object-detector training image for Amazon SageMaker (GluonCV + MXNet 1.9.1 + Horovod 0.28.1).
#
# GPU (default):  docker build -t detector-training:gpu .
# CPU:            docker build -t detector-training:cpu --build-arg VARIANT=cpu .
# (`make image-gpu` and `make image` run exactly these, from a base image made locally where
# nothing can be pulled.)
#
# Both variants start from Debian bookworm (Python 3.11; the last Debian with a CUDA 11 toolkit)
# and take everything else from Debian and PyPI: no NVIDIA registry, no PPA. They differ in the
# mxnet package (mxnet-cu112 or mxnet), the CUDA 11 runtime libraries (PyPI's nvidia-*-cu11
# wheels, GPU only) and Horovod's GPU operations (NCCL, GPU only). Every version is pinned in
# constraints.txt, the pin source of the local install too.
#
# Stages: system (apt, SSH, venv) -> stack (the pinned Python stack of the variant) ->
# horovod-build (compiles the Horovod wheel against that stack; on GPU with Debian's CUDA 11.8
# toolkit; never shipped) -> image (stack + that wheel + the project). Every stage serves the
# variant being built, so the legacy builder and BuildKit do the same work.

ARG BASE_IMAGE=debian:bookworm
# gpu or cpu
ARG VARIANT=gpu

FROM ${BASE_IMAGE} AS system

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # SageMaker runs the container as root and the toolkit's MPI runner starts sshd and mpirun as
    # root, so the image stays root and tells OpenMPI that this is intended.
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MXNET_HOME=/opt/detector-training/mxnet \
    PATH=/opt/venv/bin:${PATH}

# Python 3.11, compilers (Horovod, mpi4py), OpenMPI and SSH for the MPI runner, OpenCV's libraries.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates curl \
      python3.11 python3.11-dev python3.11-venv \
      build-essential g++ make \
      openmpi-bin libopenmpi-dev openssh-server openssh-client \
      libgl1 libglib2.0-0 libgomp1 procps iproute2 \
 && rm -rf /var/lib/apt/lists/*

# SSH for MPI across hosts: a key pair made at build time (never committed), trusted by root;
# hosts are the job's own containers, so host keys are not pinned.
RUN mkdir -p /var/run/sshd /root/.ssh \
 && ssh-keygen -A \
 && ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/id_ed25519 \
 && cat /root/.ssh/id_ed25519.pub >> /root/.ssh/authorized_keys \
 && chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys \
 && printf "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n" > /root/.ssh/config \
 && sed -i 's/^#\?PermitRootLogin.*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config

RUN python3.11 -m venv /opt/venv

# The pinned Python stack of the variant (docker/install-stack.sh): mxnet(-cu112), GluonCV, on GPU
# the CUDA 11 runtime libraries registered with ldconfig, Horovod's runtime dependencies, the
# SageMaker training toolkit and mpi4py.
FROM system AS stack
ARG VARIANT
COPY constraints.txt /opt/detector-training/constraints.txt
COPY docker/install-stack.sh /opt/detector-training/docker/install-stack.sh
RUN sh /opt/detector-training/docker/install-stack.sh "${VARIANT}"

# Builder, never shipped: the Horovod wheel, compiled against the mxnet above (MXNet, MPI, Gloo;
# NCCL on GPU with nvcc from Debian's non-free nvidia-cuda-toolkit 11.8). On GPU it also keeps
# NVIDIA's stub libcuda for the image's build check and smoke test.
FROM stack AS horovod-build
ARG VARIANT
COPY docker/build-horovod.sh /opt/detector-training/docker/build-horovod.sh
RUN sh /opt/detector-training/docker/build-horovod.sh "${VARIANT}"

FROM stack AS image
ARG VARIANT
# As in NVIDIA's CUDA images: the NVIDIA container runtime (SageMaker's GPU hosts, docker run
# --gpus) mounts the host's driver (libcuda) and GPUs. The image has no driver library of its
# own on the loader path. (Inert in the CPU variant, whose mxnet never loads the driver.)
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    DETECTOR_IMAGE_VARIANT=${VARIANT}

COPY --from=horovod-build /opt/detector-training/dist/ /opt/detector-training/dist/
RUN pip install -q --no-deps /opt/detector-training/dist/horovod-*.whl && rm -rf /opt/detector-training/dist

# NVIDIA's stub libcuda (GPU variant; the folder is empty on CPU), deliberately off the loader
# path: only the build check below and CPU smoke tests name it (LD_LIBRARY_PATH on one command),
# so that mxnet-cu112 imports where no driver is mounted. At run time the host's driver serves.
COPY --from=horovod-build /opt/detector-training/cuda-stub/ /opt/detector-training/cuda-stub/

# Optional: backbone weights baked in outside /opt/ml (put GluonCV .params files into
# docker/pretrained/ before building); otherwise they come through the 'pretrained' channel.
COPY docker/pretrained/ /opt/detector-training/pretrained/
ENV DETECTOR_PRETRAINED_DIR=/opt/detector-training/pretrained

# The project itself, last: it changes most often.
COPY container/ /opt/detector-training/container/
RUN pip install -q -c /opt/detector-training/constraints.txt --no-build-isolation /opt/detector-training/container \
 && rm -rf /opt/detector-training/container/build
# What the image runs (`train`: SageMaker's `docker run IMAGE train`), first on PATH: ahead of
# /opt/venv/bin, where the sagemaker-training toolkit installs a `train` of its own.
COPY entrypoint/ /opt/detector-training/entrypoint/
ENV PATH=/opt/detector-training/entrypoint:${PATH}

# Build-time check: the variant's mxnet and Horovod, every shared library resolves, pip check,
# the networks build offline (docker/build_check.py).
COPY docker/build_check.py /opt/detector-training/build_check.py
RUN LD_LIBRARY_PATH=/opt/detector-training/cuda-stub python /opt/detector-training/build_check.py --variant "${VARIANT}"

WORKDIR /opt/ml
# SageMaker runs `docker run IMAGE train` for training and `docker run IMAGE serve` for endpoints
# and batch transform: both are entrypoint/ executables, first on PATH.
ENTRYPOINT []
CMD ["train"]
# `serve` listens on $SAGEMAKER_BIND_TO_PORT when set (inference pipelines), else on 8080.
LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true
# Marks this image's builds, so that `make image` can remove the untagged ones a rebuild leaves.
LABEL org.opencontainers.image.title=detector-training
