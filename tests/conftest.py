import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from docker_engine import require_engine

BIN = os.path.dirname(sys.executable)

# Small enough for 2 CPU cores: the project's ResNet-18 network, 128-pixel images.
TINY = {
    "network": "faster_rcnn_resnet18_v1b_voc",
    "dataset": "custom",
    "pretrained_base": "false",
    "short": "128",
    "max_size": "176",
    "lr": "0.02",
    "lr_decay_epoch": "10",
    "num_workers": "0",
    "log_interval": "2",
    "train_splits": "2007_trainval",
}


def make_job(base, hyperparameters, n_train=8, n_test=4, seed=0):
    """A SageMaker-style tree under ``base`` with a generated VOCdevkit in the 'voc' channel."""
    from detector_training.job.demo import prepare_run_tree

    prepare_run_tree(str(base), dict(TINY, **hyperparameters), n_train=n_train, n_test=n_test,
                     n_train_2012=0, seed=seed)
    return str(base)


def make_backbone_file(directory, name="resnet18_v1b-0000abcd.params"):
    """Backbone weights made by the test itself (no download): (path, the network)."""
    import mxnet as mx
    from gluoncv.model_zoo.resnetv1b import resnet18_v1b

    base = resnet18_v1b(pretrained=False)
    # He-scaled like trained weights: with BatchNorm frozen (pretrained_base) at its initial
    # statistics, Normal(0.5) blew activations up ~10x per layer, and a job on them diverged.
    base.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    base(mx.nd.zeros((1, 3, 32, 32)))
    path = os.path.join(directory, name)
    base.save_parameters(path)
    return path, base


def run_horovod_job(base, ranks=2, timeout=900):
    """``horovodrun -np ranks --gloo`` of one job tree on this host; (result, stdout + stderr)."""
    cmd = [os.path.join(BIN, "horovodrun"), "-np", str(ranks), "--gloo", "-H", "localhost:%d" % ranks,
           os.path.join(BIN, "detector-train-job"), "--base-dir", base]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return result, result.stdout + result.stderr


def ranks_finished(out):
    """The ranks whose 'finished' line is in a job's output, sorted (["0", "1"] for two)."""
    return sorted(re.findall(r"\[rank (\d)\] finished: rank=\d", out))


def two_rank_job_finishes(base):
    """Run ``base`` with two Horovod ranks; both must finish. Returns (output, validation.json)."""
    result, out = run_horovod_job(base)
    assert result.returncode == 0, out[-4000:]
    assert ranks_finished(out) == ["0", "1"]
    with open(os.path.join(base, "model", "validation.json")) as handle:
        return out, json.load(handle)


def train_env(base, **extra):
    return dict(os.environ, SAGEMAKER_BASE_DIR=base, PYTHONUNBUFFERED="1", **extra)


def wait_for(predicate, timeout, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(0.2)
    return False


def stop_mid_epoch_and_resume(base, processes, steps, epochs=2, timeout=600):
    """SIGTERM a `train` job once it logged its third step of epoch 0: it must leave a complete
    mid-epoch checkpoint, every rank stopping; the next `train` resumes at the next iteration and
    finishes. Returns (seconds the stop took, the first run's log, the second run)."""
    log_path = os.path.join(base, "..", "first.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([os.path.join(BIN, "train")], stdout=log, stderr=subprocess.STDOUT,
                                env=train_env(base))
        started = wait_for(lambda: "[Epoch 0][Batch 2/" in open(log_path).read(), timeout, proc)
        assert started, open(log_path).read()[-3000:]
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    took, out = time.time() - sent, open(log_path).read()
    assert code == 0, out[-3000:]
    assert "stop requested: saving a checkpoint at epoch 0" in out
    assert len(re.findall(r"stopped: rank=\d", out)) == processes  # every rank stopped
    latest = open(os.path.join(base, "checkpoints", "latest")).read().strip()
    state = json.load(open(os.path.join(base, "checkpoints", latest, "state.json")))
    assert state["epoch"] == 0 and 0 < state["iteration"] < steps
    assert not os.path.exists(os.path.join(base, "model", "model.params"))  # not finished

    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                            timeout=timeout, env=train_env(base))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resume: from %s at epoch 0 iteration %d" % (
        os.path.join(base, "checkpoints", latest), state["iteration"]) in result.stdout
    steps_left = epochs * steps - state["global_step"]
    assert re.search(r"finished: rank=0 steps=%d epochs=0\.\.%d" % (steps_left, epochs - 1),
                     result.stdout)
    assert os.path.isfile(os.path.join(base, "model", "model.params"))
    return took, out, result


def pytest_runtest_setup(item):
    # Tests marked docker_engine skip without an engine (the reason in the summary), or under
    # CI=true fail naming it (tests/docker_engine.py).
    require_engine(item)


def require_image(name, make_target):
    """An image the suite built: missing means the build broke, which fails the tests."""
    found = subprocess.run(["docker", "image", "inspect", name], capture_output=True)
    assert found.returncode == 0, "image %s is missing: run `make %s` (the build failed?)" % (name, make_target)
    return name


def run_rank_job(base, timeout=600, extra_env=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    return subprocess.run([os.path.join(BIN, "detector-train-job"), "--base-dir", base],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def job_dir(tmp_path):
    return tmp_path / "opt_ml"


@pytest.fixture
def small_disk(tmp_path):
    """A real 24 MB file system (tmpfs) for what must not fit."""
    path = tmp_path / "small"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(path)], check=True)
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="session")
def moto_server():
    """moto's S3 server on an ephemeral loopback port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield "http://%s:%d" % server.get_host_and_port()
    server.stop()


def use_s3_endpoint(monkeypatch, tmp_path, endpoint):
    """boto3 in this test talks to ``endpoint`` (AWS_ENDPOINT_URL_S3) with dummy credentials and
    nothing from the machine's AWS configuration or proxies."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "HTTP_PROXY", "HTTPS_PROXY",
                "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture
def s3(moto_server, monkeypatch, tmp_path):
    """A fresh bucket on the loopback moto endpoint; boto3 reaches it through AWS_ENDPOINT_URL_S3."""
    import uuid

    import boto3

    use_s3_endpoint(monkeypatch, tmp_path, moto_server)
    client = boto3.client("s3")
    bucket = "voc-%s" % uuid.uuid4().hex[:12]
    client.create_bucket(Bucket=bucket)
    return client, bucket


# Tiny real jobs of each family, for the tests that serve their models (hyperparameters as in
# tests/test_predict.py, tests/families/test_yolo3.py, tests/families/test_ssd.py and
# tests/end_to_end/test_mask_rcnn_jobs.py). Faster R-CNN's trains on two ranks: the model of a
# multi-rank job is the one served (here and in the image) and fine-tuned.
SERVED_JOBS = {
    "faster_rcnn": ({"epochs": "1", "batch_size": "2", "processes_per_host": "2"}, 6, 2),
    # YOLOv3's objectness falls under its 0.01 floor everywhere within a few steps from scratch;
    # a tiny lr keeps the model near its initialisation, answering boxes to compare.
    "yolo3": ({"network": "yolo3_mobilenet0.25_custom", "short": "96", "max_size": "96", "lr": "0.00001",
               "lr_base_batch_size": "4", "lr_warmup": "4", "epochs": "1", "batch_size": "2"}, 6, 2),
    "ssd": ({"network": "ssd_512_mobilenet1.0_voc", "short": "64", "max_size": "64", "lr": "0.01",
             "lr_base_batch_size": "4", "lr_warmup": "4", "epochs": "1", "batch_size": "2"}, 6, 2),
    "mask_rcnn": ({"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco",
                   "train_splits": "instances_train2017", "val_splits": "instances_val2017",
                   "short": "96", "max_size": "144", "rcnn_num_samples": "64", "lr": "0.005",
                   "lr_base_batch_size": "2", "lr_warmup": "4", "epochs": "1", "batch_size": "2"}, 4, 2),
}


def trained_job(base, hyperparameters, n_train, n_test):
    """A job tree under ``base`` trained by ``detector-train-job`` (which must succeed), or by
    ``train`` (the launcher, under mpirun) when it asks for several processes; its base."""
    base = make_job(base, hyperparameters, n_train=n_train, n_test=n_test)
    if int(hyperparameters.get("processes_per_host", "1")) > 1:
        result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                                timeout=900, env=train_env(base))
    else:
        result = run_rank_job(base, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return base


class TrainedModels:
    """Model directories of SERVED_JOBS, each trained on first use and kept for the session."""

    def __init__(self, root):
        self.root = root
        self.dirs = {}

    def __getitem__(self, family):
        if family not in self.dirs:
            base = trained_job(self.root / family, *SERVED_JOBS[family])
            self.dirs[family] = os.path.join(base, "model")
        return self.dirs[family]


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A tiny job trained on two ranks, which the evaluation tests score (tests/test_evaluate.py
    and the image's): (its base folder, its validation.json). Trained once; the tests only read it."""
    base = trained_job(tmp_path_factory.mktemp("evaluated") / "job",
                       {"epochs": "2", "batch_size": "2", "seed": "3", "processes_per_host": "2"},
                       n_train=6, n_test=4)
    with open(os.path.join(base, "model", "validation.json")) as handle:
        return base, json.load(handle)


@pytest.fixture(scope="session")
def trained_models(tmp_path_factory):
    return TrainedModels(tmp_path_factory.mktemp("served-models"))


def copy_export(source, destination):
    """The files inference reads, copied from the model directory ``source`` into ``destination``
    (returned): the session's model directories stay as they are."""
    from detector_training.core import model_dir

    os.makedirs(str(destination))
    for name in model_dir.EXPORT_FILES:
        shutil.copy(os.path.join(source, name), str(destination))
    return str(destination)


class ExportedModels:
    """Model directories of 2-epoch SERVED_JOBS jobs run with ``export_onnx=true`` (the job writes
    and verifies model.onnx and onnx.json beside the MXNet files), each trained on first use and
    kept for the session: what the ONNX tests and serving by ONNX Runtime use."""

    def __init__(self, root):
        self.root, self.dirs = root, {}

    def __getitem__(self, family):
        if family not in self.dirs:
            hyperparameters, n_train, n_test = SERVED_JOBS[family]
            base = trained_job(self.root / family, dict(hyperparameters, epochs="2", export_onnx="true"),
                               n_train, n_test)
            self.dirs[family] = os.path.join(base, "model")
        return self.dirs[family]


@pytest.fixture(scope="session")
def exported_models(tmp_path_factory):
    return ExportedModels(tmp_path_factory.mktemp("onnx"))


# Real exports exactly as their tools wrote them, with their licences, beside the project
# (../shared/data/real-exports/, present in CI and on every developer machine): read from there,
# never copied into the project.
REAL_EXPORTS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                             "real-exports"))


def real_export(name, destination):
    """The real export ``name`` (``<name>.tar`` under REAL_EXPORTS) unpacked into ``destination``
    (returned) with tarfile's data filter. Skipped where the folder is absent, failed under CI."""
    import tarfile

    path = os.path.join(REAL_EXPORTS, name + ".tar")
    if not os.path.isfile(path):
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("the real export %s is missing under CI=true" % path)
        pytest.skip("the real exports are not beside this clone (%s)" % path)
    os.makedirs(str(destination), exist_ok=True)
    with tarfile.open(path) as tar:
        tar.extractall(str(destination), filter="data")
    return str(destination)
