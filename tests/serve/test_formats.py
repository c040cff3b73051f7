"""Request and response formats of /invocations as data: Content-Type, Accept (with ;verbose and
qualities), custom attributes, the built-in algorithm's fractions and JSON Lines."""

import json

import pytest

from detector_training.serve import formats
from detector_training.serve.formats import RequestError


@pytest.mark.parametrize("content_type", ["image/jpeg", "image/png", "application/x-image",
                                          "application/octet-stream", "IMAGE/JPEG", "image/jpeg; q=1"])
def test_image_content_types_are_accepted(content_type):
    formats.check_content_type(content_type)


@pytest.mark.parametrize("content_type", [None, "", "text/csv", "application/json", "image/svg+xml"])
def test_other_content_types_are_415(content_type):
    with pytest.raises(RequestError) as caught:
        formats.check_content_type(content_type)
    assert caught.value.status == 415 and "image/jpeg" in caught.value.message


@pytest.mark.parametrize("accept, batch, expected", [
    (None, False, ("application/json", False)),
    ("", True, ("application/jsonlines", False)),
    ("*/*", False, ("application/json", False)),
    ("*/*", True, ("application/jsonlines", False)),
    ("application/json", True, ("application/json", False)),
    ("application/json;verbose", False, ("application/json", True)),
    ("application/json; verbose=false", False, ("application/json", False)),
    ("application/jsonlines;verbose", False, ("application/jsonlines", True)),
    ("text/csv, application/jsonlines;q=0.3, application/json;q=0.9", False, ("application/json", False)),
    ("text/html, */*;q=0.1", False, ("application/json", False)),
])
def test_accept_picks_the_best_answer(accept, batch, expected):
    assert formats.answer_type(accept, batch) == expected


@pytest.mark.parametrize("accept", ["text/csv", "image/png", "application/json;q=0", "application/xml, text/*"])
def test_unanswerable_accept_is_406(accept):
    with pytest.raises(RequestError) as caught:
        formats.answer_type(accept, False)
    assert caught.value.status == 406 and "application/json" in caught.value.message


@pytest.mark.parametrize("header, expected", [
    (None, (0.5, 100)),
    ("", (0.5, 100)),
    ("threshold=0.3", (0.3, 100)),
    ("max_detections=5", (0.5, 5)),
    ("threshold=0, max_detections=2", (0.0, 2)),
    ("threshold=1;max_detections=1", (1.0, 1)),
])
def test_custom_attributes_override_the_defaults(header, expected):
    assert formats.custom_attributes(header, 0.5, 100) == expected


@pytest.mark.parametrize("header", ["threshold", "threshold=high", "threshold=1.5", "threshold=nan",
                                    "max_detections=0", "max_detections=2.5", "colour=red",
                                    "threshold=0.3," + "x" * 1100])
def test_malformed_custom_attributes_are_400(header):
    with pytest.raises(RequestError) as caught:
        formats.custom_attributes(header, 0.5, 100)
    assert caught.value.status == 400 and "custom attributes" in caught.value.message


DETECTIONS = [{"class": "square", "score": 0.9, "box": [10.0, 20.0, 110.0, 70.0]},
              {"class": "circle", "score": 0.4, "box": [0.0, 0.0, 199.0, 99.0]}]


def test_builtin_answer_has_class_index_and_corner_fractions():
    answer = json.loads(formats.render(DETECTIONS, ["circle", "square"], 200, 100, "application/json", False))
    assert answer == {"prediction": [[1, 0.9, 0.05, 0.2, 0.55, 0.7], [0, 0.4, 0.0, 0.0, 0.995, 0.99]]}


def test_verbose_answer_is_the_detections_and_json_lines_is_one_line():
    verbose = formats.render(DETECTIONS, ["circle", "square"], 200, 100, "application/json", True)
    assert json.loads(verbose) == DETECTIONS
    line = formats.render(DETECTIONS, ["circle", "square"], 200, 100, "application/jsonlines", False)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == json.loads(formats.render(DETECTIONS, ["circle", "square"], 200, 100,
                                                         "application/json", False))
