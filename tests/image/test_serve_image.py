"""`docker run IMAGE serve`, as SageMaker starts an endpoint: the model of a real tiny job of each
family mounted at /opt/ml/model, a real HTTP client on the published port, the label that lets
SageMaker choose the port, a broken model that never turns healthy, `docker stop` (SIGTERM)
within SageMaker's 30 s, and the GPU image answering on CPU with NVIDIA's stub driver.

Needs a Docker engine and the images (`make test` builds them); without an engine these tests
skip (under CI=true they fail), with an engine but no image they fail.
"""

import io
import json
import os
import random
import subprocess
import uuid

import pytest
import requests
from PIL import Image

from conftest import require_image, wait_for
from detector_training import families, inference, onnx_export
from detector_training.data.generated.synthetic_voc import make_image

IMAGE = os.environ.get("IMAGE", "detector-training:cpu")
GPU_IMAGE = os.environ.get("GPU_IMAGE", "detector-training:gpu")
STUB = ["-e", "LD_LIBRARY_PATH=/opt/detector-training/cuda-stub"]
CLASSES = ["circle", "square", "triangle"]
EVERYTHING = {"X-Amzn-SageMaker-Custom-Attributes": "threshold=0"}

pytestmark = pytest.mark.docker_engine("serving image tests")


class Container:
    """`docker run -d IMAGE serve` with the model mounted read-only and the port published on
    loopback; removed again by ``remove``."""

    def __init__(self, image, model_dir, port=8080, extra=()):
        self.name = "detector-serve-test-%s" % uuid.uuid4().hex[:10]
        cmd = ["docker", "run", "-d", "--name", self.name, "-p", "127.0.0.1::%d" % port,
               "-v", "%s:/opt/ml/model:ro" % model_dir] + list(extra) + [image, "serve"]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
        self.port = port
        self.url = None

    def running(self):
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", self.name],
                               capture_output=True, text=True)
        return state.stdout.strip() == "true"

    def exit_code(self):
        return int(subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", self.name],
                                  capture_output=True, text=True, check=True).stdout.strip())

    def logs(self):
        out = subprocess.run(["docker", "logs", self.name], capture_output=True, text=True)
        return out.stdout + out.stderr

    def ping(self):
        if self.url is None:
            published = subprocess.run(["docker", "port", self.name, "%d/tcp" % self.port],
                                       capture_output=True, text=True).stdout.split()
            if not published:
                return None
            self.url = "http://%s" % published[0]
        try:
            return requests.get(self.url + "/ping", timeout=2).status_code
        except requests.RequestException:
            return None

    def wait_healthy(self, timeout=240):
        assert wait_for(lambda: self.ping() == 200 or not self.running(), timeout), self.logs()[-3000:]
        assert self.ping() == 200, self.logs()[-3000:]
        return self

    def invoke(self, body, content_type="application/octet-stream", **headers):
        return requests.post(self.url + "/invocations", data=body, timeout=120,
                             headers=dict(headers, **{"Content-Type": content_type}))

    def remove(self):
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def image():
    return require_image(IMAGE, "image")


@pytest.fixture(scope="module")
def jpeg():
    img, _objects = make_image(random.Random(5), CLASSES)
    buffer = io.BytesIO()
    img.resize((img.width * 2, img.height * 2), Image.NEAREST).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def test_the_image_says_it_accepts_a_port_from_sagemaker(image):
    labels = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image],
                            capture_output=True, text=True, check=True).stdout
    assert '"com.amazonaws.sagemaker.capabilities.accept-bind-to-port":"true"' in labels


@pytest.mark.parametrize("family", ["faster_rcnn", "yolo3", "mask_rcnn"])
def test_docker_run_serve_answers_for_each_family_and_stops_on_sigterm(image, exported_models, jpeg, family):
    """Each family's model with its ONNX export, served as the image decides by default (its
    family's faster runtime on a CPU), answering MXNet's detections."""
    container = Container(image, exported_models[family])
    try:
        container.wait_healthy()
        runtime = families.get(json.load(open(os.path.join(exported_models[family], "config.json")))["network"]).cpu_runtime
        assert "runtime %s (auto: the model has an ONNX export" % runtime in container.logs()
        answer = container.invoke(jpeg, **EVERYTHING)  # what the SDK's default predictor sends
        assert answer.status_code == 200, answer.text
        prediction = answer.json()["prediction"]
        assert prediction and all(len(row) == 6 and row[0] in (0, 1, 2) for row in prediction)
        verbose = container.invoke(jpeg, "image/jpeg", Accept="application/json;verbose", **EVERYTHING).json()
        assert len(verbose) == len(prediction)  # the same detections, named
        model = inference.load_model(exported_models[family])  # MXNet, in this process
        expected = inference.detect_image(model, inference.decode_image(io.BytesIO(jpeg)), 0.0)
        rows = [[(d["class"], d["score"], d["box"]) for d in found] for found in (expected, verbose)]
        assert onnx_export.difference(*rows) is None
        assert {d["class"] for d in verbose} <= set(CLASSES)
        fields = {"class", "score", "box"} | ({"mask"} if family == "mask_rcnn" else set())
        assert all(set(d) == fields and len(d["box"]) == 4 for d in verbose), verbose[:3]
        bad = container.invoke(b"not an image")
        assert bad.status_code == 400 and "not an image" in bad.json()["error"]
        assert container.ping() == 200
        # Docker's SIGKILL follows after 30 s, as SageMaker's does: exit code 0 (not 137) means it
        # ended by itself within them.
        subprocess.run(["docker", "stop", "-t", "30", container.name], check=True, capture_output=True, timeout=120)
        assert container.exit_code() == 0, container.logs()[-3000:]
        assert "Shutting down: Master" in container.logs()
    finally:
        container.remove()


def test_serve_binds_to_the_port_sagemaker_names(image, trained_models, jpeg):
    with open(os.path.join(trained_models["faster_rcnn"], "config.json")) as handle:
        assert json.load(handle)["world_size"] == 2  # the image serves a model of two ranks
    container = Container(image, trained_models["faster_rcnn"], port=9091,
                          extra=["-e", "SAGEMAKER_BIND_TO_PORT=9091", "-e", "SAGEMAKER_MODEL_SERVER_WORKERS=2"])
    try:
        container.wait_healthy()
        assert container.invoke(jpeg).status_code == 200
        logs = container.logs()
        assert "Listening at: http://0.0.0.0:9091" in logs and "2 worker(s)" in logs
    finally:
        container.remove()


def test_an_empty_model_directory_is_an_error_and_never_healthy(image, tmp_path):
    empty = tmp_path / "model"
    empty.mkdir()
    container = Container(image, str(empty))
    try:
        assert wait_for(lambda: not container.running(), 120)
        assert container.exit_code() == 2
        logs = container.logs()
        assert "serve: error: not a model: /opt/ml/model lacks model-symbol.json" in logs, logs[-2000:]
        assert "Traceback" not in logs
    finally:
        container.remove()


def test_the_gpu_image_serves_on_cpu_with_the_stub_driver(trained_models, jpeg):
    gpu_image = require_image(GPU_IMAGE, "image-gpu")
    container = Container(gpu_image, trained_models["faster_rcnn"], extra=STUB)
    try:
        container.wait_healthy()
        assert container.invoke(jpeg, **EVERYTHING).json()["prediction"]
        assert "CPU thread(s)" in container.logs()
    finally:
        container.remove()


# --- SageMaker SDK v2 local mode ---------------------------------------------------------------

def run_local_serve(tmp_path, spec, timeout=1500):
    """tests/sdk_local_serve.py with SPEC under .venv-sdk, in a compose project of its own whose
    containers are removed afterwards. Returns (RESULT, output)."""
    from test_container import ROOT, SDK_PYTHON, remove_compose_containers, sdk_environment

    assert os.path.exists(SDK_PYTHON), "the SDK environment is missing: run `make sdk-venv`"
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    project = "detector-test-%s" % uuid.uuid4().hex[:12]
    env = dict(sdk_environment(tmp_path), COMPOSE_PROJECT_NAME=project)
    try:
        result = subprocess.run([SDK_PYTHON, os.path.join(ROOT, "tests", "sdk_local_serve.py"), str(spec_path)],
                                capture_output=True, text=True, timeout=timeout, env=env, cwd=str(tmp_path))
    finally:
        remove_compose_containers(project)
    out = result.stdout + result.stderr
    (tmp_path / "sdk.log").write_text(out)
    assert result.returncode == 0, out[-5000:]
    line = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), out


def free_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.timeout(2400)  # a job and an endpoint in local mode (run_local_serve: 1500 s)
def test_local_mode_fit_deploy_predict_and_batch_transform(image, tmp_path, jpeg):
    from conftest import TINY, make_job

    make_job(tmp_path / "tree", {}, n_train=6, n_test=2)
    data = tmp_path / "data"
    os.rename(tmp_path / "tree" / "input" / "data" / "voc", data)
    (tmp_path / "street.jpg").write_bytes(jpeg)
    images = tmp_path / "images"
    images.mkdir()
    names = []
    for index in range(3):
        img, _objects = make_image(random.Random(20 + index), CLASSES)
        names.append("shapes%d.%s" % (index, "png" if index == 2 else "jpg"))
        img.save(images / names[-1])
    for folder in ("output", "transformed"):
        (tmp_path / folder).mkdir()
    spec = {"image": image, "serving_port": free_port(), "image_path": str(tmp_path / "street.jpg"),
            "custom_attributes": EVERYTHING["X-Amzn-SageMaker-Custom-Attributes"],
            "fit": {"data_dir": str(data), "output_dir": str(tmp_path / "output"),
                    "hyperparameters": dict(TINY, epochs="1", batch_size="2")},
            "transform_dir": str(images), "transform_output": str(tmp_path / "transformed"),
            # every detection, as the prediction's threshold=0: a 1-epoch model may score none >= 0.5
            "transform_env": {"DETECTOR_SCORE_THRESHOLD": "0"}}
    result, out = run_local_serve(tmp_path, spec)
    rows = result["prediction"]["prediction"]
    assert rows and all(len(row) == 6 and row[0] in (0, 1, 2) and 0 <= row[1] <= 1 for row in rows), rows
    written = sorted(os.listdir(tmp_path / "transformed"))
    assert written == sorted(name + ".out" for name in names), written
    for name in written:  # JSON Lines: one line per image, in the built-in algorithm's form
        content = (tmp_path / "transformed" / name).read_bytes()
        assert content.count(b"\n") == 1 and content.endswith(b"\n"), content[:200]
        rows = json.loads(content)["prediction"]
        assert rows and all(len(row) == 6 and row[0] in (0, 1, 2) and 0 <= row[1] <= 1 for row in rows), \
            (name, rows)
    assert "(batch transform)" in out


@pytest.mark.timeout(2400)  # an endpoint in local mode (run_local_serve: 1500 s)
@pytest.mark.parametrize("family", ["yolo3"])  # Mask R-CNN in the image: the docker-run test above
def test_local_mode_deploys_a_model_tar_gz_of_each_family(image, trained_models, tmp_path, jpeg, family):
    import tarfile

    archive = str(tmp_path / "model.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:  # as SageMaker packs /opt/ml/model
        for name in sorted(os.listdir(trained_models[family])):
            tar.add(os.path.join(trained_models[family], name), arcname=name)
    (tmp_path / "street.jpg").write_bytes(jpeg)
    spec = {"image": image, "serving_port": free_port(), "image_path": str(tmp_path / "street.jpg"),
            "custom_attributes": EVERYTHING["X-Amzn-SageMaker-Custom-Attributes"], "model_data": archive}
    result, _out = run_local_serve(tmp_path, spec)
    rows = result["prediction"]["prediction"]  # the built-in algorithm's rows: class, score, box
    assert rows and all(len(row) == 6 and row[0] in (0, 1, 2) and 0 <= row[1] <= 1 for row in rows), rows
