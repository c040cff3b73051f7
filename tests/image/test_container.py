"""The image, really run: `docker run IMAGE train` and SageMaker SDK v2 local mode (1 and 2 hosts).

Needs a Docker engine and the CPU image (`make test` starts the engine and runs `make image`
first). Without any engine these tests skip, the reason in pytest's summary, and under CI=true
they fail; with an engine but no image they fail, since that means the build broke.
"""

import json
import os
import re
import shutil
import subprocess
import tarfile
import uuid

import pytest

from conftest import TINY, make_job, require_image

from detector_training.job.metrics import METRIC_DEFINITIONS, definitions_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.environ.get("IMAGE", "detector-training:cpu")
SDK_PYTHON = os.path.join(ROOT, ".venv-sdk", "bin", "python")


# Whole jobs in containers and SDK local mode, each with its own deadlines (up to 1500 s).
pytestmark = [pytest.mark.docker_engine("container tests"), pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def image():
    return require_image(IMAGE, "image")


def docker_run(image, base, timeout=900, extra=()):
    cmd = ["docker", "run", "--rm", "--network", "host", "--shm-size", "1g",
           "-v", "%s:/opt/ml" % base] + list(extra) + [image, "train"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def loopback_s3():
    """moto's S3 server on 127.0.0.1 (the container reaches it through host networking)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = "http://%s:%d" % (host, port)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    yield endpoint, client
    server.stop()


def test_docker_run_trains_on_voc_tars_from_loopback_s3(image, job_dir, tmp_path, loopback_s3):
    from detector_training.data.generated.synthetic_voc import make_voc_tars

    endpoint, s3 = loopback_s3
    sums = make_voc_tars(str(tmp_path / "tars"), train_2007=6, test_2007=3, train_2012=2, seed=5)
    s3.create_bucket(Bucket="voc-data")
    for name in sums:
        s3.upload_file(str(tmp_path / "tars" / name), "voc-data", "pascal/" + name)
    base = make_job(job_dir, {"epochs": "1", "batch_size": "2", "num_workers": "2",
                              "train_splits": "2007_trainval,2012_trainval",
                              "data_s3_uri": "s3://voc-data/pascal/",
                              "data_mirrors": "http://127.0.0.1:9/",  # closed: never the internet
                              "data_checksums": json.dumps(sums)}, n_train=2, n_test=1)
    shutil.rmtree(os.path.join(base, "input", "data", "voc"))  # the data must come from S3
    env = ["-e", "AWS_ENDPOINT_URL_S3=" + endpoint, "-e", "AWS_ACCESS_KEY_ID=testing",
           "-e", "AWS_SECRET_ACCESS_KEY=testing", "-e", "AWS_DEFAULT_REGION=us-east-1"]
    result = docker_run(image, base, extra=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "data: 8 training images, 3 validation images" in out  # 6 (2007) + 2 (2012)
    assert "testing" not in out.replace("AWS_SECRET_ACCESS_KEY", "")  # no secret in the log
    for name in ("model.params", "model-symbol.json", "model-0000.params", "classes.json",
                 "config.json", "validation.json"):
        assert os.path.isfile(os.path.join(base, "model", name)), name
    assert not os.path.exists(os.path.join(base, "output", "failure"))
    assert "world: rank=0 size=1" in out


def test_docker_run_with_a_bad_hyperparameter_fails_with_the_reason(image, job_dir):
    base = make_job(job_dir, {"epochs": "1", "momentum": "2"}, n_train=2, n_test=1)
    result = docker_run(image, base, timeout=300)
    assert result.returncode != 0
    failure = open(os.path.join(base, "output", "failure")).read()
    assert failure.startswith("ConfigError:") and "momentum=2" in failure


def sdk_environment(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "sagemaker").mkdir(parents=True)
    (home / ".config" / "sagemaker" / "config.yaml").write_text(
        'SchemaVersion: "1.0"\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n')
    env = dict(os.environ, HOME=str(home), AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1", PYTHONUNBUFFERED="1")
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    return env


def remove_compose_containers(project):
    """Remove the containers of one compose project; return how many there were."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project=%s" % project],
                         capture_output=True, text=True, check=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f"] + ids, capture_output=True, check=True)
    return len(ids)


def run_local_mode(tmp_path, image, instance_count, hyperparameters, n_train=6, n_test=4):
    assert os.path.exists(SDK_PYTHON), "the SDK environment is missing: run `make sdk-venv`"
    data = tmp_path / "data"
    make_job(tmp_path / "tree", {}, n_train=n_train, n_test=n_test)
    os.rename(tmp_path / "tree" / "input" / "data" / "voc", data)
    spec = {"image": image, "instance_count": instance_count, "data_dir": str(data),
            "output_dir": str(tmp_path / "output"), "metric_definitions": METRIC_DEFINITIONS,
            "hyperparameters": dict(TINY, **hyperparameters)}
    (tmp_path / "output").mkdir()
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    # The SDK's `docker compose up` leaves its exited containers (and with them the image they ran)
    # behind; name the compose project so this test can remove exactly its own.
    project = "detector-test-%s" % uuid.uuid4().hex[:12]
    env = dict(sdk_environment(tmp_path), COMPOSE_PROJECT_NAME=project)
    try:
        result = subprocess.run([SDK_PYTHON, os.path.join(ROOT, "tests", "sdk_local_job.py"),
                                 str(spec_path)], capture_output=True, text=True, timeout=1500,
                                env=env, cwd=str(tmp_path))
    finally:
        removed = remove_compose_containers(project)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert removed == instance_count, "compose project %s had %d containers" % (project, removed)
    line = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), out


def model_members(model_data):
    path = model_data[len("file://"):] if model_data.startswith("file://") else model_data
    with tarfile.open(path) as tar:
        return set(tar.getnames())


def check_metrics(out):
    for definition in definitions_for("faster_rcnn"):
        assert re.search(definition["Regex"], out), definition["Name"]


def test_local_mode_one_host_two_processes(image, tmp_path):
    result, out = run_local_mode(tmp_path, image, 1, {"epochs": "1", "batch_size": "2",
                                                      "processes_per_host": "2"})
    for rank in (0, 1):
        assert re.search(r"world: rank=%d size=2" % rank, out), out[-3000:]
    members = model_members(result["model_data"])
    assert {"model.params", "model-symbol.json", "model-0000.params", "classes.json",
            "config.json"} <= {m.lstrip("./") for m in members}
    check_metrics(out)


def test_local_mode_two_hosts_horovod_over_mpi(image, tmp_path):
    result, out = run_local_mode(tmp_path, image, 2, {"epochs": "1", "batch_size": "2"})
    hosts = set()
    for rank in (0, 1):
        found = re.search(r"world: rank=%d size=2 local_rank=0 local_size=1 host=(\S+)" % rank, out)
        assert found, out[-4000:]
        hosts.add(found.group(1))
    assert len(hosts) == 2  # one rank on each container
    members = {m.lstrip("./") for m in model_members(result["model_data"])}
    assert {"model.params", "model-symbol.json", "classes.json", "config.json"} <= members
    check_metrics(out)


def host_pid_of(container, words):
    """The host's PID of the process in ``container`` whose command line has ``words``."""
    top = subprocess.run(["docker", "top", container, "-eo", "pid,args"], capture_output=True,
                         text=True, check=True).stdout.splitlines()[1:]
    found = [int(line.split()[0]) for line in top if words in line]
    return found[0] if found else None


def test_local_mode_two_hosts_a_rank_killed_on_the_second_host_ends_the_job(image, tmp_path):
    """The rank's process on the second host is killed while its container lives on: the job
    ends on both hosts within a bound, the failure naming that host and the rank."""
    import signal
    import time

    from conftest import wait_for

    assert os.path.exists(SDK_PYTHON), "the SDK environment is missing: run `make sdk-venv`"
    data = tmp_path / "data"
    make_job(tmp_path / "tree", {}, n_train=24, n_test=2)
    os.rename(tmp_path / "tree" / "input" / "data" / "voc", data)
    spec = {"image": image, "instance_count": 2, "data_dir": str(data),
            "output_dir": str(tmp_path / "output"), "metric_definitions": METRIC_DEFINITIONS,
            "hyperparameters": dict(TINY, epochs="50", batch_size="2", log_interval="1")}
    (tmp_path / "output").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    project = "detector-test-%s" % uuid.uuid4().hex[:12]
    log_path = tmp_path / "sdk.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([SDK_PYTHON, os.path.join(ROOT, "tests", "sdk_local_job.py"),
                                 str(tmp_path / "spec.json")], stdout=log, stderr=subprocess.STDOUT,
                                env=dict(sdk_environment(tmp_path), COMPOSE_PROJECT_NAME=project),
                                cwd=str(tmp_path))
    try:
        assert wait_for(lambda: "[Epoch 0][Batch 2/" in log_path.read_text(), 900, proc), \
            log_path.read_text()[-4000:]
        names = subprocess.run(["docker", "ps", "--format", "{{.Names}}", "--filter",
                                "label=com.docker.compose.project=%s" % project],
                               capture_output=True, text=True, check=True).stdout.split()
        second = [n for n in names if "algo-2" in n]
        assert len(names) == 2 and second, names
        pid = host_pid_of(second[0], "detector_training.rank")
        assert pid, "no rank process in %s" % second[0]
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            pass
        took = time.time() - killed
        out = log_path.read_text()
        assert proc.returncode is not None, "the job still runs 300 s after its rank was killed:\n" \
            + out[-4000:]
        assert proc.returncode != 0
        assert re.search(r"job failed: JobError: rank 1 on host algo-2-\w+ was killed by signal 9",
                         out), out[-4000:]
        running = subprocess.run(["docker", "ps", "-q", "--filter",
                                  "label=com.docker.compose.project=%s" % project],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert not running, "containers still running: %s" % running
        assert took < 300, took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        remove_compose_containers(project)
