"""`serve` as SageMaker runs it: the real gunicorn on loopback, in front of models that tiny real
jobs of each family wrote. /ping only after the warm-up, every answer format, every bad input a
short JSON 4xx with the same workers still serving, many concurrent clients, memory flat over a
bounded loop, SIGTERM while a request is in flight, and broken models that never turn healthy."""

import concurrent.futures
import http.client
import io
import json
import os
import random
import signal
import socket
import subprocess
import time

import numpy as np
import psutil
import pytest
import requests
from PIL import Image

from conftest import BIN, wait_for
from detector_training import predict
from detector_training.core import model_dir as layout
from detector_training.data.synthetic_voc import make_image

FAMILIES = ("faster_rcnn", "yolo3", "mask_rcnn")
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

    def ping(self):
        try:
            return requests.get(self.url + "/ping", timeout=2).status_code
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


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, trained_models, tmp_path_factory):
    """(family, model directory, server with two workers) for each family."""
    family = request.param
    model_dir = trained_models[family]
    server = Served(model_dir, tmp_path_factory.mktemp("serve") / "serve.log",
                    SAGEMAKER_MODEL_SERVER_WORKERS="2")
    try:
        server.wait_healthy()
        assert wait_for(lambda: server.log.count("loaded and warmed up") == 2, 120), server.log[-3000:]
        yield family, model_dir, server
    finally:
        server.stop()


def expected_detections(model_dir, body, cache={}):
    """What predict's own functions find in the image ``body`` at threshold 0 (the reference the
    server must match), with the model loaded in this process."""
    if model_dir not in cache:
        cache[model_dir] = predict.load_model(model_dir)
    return predict.detect_image(cache[model_dir], predict.decode_image(io.BytesIO(body)), 0.0)


# --- the contract ------------------------------------------------------------------------------

def test_ping_turns_healthy_only_after_the_warm_up(trained_models, tmp_path):
    server = Served(trained_models["faster_rcnn"], tmp_path / "serve.log", SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        seen = []  # (status, warmed up already?) of every ping from the start on
        healthy = wait_for(lambda: seen.append((server.ping(), "warmed up" in server.log)) or seen[-1][0] == 200,
                           240, server.proc)
        assert healthy, server.log[-3000:]
        assert seen[-1] == (200, True)
        assert all(status != 200 for status, _warm in seen[:-1])
        assert any(status is None for status, _warm in seen)  # it was polled before it could answer
    finally:
        server.stop()


def test_each_worker_loads_its_model_and_mxnet_stays_out_of_the_master(served):
    family, model_dir, server = served
    log = server.log
    assert log.count("loaded and warmed up") == 2  # each of the two workers loads its own model
    assert "serve: worker 0 (pid" in log and "serve: worker 1 (pid" in log and "1 CPU thread(s)" in log
    maps = lambda pid: open("/proc/%d/maps" % pid).read()
    assert "libmxnet" not in maps(server.proc.pid)
    assert all("libmxnet" in maps(pid) for pid in server.workers())
    assert requests.get(server.url + "/execution-parameters", timeout=5).json() == {
        "MaxConcurrentTransforms": 2, "BatchStrategy": "SingleRecord", "MaxPayloadInMB": 6}


def test_default_answer_is_the_builtin_algorithms_form(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    answer = server.invoke(jpeg, "application/octet-stream", **EVERYTHING)  # the SDK's default request
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/json"
    prediction = answer.json()["prediction"]
    expected = expected_detections(model_dir, jpeg)
    assert len(prediction) == len(expected) > 0
    for row, det in zip(prediction, expected):
        assert row[0] == CLASSES.index(det["class"])
        np.testing.assert_allclose(row[1:], [det["score"], det["box"][0] / img.width, det["box"][1] / img.height,
                                             det["box"][2] / img.width, det["box"][3] / img.height], atol=1e-4)
    assert all(0.0 <= v <= 1.0 for row in prediction for v in row[1:])
    scores = [row[1] for row in prediction]
    assert scores == sorted(scores, reverse=True)


def test_verbose_answer_is_what_detector_predict_writes(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    answer = server.invoke(jpeg, Accept="application/json;verbose", **EVERYTHING)
    assert answer.status_code == 200
    found = answer.json()
    expected = expected_detections(model_dir, jpeg)
    assert [d["class"] for d in found] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] + [d["score"]] for d in found],
                               [d["box"] + [d["score"]] for d in expected], atol=1e-3)
    if family == "mask_rcnn":
        assert all(d["mask"]["size"] == [img.height, img.width] for d in found)
        assert [d["mask"] for d in found] == [d["mask"] for d in expected]
    else:
        assert all(set(d) == {"class", "score", "box"} for d in found)


def test_json_lines_and_custom_attributes(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    line = server.invoke(jpeg, "image/jpeg", Accept="application/jsonlines",
                         **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=0, max_detections=3"})
    assert line.status_code == 200 and line.headers["Content-Type"] == "application/jsonlines"
    assert line.content.endswith(b"\n") and line.content.count(b"\n") == 1
    every = expected_detections(model_dir, jpeg)
    assert len(json.loads(line.content)["prediction"]) == min(3, len(every))
    cut = every[len(every) // 2]["score"]
    kept = server.invoke(jpeg, **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=%r" % cut}).json()
    assert [row[1] for row in kept["prediction"]] == pytest.approx([d["score"] for d in every if d["score"] >= cut])


@pytest.mark.parametrize("mode, fmt, content_type", [
    ("L", "PNG", "image/png"), ("RGBA", "PNG", "application/x-image"), ("P", "PNG", "image/png"),
    ("I;16", "PNG", "image/png"), ("CMYK", "JPEG", "image/jpeg")])
def test_grey_rgba_16_bit_and_cmyk_images_are_converted_not_refused(served, shapes, mode, fmt, content_type):
    family, model_dir, server = served
    img, _jpeg = shapes
    if mode == "I;16":  # 16-bit grey, as a 16-bit PNG stores it
        converted = Image.fromarray(np.asarray(img.convert("L"), dtype=np.uint16) * 257)
    else:
        converted = img.convert(mode)
    body = encoded(converted, fmt)
    answer = server.invoke(body, content_type, Accept="application/json;verbose", **EVERYTHING)
    assert answer.status_code == 200, answer.text
    expected = expected_detections(model_dir, body)
    assert [d["class"] for d in answer.json()] == [d["class"] for d in expected] and expected


# --- bad input ---------------------------------------------------------------------------------

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


def test_every_bad_input_is_a_short_json_4xx_and_the_same_workers_go_on(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    workers = server.workers()
    for what, request, status, words in bad_requests(jpeg):
        request = dict(request)
        answer = server.invoke(request.pop("body"), request.pop("content_type", "image/jpeg"), **request)
        assert answer.status_code == status, (what, answer.text)
        assert answer.headers["Content-Type"] == "application/json", what
        assert set(answer.json()) == {"error"} and words in answer.json()["error"], (what, answer.text)
        assert len(answer.content) < 400 and "Traceback" not in answer.text, what
        assert server.invoke(jpeg).status_code == 200, what
    assert server.workers() == workers  # no worker died or was replaced
    assert server.ping() == 200
    assert "Traceback" not in server.log


def test_many_concurrent_clients_get_the_same_answer(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    reference = server.invoke(jpeg, **EVERYTHING).json()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: server.invoke(jpeg, **EVERYTHING), range(24)))
    assert [a.status_code for a in answers] == [200] * 24
    for answer in answers:
        np.testing.assert_allclose(np.array(answer.json()["prediction"]), np.array(reference["prediction"]),
                                   atol=1e-5)


def test_other_paths_and_methods_are_json_404_and_405(served):
    family, model_dir, server = served
    missing = requests.get(server.url + "/predict", timeout=10)
    wrong = requests.get(server.url + "/invocations", timeout=10)
    assert (missing.status_code, wrong.status_code) == (404, 405)
    assert set(missing.json()) == set(wrong.json()) == {"error"}


def test_batch_transform_settings_and_default_attributes_from_the_environment(trained_models, shapes, tmp_path):
    img, jpeg = shapes
    server = Served(trained_models["faster_rcnn"], tmp_path / "serve.log", SAGEMAKER_BATCH="true",
                    SAGEMAKER_MAX_PAYLOAD_IN_MB="1", SAGEMAKER_MODEL_SERVER_WORKERS="1",
                    DETECTOR_SCORE_THRESHOLD="0", DETECTOR_MAX_DETECTIONS="2")
    try:
        server.wait_healthy()
        assert requests.get(server.url + "/execution-parameters", timeout=5).json() == {
            "MaxConcurrentTransforms": 1, "BatchStrategy": "SingleRecord", "MaxPayloadInMB": 1}
        answer = server.invoke(jpeg)
        assert answer.headers["Content-Type"] == "application/jsonlines" and answer.content.endswith(b"\n")
        assert len(json.loads(answer.content)["prediction"]) == 2  # threshold 0, at most 2
        too_big = server.invoke(b"\xff" * (1024 * 1024 + 1))
        assert too_big.status_code == 413 and "over 1 MB" in too_big.json()["error"]
    finally:
        server.stop()


def test_gunicorn_runs_sync_workers_with_the_timeout_and_port_of_the_environment():
    from detector_training.serve.environment import read_environment
    from detector_training.serve.server import gunicorn_options

    env = read_environment({"SAGEMAKER_MODEL_SERVER_TIMEOUT": "17", "SAGEMAKER_BIND_TO_PORT": "9123",
                            "SAGEMAKER_MODEL_SERVER_WORKERS": "3"}, 4, 0)
    options = gunicorn_options(env)
    assert options["timeout"] == 17 and options["bind"] == ["0.0.0.0:9123"] and options["workers"] == 3
    assert options["worker_class"] == "sync" and options["preload_app"] is False
    assert options["graceful_timeout"] < 30



def test_each_gpu_worker_is_pinned_to_its_own_gpu_and_a_restarted_worker_takes_its_slot():
    from types import SimpleNamespace

    from detector_training.serve.environment import read_environment
    from detector_training.serve.server import Server, visible_gpus, worker_environment

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    gpus = ["2", "5"]
    env = read_environment({}, 16, len(gpus))
    assert env.workers == 2
    assert [worker_environment(i, env, gpus) for i in (0, 1)] == [{"CUDA_VISIBLE_DEVICES": "2"},
                                                                 {"CUDA_VISIBLE_DEVICES": "5"}]
    cpu = read_environment({"SAGEMAKER_MODEL_SERVER_WORKERS": "2"}, 8, 0)
    assert worker_environment(1, cpu, []) == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "4",
                                              "MXNET_CPU_WORKER_NTHREADS": "1"}
    server = Server.__new__(Server)  # the hooks only, without gunicorn's configuration
    server.env = env
    arbiter = SimpleNamespace(WORKERS={})
    first, second, replacement = SimpleNamespace(), SimpleNamespace(), SimpleNamespace()
    server.assign_slot(arbiter, first)
    arbiter.WORKERS[1] = first
    server.assign_slot(arbiter, second)
    arbiter.WORKERS[2] = second
    del arbiter.WORKERS[1]  # the worker on slot 0 died
    server.assign_slot(arbiter, replacement)
    assert (first.slot, second.slot, replacement.slot) == (0, 1, 0)


# --- memory and stopping (one family is enough: the same code path for all) -------------------

def rss(pids):
    return sum(psutil.Process(pid).memory_info().rss for pid in pids)


def test_memory_stays_flat_over_a_bounded_loop_of_requests(trained_models, shapes, tmp_path):
    img, jpeg = shapes
    server = Served(trained_models["faster_rcnn"], tmp_path / "serve.log", SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        server.wait_healthy()
        bad = [request for _what, request, _status, _words in bad_requests(jpeg)]
        session = requests.Session()

        def loop(count):
            for i in range(count):
                request = dict(bad[i % len(bad)]) if i % 4 == 3 else {"body": jpeg}
                session.post(server.url + "/invocations", data=request.pop("body"), timeout=60,
                             headers=dict(request, **{"Content-Type": request.pop("content_type", "image/jpeg")}))

        loop(60)  # warm: allocator pools and MXNet's caches fill up
        before = rss(server.workers())
        loop(400)
        growth = rss(server.workers()) - before
        assert growth < 24 * 1024 * 1024, "workers grew by %.1f MB over 400 requests" % (growth / 2**20)
    finally:
        server.stop()


def test_sigterm_finishes_the_request_in_flight_and_exits_well_within_30_s(trained_models, shapes, tmp_path):
    img, jpeg = shapes
    server = Served(trained_models["faster_rcnn"], tmp_path / "serve.log", SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        server.wait_healthy()
        # A request whose body is still arriving: the worker has accepted it and waits for the rest.
        in_flight = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        in_flight.putrequest("POST", "/invocations")
        for name, value in (("Content-Type", "image/jpeg"), ("Content-Length", str(len(jpeg))),
                            ("X-Amzn-SageMaker-Custom-Attributes", "threshold=0")):
            in_flight.putheader(name, value)
        in_flight.endheaders()
        in_flight.send(jpeg[:100])
        time.sleep(1.0)
        sent = time.time()
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "Handling signal: term" in server.log, 10)
        time.sleep(0.5)
        # Nothing new is answered: the master closed its socket, the busy worker accepts no more.
        assert server.ping() is None
        in_flight.send(jpeg[100:])
        answer = in_flight.getresponse()
        assert answer.status == 200
        assert json.loads(answer.read())["prediction"]
        assert server.proc.wait(timeout=30) == 0
        assert time.time() - sent < 15
    finally:
        server.stop()


# --- broken models -------------------------------------------------------------------------------

def copy_model(model_dir, target, change=None):
    os.makedirs(target)
    for name in layout.EXPORT_FILES:
        data = open(os.path.join(model_dir, name), "rb").read()
        if change and name in change:
            data = change[name](data)
        if data is not None:
            open(os.path.join(target, name), "wb").write(data)
    return str(target)


def network_is(network):
    return lambda data: json.dumps(dict(json.loads(data), network=network)).encode()


def tiny_test_size(data):  # loads, but the RPN's proposal counts do not fit 2-pixel images
    return json.dumps(dict(json.loads(data), short=[2], max_size=2)).encode()


@pytest.mark.parametrize("broken, status, words", [
    ({"model-0000.params": lambda data: None}, 2, "lacks model-0000.params"),
    ({"classes.json": lambda data: b"{not json"}, 2, "classes.json is not valid JSON"),
    ({"config.json": network_is("ssd_512_resnet50_v1_voc")}, 2, "'ssd_512_resnet50_v1_voc', which this image does not serve"),
    ({"model-0000.params": lambda data: data[:100]}, 3, "cannot load the exported network"),
    ({"config.json": tiny_test_size}, 3, "its warm-up forward pass failed (MXNetError"),
], ids=["missing-file", "bad-json", "other-family", "corrupt-params", "forward-fails"])
def test_a_broken_model_is_an_error_in_the_log_and_never_healthy(trained_models, tmp_path, broken, status, words):
    model_dir = copy_model(trained_models["faster_rcnn"], tmp_path / "model", broken)
    server = Served(model_dir, tmp_path / "serve.log")
    try:
        pings = []
        assert wait_for(lambda: pings.append(server.ping()) or server.proc.poll() is not None, 120)
        assert server.proc.returncode == status, server.log[-3000:]
        assert 200 not in pings
        errors = [line.split("serve: error:")[1] for line in server.log.splitlines() if "serve: error:" in line]
        assert errors and all(e == errors[0] for e in errors) and words in errors[0], server.log[-3000:]
        assert "Traceback" not in server.log
    finally:
        server.stop()
