"""`serve` when things go wrong inside it, on the real gunicorn on loopback: an internal error in a
request (500, short JSON, the worker goes on), a worker past SAGEMAKER_MODEL_SERVER_TIMEOUT or
killed (replaced, the next request answered), bodies that arrive slowly or chunked (over the
limit too), and a picture too elongated for the R-CNN resize (400, not an internal error)."""

import http.client
import json
import resource
import signal
import socket
import time

import psutil
import pytest
from PIL import Image

from conftest import wait_for
from served import Served, encoded, shapes  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def server(trained_models, tmp_path_factory):
    """One `serve` with one worker, shared by the tests below that leave it serving."""
    served = Served(trained_models["faster_rcnn"], tmp_path_factory.mktemp("serve") / "serve.log",
                    SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        yield served.wait_healthy()
    finally:
        served.stop()


def the_worker(server):
    pids = server.workers()
    assert len(pids) == 1, pids
    return pids[0]


def answered(server, jpeg):
    """The prediction a plain (Content-Length) request gets for ``jpeg``: 200 or fail."""
    answer = server.invoke(jpeg, **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=0"})
    assert answer.status_code == 200, answer.text
    return answer.json()["prediction"]


def test_an_internal_error_is_a_short_json_500_and_the_worker_goes_on_serving(server, shapes):
    _img, jpeg = shapes
    before = answered(server, jpeg)
    pid = the_worker(server)
    worker = psutil.Process(pid)
    # A real failure inside a request: the worker's address space capped just above what it uses,
    # so decoding a 7000 x 7000 picture (147 MB of pixels, a 160 KB PNG) cannot allocate them.
    big = encoded(Image.new("RGB", (7000, 7000), (90, 120, 200)), "PNG")
    worker.rlimit(psutil.RLIMIT_AS, (worker.memory_info().vms + 64 * 2**20, resource.RLIM_INFINITY))
    try:
        answer = server.invoke(big, content_type="image/png")
        assert server.ping() == 200  # the same worker, still short of memory, answers
    finally:
        worker.rlimit(psutil.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert answer.status_code == 500, answer.text[:500]
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json() == {"error": "internal error (MemoryError): see the endpoint's log"}
    assert "Traceback" in server.log and "serve: request failed" in server.log  # the log has it
    assert answered(server, jpeg) == before and server.workers() == [pid]  # no restart needed


def test_a_worker_killed_with_sigkill_is_replaced_and_requests_go_on(server, shapes):
    _img, jpeg = shapes
    before = answered(server, jpeg)
    pid = the_worker(server)
    psutil.Process(pid).send_signal(signal.SIGKILL)
    assert wait_for(lambda: server.workers() not in ([], [pid]), 60, server.proc), server.log[-3000:]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    server.wait_healthy()
    assert answered(server, jpeg) == before
    assert "Worker (pid:%d) was sent SIGKILL" % pid in server.log
    assert server.proc.poll() is None


def trickled(port, body, pieces, pause_s, content_length=True):
    """POST ``body`` over a raw socket in ``pieces`` with ``pause_s`` between them, with a
    Content-Length or chunked; the answer (status, JSON) once the whole body is sent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.putrequest("POST", "/invocations")
    connection.putheader("Content-Type", "image/jpeg")
    connection.putheader("X-Amzn-SageMaker-Custom-Attributes", "threshold=0")
    connection.putheader(*(("Content-Length", str(len(body))) if content_length
                           else ("Transfer-Encoding", "chunked")))
    connection.endheaders()
    size = -(-len(body) // pieces)
    for start in range(0, len(body), size):
        piece = body[start:start + size]
        connection.send(piece if content_length else b"%x\r\n%s\r\n" % (len(piece), piece))
        time.sleep(pause_s)
    if not content_length:
        connection.send(b"0\r\n\r\n")
    answer = connection.getresponse()
    return answer.status, json.loads(answer.read())


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "chunked"])
def test_a_slow_or_chunked_body_is_answered_as_the_same_body_sent_at_once(server, shapes, content_length):
    _img, jpeg = shapes
    at_once = answered(server, jpeg)
    status, answer = trickled(server.port, jpeg, 8, 0.4, content_length)  # about 3 s in all
    assert (status, answer) == (200, {"prediction": at_once})


def test_a_chunked_body_over_the_payload_limit_is_413(server):
    # A chunked body carries no Content-Length to refuse up front: it is read up to the limit.
    status, answer = trickled(server.port, b"\xff" * (6 * 1024 * 1024 + 1), 2, 0, content_length=False)
    assert (status, answer) == (413, {"error": "request body over 6 MB: send a smaller image"})
    assert server.ping() == 200


def test_a_worker_past_the_timeout_is_restarted_and_the_next_request_answered(trained_models, shapes, tmp_path):
    _img, jpeg = shapes
    timeout_s = 30  # above a worker's start (loading and warm-up count against it too)
    server = Served(trained_models["faster_rcnn"], tmp_path / "serve.log", SAGEMAKER_MODEL_SERVER_WORKERS="1",
                    SAGEMAKER_MODEL_SERVER_TIMEOUT=str(timeout_s))
    try:
        server.wait_healthy()
        before = answered(server, jpeg)
        pid = the_worker(server)
        # The worker takes a request whose body stops half way: it is inside that request from now.
        stalled = socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s + 60)
        stalled.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(jpeg), jpeg[:len(jpeg) // 2]))
        started = time.time()
        # gunicorn ends the worker once the timeout passed (and starts another); the request is
        # answered like every other error.
        answer = http.client.HTTPResponse(stalled)
        answer.begin()
        assert answer.status == 504 and answer.getheader("Content-Type") == "application/json"
        assert json.loads(answer.read()) == {"error": (
            "the request took longer than the server's timeout of 30 s (SAGEMAKER_MODEL_SERVER_TIMEOUT), "
            "its body's arrival included; its worker is restarted")}
        assert time.time() - started < timeout_s + 30  # gunicorn checks its workers once a second
        assert "WORKER TIMEOUT (pid:%d)" % pid in server.log, server.log[-3000:]
        server.wait_healthy()
        assert server.workers() not in ([], [pid])
        assert answered(server, jpeg) == before
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_an_image_too_thin_for_the_model_is_a_400(server):
    # 3000 x 2 pixels resized to fit the model's short/max_size is less than one pixel high.
    thin = encoded(Image.new("RGB", (3000, 2), (90, 120, 200)), "PNG")
    answer = server.invoke(thin, content_type="image/png")
    assert (answer.status_code, answer.json()) == (400, {"error": (
        "image too thin: 3000 x 2 pixels is less than one pixel high once resized for this model "
        "(longer side at most 176); send a less elongated image")}), answer.text
    assert server.ping() == 200
