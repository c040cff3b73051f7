"""`docker run IMAGE serve`, as SageMaker starts an endpoint: the model of a real tiny job of each
family mounted at /opt/ml/model, a real HTTP client on the published port, the label that lets
SageMaker choose the port, a broken model that never turns healthy, `docker stop` (SIGTERM) well
within SageMaker's 30 s, and the GPU image answering on CPU with NVIDIA's stub driver.

Needs a Docker engine and the images (`make test` builds them); without an engine these tests
skip with a loud message, with an engine but no image they fail.
"""

import io
import os
import random
import subprocess
import time
import uuid

import pytest
import requests
from PIL import Image

from conftest import require_image, skip_without_engine, wait_for
from detector_training.data.synthetic_voc import make_image

IMAGE = os.environ.get("IMAGE", "detector-training:cpu")
GPU_IMAGE = os.environ.get("GPU_IMAGE", "detector-training:gpu")
STUB = ["-e", "LD_LIBRARY_PATH=/opt/detector-training/cuda-stub"]
CLASSES = ["circle", "square", "triangle"]
EVERYTHING = {"X-Amzn-SageMaker-Custom-Attributes": "threshold=0"}

pytestmark = skip_without_engine("serving image tests")


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
def test_docker_run_serve_answers_for_each_family_and_stops_on_sigterm(image, trained_models, jpeg, family):
    container = Container(image, trained_models[family])
    try:
        container.wait_healthy()
        answer = container.invoke(jpeg, **EVERYTHING)  # what the SDK's default predictor sends
        assert answer.status_code == 200, answer.text
        prediction = answer.json()["prediction"]
        assert prediction and all(len(row) == 6 and row[0] in (0, 1, 2) for row in prediction)
        verbose = container.invoke(jpeg, "image/jpeg", Accept="application/json;verbose", **EVERYTHING).json()
        assert {d["class"] for d in verbose} <= set(CLASSES)
        assert all(("mask" in d) == (family == "mask_rcnn") for d in verbose)
        bad = container.invoke(b"not an image")
        assert bad.status_code == 400 and "not an image" in bad.json()["error"]
        assert container.ping() == 200
        started = time.time()
        subprocess.run(["docker", "stop", "-t", "30", container.name], check=True, capture_output=True, timeout=60)
        assert time.time() - started < 20
        assert container.exit_code() == 0, container.logs()[-3000:]
        assert "Shutting down: Master" in container.logs()
    finally:
        container.remove()


def test_serve_binds_to_the_port_sagemaker_names(image, trained_models, jpeg):
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
