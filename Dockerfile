# Faster R-CNN training image for Amazon SageMaker (GluonCV + MXNet 1.9.1 + Horovod 0.28.1).
#
# GPU (default):  docker build -t frcnn-training:gpu .
# CPU (for CI):   docker build -t frcnn-training:cpu \
#                   --build-arg BASE_IMAGE=debian:bookworm --build-arg MXNET_PACKAGE=mxnet==1.9.1 \
#                   --build-arg HOROVOD_GPU_OPERATIONS= .
# (`make image` builds the CPU variant on a machine that cannot pull, from a local base image.)
#
# The variants differ only in the base (CUDA 11.2 + cuDNN 8 + NCCL, or plain Debian) and the mxnet
# package. Both run Python 3.11, so one constraints.txt pins both: Debian bookworm ships 3.11;
# the CUDA 11.2 images are Ubuntu 20.04, which gets 3.11 from the deadsnakes archive.

ARG BASE_IMAGE=nvidia/cuda:11.2.2-cudnn8-devel-ubuntu20.04
FROM ${BASE_IMAGE}

ARG MXNET_PACKAGE=mxnet-cu112==1.9.1
ARG HOROVOD_VERSION=0.28.1
# NCCL allreduce on GPU; empty for the CPU variant (Gloo/MPI on CPU).
ARG HOROVOD_GPU_OPERATIONS=NCCL

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    # SageMaker runs the container as root and the toolkit's MPI runner starts sshd and mpirun as
    # root, so the image stays root and tells OpenMPI that this is intended.
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MXNET_HOME=/opt/frcnn/mxnet \
    PATH=/opt/venv/bin:${PATH}

# System layer: Python 3.11, compilers for Horovod, OpenMPI and SSH for the MPI runner, the
# libraries OpenCV needs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gnupg curl \
 && if ! apt-cache show python3.11 >/dev/null 2>&1; then \
      apt-get install -y --no-install-recommends software-properties-common \
      && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update; \
    fi \
 && apt-get install -y --no-install-recommends \
      python3.11 python3.11-dev python3.11-venv \
      build-essential g++ make git \
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

# Python layer: the same pins as the local install (constraints.txt).
COPY constraints.txt /opt/frcnn/constraints.txt
RUN python3.11 -m venv /opt/venv \
 && pip install -q -c /opt/frcnn/constraints.txt pip setuptools wheel cmake \
 && pip install -q -c /opt/frcnn/constraints.txt "${MXNET_PACKAGE}" numpy gluoncv \
 && pip install -q -c /opt/frcnn/constraints.txt cloudpickle psutil pyyaml packaging

# Horovod, compiled against the mxnet above with MXNet, MPI, Gloo (and NCCL on GPU). A wheel
# placed in docker/wheels/ by `make image` (built on a machine with the same Debian, Python and
# mxnet) is used when it matches; otherwise pip builds from source.
COPY docker/wheels/ /opt/frcnn/wheels/
RUN HOROVOD_WITH_MXNET=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_GPU_OPERATIONS=${HOROVOD_GPU_OPERATIONS} \
    pip install -q --no-cache-dir --no-build-isolation --no-deps \
      --find-links /opt/frcnn/wheels "horovod==${HOROVOD_VERSION}" \
 && rm -rf /opt/frcnn/wheels

RUN pip install -q -c /opt/frcnn/constraints.txt sagemaker-training==5.1.4 mpi4py

# Optional: backbone weights baked in outside /opt/ml (put GluonCV .params files into
# docker/pretrained/ before building); otherwise they come through the 'pretrained' channel.
COPY docker/pretrained/ /opt/frcnn/pretrained/
ENV FRCNN_PRETRAINED_DIR=/opt/frcnn/pretrained

# The project itself, last: it changes most often. Its `train` replaces the toolkit's on PATH.
COPY container/ /opt/frcnn/container/
RUN pip install -q -c /opt/frcnn/constraints.txt --no-build-isolation --no-deps /opt/frcnn/container \
 && rm -rf /opt/frcnn/container/build

# Build-time check: imports, Horovod built with MXNet, pip check, the model builds offline.
COPY docker/build_check.py /opt/frcnn/build_check.py
RUN python /opt/frcnn/build_check.py

WORKDIR /opt/ml
ENTRYPOINT []
CMD ["train"]
