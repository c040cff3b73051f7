# Two commands set everything up on a fresh machine:
#   make run    generate a small VOC-format dataset and train/validate on it (CPU)
#   make test   run the test suite
# Both create the virtual environment first if it is missing.
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip
PY := $(VENV)/bin/python
CONSTRAINTS := constraints.txt
STAMP := $(VENV)/.installed
RUN_DIR ?= out/run
# Horovod is compiled against mxnet and MPI; the wheel is kept in a folder named after what it was
# built with (pip's own cache ignores build flags), so later installs on this machine take seconds.
HOROVOD_FLAGS := HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
	HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
WHEELHOUSE ?= $(HOME)/.cache/detector-training-wheels/horovod-0.28.1-mxnet-1.9.1-py311-gloo-mpi
SYSTEM_PACKAGES := openmpi-bin libopenmpi-dev openssh-client

IMAGE ?= detector-training:cpu
# PRETRAINED=/path/to/resnet50_v1b-0ecdba34.params bakes backbone weights into the image
# (under /opt/detector-training/pretrained, outside /opt/ml); without it they come through the 'pretrained' channel.
PRETRAINED ?=
GPU_IMAGE ?= detector-training:gpu
BASE_IMAGE ?= detector-base:bookworm
# NVIDIA's stub driver library inside the GPU image, off its loader path (see Dockerfile).
CUDA_STUB := /opt/detector-training/cuda-stub

.PHONY: venv sdk-venv sysdeps run run-mask run-ssd run-yolo test container-tier bench base-image pretrained image image-gpu smoke smoke-gpu engine clean
venv: $(STAMP)

# OpenMPI (mpirun, and headers for Horovod's MPI controller) comes from the system.
sysdeps:
	@command -v mpicxx >/dev/null && command -v mpirun >/dev/null || { \
	  echo "installing $(SYSTEM_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES); }

$(STAMP): $(CONSTRAINTS) container/pyproject.toml Makefile | sysdeps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(CONSTRAINTS) pip setuptools wheel cmake
	$(PIP) install -q -c $(CONSTRAINTS) mxnet==1.9.1 numpy gluoncv
	test -n "$$(ls $(WHEELHOUSE)/horovod-*.whl 2>/dev/null)" || \
	  $(HOROVOD_FLAGS) $(PIP) wheel -q --no-cache-dir --no-deps --no-build-isolation -w $(WHEELHOUSE) horovod==0.28.1
	$(PIP) install -q -c $(CONSTRAINTS) cloudpickle psutil pyyaml packaging
	$(PIP) install -q --no-deps --force-reinstall $(WHEELHOUSE)/horovod-*.whl
	$(PIP) install -q -c $(CONSTRAINTS) sagemaker-training==5.1.4
	$(PIP) install -q -c $(CONSTRAINTS) --no-build-isolation -e 'container[test]'
	$(PY) -c "import mxnet, gluoncv, horovod.mxnet, detector_training, sagemaker_training"
	$(VENV)/bin/horovodrun --check-build > $(VENV)/horovod-build.txt
	grep -F "[X] MXNet" $(VENV)/horovod-build.txt
	touch $@

# NETWORK=<name> trains that network with its family's demo recipe (the family's demo_defaults:
# the CPU-sized settings benchmarks/learning.py measures), in $(RUN_DIR)-<name>.
run: $(STAMP)
	$(VENV)/bin/detector-run $(if $(NETWORK),--output $(RUN_DIR)-$(NETWORK) --set network=$(NETWORK),--output $(RUN_DIR))

# Each family's demo network: Mask R-CNN (generated COCO-format instance masks), SSD, YOLOv3.
run-mask:
	$(MAKE) run NETWORK=mask_rcnn_fpn_resnet18_v1b_coco
run-ssd:
	$(MAKE) run NETWORK=ssd_512_mobilenet1.0_voc
run-yolo:
	$(MAKE) run NETWORK=yolo3_mobilenet0.25_voc

SDK_VENV ?= .venv-sdk
SDK_STAMP := $(SDK_VENV)/.installed

# The notebook side (SageMaker SDK v2 for local mode and the launcher) needs numpy>=1.26, which
# mxnet 1.9.1 cannot use: it gets its own environment and pins.
sdk-venv: $(SDK_STAMP)
$(SDK_STAMP): constraints-sdk.txt Makefile sagemaker_launch/pyproject.toml
	test -x $(SDK_VENV)/bin/python || $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/pip install -q -c constraints-sdk.txt "sagemaker>=2.257,<3" pytest pytest-timeout nbclient nbformat ipykernel
	# The container's pure-Python schema (config, metrics) without its training stack.
	$(SDK_VENV)/bin/pip install -q --no-deps -e container
	$(SDK_VENV)/bin/pip install -q -c constraints-sdk.txt -e sagemaker_launch
	touch $@

# Everything: unit, functional, and container tests. The engine is started first; both images build
# in the background (log: $(TIER).log) while the tests that need no engine run, and each container
# test waits for that build (tests/docker_engine.py), failing with the log's end when it failed.
# Where no engine can run, the container tests skip, each listed with its reason at the end of the
# run; under CI=true (CI sets it) that fails here, before any test, naming the engine.
TIER ?= $(CURDIR)/out/container-tier
test: $(STAMP) $(SDK_STAMP) container-tier
	DETECTOR_CONTAINER_TIER=$(TIER) $(PY) -m pytest -q --durations=25 tests
	SAGEMAKER_SUPPRESS_V2_WARNING=1 $(SDK_VENV)/bin/python -m pytest -q sagemaker_launch/tests

# The engine, then the images' build started in the background ($(TIER).status: its exit status
# once it ends); `make image image-gpu` builds them in the foreground.
container-tier:
	mkdir -p $(dir $(TIER)) && rm -f $(TIER).started $(TIER).status
	if bash docker/ensure-engine.sh; then touch $(TIER).started; \
	  { $(MAKE) image image-gpu; echo $$? > $(TIER).status; } < /dev/null > $(TIER).log 2>&1 & \
	  echo "container tier: the images build in the background (log: $(TIER).log)"; \
	else case "$$(echo "$${CI:-}" | tr A-Z a-z)" in \
	  true|1|yes) echo "ERROR: no Docker engine could be started (docker/ensure-engine.sh says why above):" \
	    "CI=true, and the container tests may not be skipped" >&2; exit 1;; \
	  *) echo "WARNING: no Docker engine could be started: the container tests will be skipped" \
	    "(each listed with its reason at the end of the run)";; \
	esac; fi

bench: $(STAMP)
	$(PY) benchmarks/engine_overhead.py

engine:
	bash docker/ensure-engine.sh

# The images, on a machine like ours: start an engine if none answers and make the base image
# locally when it cannot be pulled. With BASE_IMAGE=debian:bookworm (a machine that can pull, e.g.
# CodeBuild) nothing is made locally. Both variants are the one Dockerfile, differing only in
# VARIANT; every part of them (the Horovod wheel too) is built inside the build, from Debian and
# PyPI, so no build depends on a file left over from another.
base-image: engine
	if [ "$(BASE_IMAGE)" = "detector-base:bookworm" ]; then bash docker/make-base-image.sh $(BASE_IMAGE); fi

pretrained:
	if [ -n "$(PRETRAINED)" ]; then cp "$(PRETRAINED)" docker/pretrained/; fi

# A rebuild leaves the previous build untagged: remove those of this image (its label; the builder
# stages, unlabelled, stay as the build cache) that no container uses, so that repeated builds
# do not fill the disk.
PRUNE_OLD_BUILDS := docker image prune -f --filter label=org.opencontainers.image.title=detector-training

image: base-image pretrained
	docker build -t $(IMAGE) --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg VARIANT=cpu .
	$(PRUNE_OLD_BUILDS)

image-gpu: base-image pretrained
	docker build -t $(GPU_IMAGE) --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg VARIANT=gpu .
	$(PRUNE_OLD_BUILDS)

# A whole job inside the image on its built-in generated dataset (CI smoke test).
SMOKE_JOB := detector-run --output /tmp/smoke --set epochs=1 --set batch_size=1 --set short=128 \
	--set max_size=176 --set num_workers=0
smoke: engine
	docker run --rm --shm-size 1g $(IMAGE) $(SMOKE_JOB)

# The same job in the GPU image on CPU: NVIDIA's stub libcuda stands in for the host's driver
# (named for this one command; the image keeps it off its loader path).
smoke-gpu: engine
	docker run --rm --shm-size 1g -e LD_LIBRARY_PATH=$(CUDA_STUB) $(GPU_IMAGE) $(SMOKE_JOB)

clean:
	rm -rf $(VENV) out
