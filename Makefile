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
WHEELHOUSE ?= $(HOME)/.cache/frcnn-wheels/horovod-0.28.1-mxnet-1.9.1-py311-gloo-mpi
SYSTEM_PACKAGES := openmpi-bin libopenmpi-dev openssh-client

.PHONY: venv sysdeps run test bench clean
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
	$(PY) -c "import mxnet, gluoncv, horovod.mxnet, frcnn_train, sagemaker_training"
	$(VENV)/bin/horovodrun --check-build | grep -q "\[X\] MXNet"
	touch $@

run: $(STAMP)
	$(VENV)/bin/frcnn-run --output $(RUN_DIR)

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) benchmarks/engine_overhead.py

clean:
	rm -rf $(VENV) out
