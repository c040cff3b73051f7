"""What the serving tests share: a `serve` process on a loopback port (the real gunicorn), a
picture of shapes, and the bad requests every worker must survive."""

import io
import os
import random
import signal
import socket
import subprocess

import psutil
import pytest
import requests
from PIL import Image

from conftest import BIN, wait_for
from detector_training.data.generated.synthetic_voc import make_image

CLASSES = ["circle", "square", "triangle"]
EVERYTHING = {"X-Amzn-SageMaker-Custom-Attributes": "threshold=0"}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """One `serve` process (the gunicorn master) on a loopback port, its log in a file."""

    def __init__(self, model_dir, log_path, **environ):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = str(log_path)
        env = dict(os.environ, DETECTOR_MODEL_DIR=str(model_dir), SAGEMAKER_BIND_TO_PORT=str(self.port),
                   PYTHONUNBUFFERED="1", **environ)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([os.path.join(BIN, "serve")], stdout=log,
                                         stderr=subprocess.STDOUT, env=env)

    @property
    def log(self):
        return open(self.log_path).read()

    def ping(self, timeout=2):
        try:
            return requests.get(self.url + "/ping", timeout=timeout).status_code
        except requests.RequestException:
            return None

    def wait_healthy(self, timeout=240):
        assert wait_for(lambda: self.ping() == 200, timeout, self.proc), self.log[-4000:]
        return self

    def workers(self):
        return sorted(child.pid for child in psutil.Process(self.proc.pid).children())

    def invoke(self, body, content_type="image/jpeg", **headers):
        return requests.post(self.url + "/invocations", data=body, timeout=120,
                             headers=dict(headers, **{"Content-Type": content_type}))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def encoded(img, fmt="JPEG", **options):
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def shapes():
    """A generated picture of shapes, enlarged (the network sees it smaller), and its JPEG."""
    img, _objects = make_image(random.Random(5), CLASSES)
    img = img.resize((img.width * 2, img.height * 2), Image.NEAREST)
    return img, encoded(img, quality=95)


def bomb_png():
    """A PNG of a few kilobytes that declares 9000 x 9000 pixels (81 M, over the 64 M cap)."""
    return encoded(Image.new("1", (9000, 9000)), "PNG")


def bad_requests(jpeg):
    return [
        ("not an image", dict(body=b"this is not an image"), 400, "not an image"),
        ("truncated JPEG", dict(body=jpeg[: len(jpeg) // 2]), 400, "truncated"),
        ("decompression bomb", dict(body=bomb_png(), content_type="image/png"), 400, "too large"),
        ("over the payload limit", dict(body=b"\xff" * (6 * 1024 * 1024 + 1)), 413, "over 6 MB"),
        ("unsupported Content-Type", dict(body=jpeg, content_type="text/csv"), 415, "Content-Type"),
        ("unsupported Accept", dict(body=jpeg, Accept="text/csv"), 406, "Accept"),
        ("malformed attributes", dict(body=jpeg, **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=high"}),
         400, "custom attributes"),
        ("empty body", dict(body=b""), 400, "empty body"),
    ]
