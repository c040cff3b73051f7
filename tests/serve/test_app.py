"""The worker's application behind the real gunicorn on loopback, for models that tiny real jobs
of each family wrote: every answer format and custom attribute, grey/RGBA/16-bit/CMYK images
converted, every bad input a short JSON 4xx with the same workers still serving, other paths and
methods, batch-transform settings, and many concurrent clients."""

import concurrent.futures
import io
import json

import numpy as np
import pytest
import requests
from PIL import Image

from conftest import wait_for
from detector_training import inference, onnx_export
from served import CLASSES, EVERYTHING, Served, bad_requests, encoded, shapes  # noqa: F401 (fixture)

FAMILIES = ("faster_rcnn", "yolo3", "ssd", "mask_rcnn")
RUNTIMES = ("mxnet", "onnxruntime")


@pytest.fixture(scope="module", params=[(f, r) for f in FAMILIES for r in RUNTIMES], ids="-".join)
def served(request, exported_models, tmp_path_factory):
    """(family, model directory, server with two workers) for each family and runtime: a model a
    job wrote with its ONNX export, served by the runtime DETECTOR_RUNTIME asks for."""
    family, runtime = request.param
    model_dir = exported_models[family]
    server = Served(model_dir, tmp_path_factory.mktemp("serve") / "serve.log",
                    SAGEMAKER_MODEL_SERVER_WORKERS="2", DETECTOR_RUNTIME=runtime)
    server.runtime = runtime
    try:
        server.wait_healthy()
        assert wait_for(lambda: server.log.count("loaded and warmed up") == 2, 120), server.log[-3000:]
        yield family, model_dir, server
    finally:
        server.stop()


def expected_detections(model_dir, body, runtime="mxnet", cache={}):
    """What the inference module finds in the image ``body`` at threshold 0 with ``runtime`` (the
    reference the server must match), with the model loaded in this process."""
    if (model_dir, runtime) not in cache:
        cache[model_dir, runtime] = inference.load_model(model_dir, runtime=runtime)
    return inference.detect_image(cache[model_dir, runtime], inference.decode_image(io.BytesIO(body)), 0.0)


def test_each_worker_loads_its_model_and_mxnet_stays_out_of_the_master(served):
    family, model_dir, server = served
    log = server.log
    assert log.count("loaded and warmed up") == 2  # each of the two workers loads its own model
    assert log.count("(runtime %s," % server.runtime) == 2
    assert "runtime {0} (DETECTOR_RUNTIME={0})".format(server.runtime) in log
    assert "serve: worker 0 (pid" in log and "serve: worker 1 (pid" in log and "1 CPU thread(s)" in log
    maps = lambda pid: open("/proc/%d/maps" % pid).read()
    assert "libmxnet" not in maps(server.proc.pid) and "onnxruntime" not in maps(server.proc.pid)
    assert all("libmxnet" in maps(pid) for pid in server.workers())  # the input is prepared with MXNet
    assert all(("onnxruntime" in maps(pid)) == (server.runtime == "onnxruntime") for pid in server.workers())
    assert requests.get(server.url + "/execution-parameters", timeout=5).json() == {
        "MaxConcurrentTransforms": 2, "BatchStrategy": "SingleRecord", "MaxPayloadInMB": 6}


def test_default_answer_is_the_builtin_algorithms_form(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    answer = server.invoke(jpeg, "application/octet-stream", **EVERYTHING)  # the SDK's default request
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/json"
    prediction = answer.json()["prediction"]
    expected = expected_detections(model_dir, jpeg, server.runtime)
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
    expected = expected_detections(model_dir, jpeg, server.runtime)
    assert len(found) == len(expected) > 0
    assert [d["class"] for d in found] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] + [d["score"]] for d in found],
                               [d["box"] + [d["score"]] for d in expected], atol=1e-3)
    if family == "mask_rcnn":
        assert all(d["mask"]["size"] == [img.height, img.width] for d in found)
        assert [d["mask"] for d in found] == [d["mask"] for d in expected]
    else:
        assert all(set(d) == {"class", "score", "box"} for d in found)


def test_each_runtime_answers_what_the_other_answers(served, shapes):
    """Served by one runtime, the detections are the other's for the same model, computed in this
    process (onnx_export's comparison: classes, scores within 0.001, boxes within 1 pixel), on the
    shapes and on a picture of another aspect."""
    family, model_dir, server = served
    img, jpeg = shapes
    tall = encoded(img.resize((img.width // 2, img.height * 2)), quality=95)
    for body in (jpeg, tall):
        found = server.invoke(body, Accept="application/json;verbose", **EVERYTHING).json()
        if server.runtime == "onnxruntime":
            mxnet, onnx = expected_detections(model_dir, body, "mxnet"), found
        else:
            mxnet, onnx = found, expected_detections(model_dir, body, "onnxruntime")
        rows = [[(d["class"], d["score"], d["box"]) for d in answer] for answer in (mxnet, onnx)]
        assert found and onnx_export.difference(*rows) is None, (rows[0][:3], rows[1][:3])


def test_json_lines_and_custom_attributes(served, shapes):
    family, model_dir, server = served
    img, jpeg = shapes
    line = server.invoke(jpeg, "image/jpeg", Accept="application/jsonlines",
                         **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=0, max_detections=3"})
    assert line.status_code == 200 and line.headers["Content-Type"] == "application/jsonlines"
    assert line.content.endswith(b"\n") and line.content.count(b"\n") == 1
    every = expected_detections(model_dir, jpeg, server.runtime)
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
    expected = expected_detections(model_dir, body, server.runtime)
    assert [d["class"] for d in answer.json()] == [d["class"] for d in expected] and expected


# --- bad input ---------------------------------------------------------------------------------

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
