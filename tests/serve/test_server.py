"""`serve` as SageMaker runs it: the real gunicorn on loopback in front of a model a tiny real job
wrote. /ping only after the warm-up, gunicorn's settings and the workers' devices, memory flat
over a bounded loop, SIGTERM while a request is in flight, and broken models that never turn
healthy."""

import http.client
import json
import os
import signal
import threading
import time

import psutil
import pytest
import requests

from conftest import wait_for
from detector_training.core import model_dir as layout
from served import Served, bad_requests, shapes  # noqa: F401 (fixture)


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
        assert "runtime mxnet (auto: the model has no ONNX export)" in server.log  # a job without export_onnx
    finally:
        server.stop()


def test_gunicorn_runs_sync_workers_with_the_timeout_and_port_of_the_environment():
    from detector_training.serve.environment import read_environment
    from detector_training.serve.server import Worker, gunicorn_options

    env = read_environment({"SAGEMAKER_MODEL_SERVER_TIMEOUT": "17", "SAGEMAKER_BIND_TO_PORT": "9123",
                            "SAGEMAKER_MODEL_SERVER_WORKERS": "3"}, 4, 0)
    options = gunicorn_options(env)
    assert options["timeout"] == 17 and options["bind"] == ["0.0.0.0:9123"] and options["workers"] == 3
    assert options["worker_class"] is Worker and options["preload_app"] is False
    assert Worker.__mro__[1].__name__ == "SyncWorker"  # gunicorn's sync worker, its timeout answer in JSON
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
        samples = [rss(server.workers())]
        for _window in range(4):
            loop(100)
            samples.append(rss(server.workers()))
        # A leak grows with every request, so in every window; what a loaded machine adds (another
        # allocator arena, caches filled late) comes once, in one window. So every window but the
        # one that grew most is held to less than a quarter of one decoded picture per request: a
        # worker keeping any request's image fails.
        picture = img.width * img.height * 3
        windows = sorted(after - before for before, after in zip(samples, samples[1:]))
        assert windows[-2] < 100 * picture / 4, "workers grew in more than one window of 100 " \
            "requests (RSS after each 100, MB: %s)" % [round(r / 2**20, 1) for r in samples]
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
        assert wait_for(lambda: "Handling signal: term" in server.log, 60)
        time.sleep(0.5)
        # A request sent after the SIGTERM is never answered, not even once the busy worker is free
        # again (a server that went on serving would answer it then): refused, or dropped unanswered.
        late = []
        pinging = threading.Thread(target=lambda: late.append(server.ping(timeout=60)))
        pinging.start()
        time.sleep(0.5)
        in_flight.send(jpeg[100:])
        answer = in_flight.getresponse()
        assert answer.status == 200
        assert json.loads(answer.read())["prediction"]
        pinging.join(60)
        assert late == [None], late  # no HTTP answer at all (None: the connection failed)
        assert server.proc.wait(timeout=60) == 0
        assert time.time() - sent < 30  # SageMaker's stop: SIGKILL 30 s after the SIGTERM
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
    ({"config.json": network_is("center_net_resnet18_v1b_voc")}, 2, "'center_net_resnet18_v1b_voc', which this image does not serve"),
    ({"model-0000.params": lambda data: data[:100]}, 3, "cannot load the exported network"),
    ({"config.json": tiny_test_size}, 3, "its warm-up forward pass failed (MXNetError"),
    ({"classes.json": lambda data: b'["circle", "square"]'}, 2,
     "classes.json lists 2 classes but the network in model-symbol.json predicts 3"),
], ids=["missing-file", "bad-json", "other-family", "corrupt-params", "forward-fails", "classes-too-few"])
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


WORKER_EXIT_PROBE = """
import atexit, os, sys, threading, types
from detector_training.serve.server import leave_within_bound, setup_logging
setup_logging()
worker = types.SimpleNamespace(pid=os.getpid())
leave_within_bound(None, types.SimpleNamespace(pid=os.getpid() + 1))  # the master's call: no-op
atexit.register(threading.Event().wait)  # an exit handler that waits forever
try:  # gunicorn's spawn_worker: the worker's SystemExit, then worker_exit in `finally`
    sys.exit(int(sys.argv[1]))
finally:
    leave_within_bound(None, worker)
"""


@pytest.mark.parametrize("code", [0, 3])  # 3: gunicorn's boot error, which stops the server
def test_a_worker_whose_exit_hangs_leaves_within_the_bound_with_its_own_code(code):
    import subprocess
    import sys

    from detector_training.serve.server import WORKER_EXIT_BOUND_S

    started = time.time()
    result = subprocess.run([sys.executable, "-c", WORKER_EXIT_PROBE, str(code)],
                            capture_output=True, text=True, timeout=120)  # only catches a hang
    assert result.returncode == code, result.stdout + result.stderr
    assert "exit: still running %d s after its work ended; leaving now with code %d" % (
        WORKER_EXIT_BOUND_S, code) in result.stdout
    assert time.time() - started >= WORKER_EXIT_BOUND_S
