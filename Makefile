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

.PHONY: venv run test bench clean
venv: $(STAMP)

$(STAMP): $(CONSTRAINTS) container/pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(CONSTRAINTS) pip setuptools wheel cmake
	$(PIP) install -q -c $(CONSTRAINTS) mxnet==1.9.1 numpy gluoncv
	# horovod links against the mxnet installed above; pip caches the built wheel.
	HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
	HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
	$(PIP) install -q -c $(CONSTRAINTS) --no-build-isolation horovod==0.28.1
	$(PIP) install -q -c $(CONSTRAINTS) --no-build-isolation -e 'container[test]'
	$(PY) -c "import mxnet, gluoncv, horovod.mxnet, frcnn_train"
	touch $@

run: $(STAMP)
	$(VENV)/bin/frcnn-run --output $(RUN_DIR)

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) benchmarks/engine_overhead.py

clean:
	rm -rf $(VENV) out
