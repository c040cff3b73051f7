"""What ``POST /invocations`` accepts and answers (pure functions of headers and detections).

Request body: one image (JPEG, PNG, BMP, TIFF or WebP; see ``inference.decode_image``), sent as
``image/jpeg``, ``image/png``, ``application/x-image`` or ``application/octet-stream`` (what the
SageMaker SDK's default predictor sends).

``X-Amzn-SageMaker-Custom-Attributes`` (optional): ``threshold=0.3, max_detections=20``
(separated by commas or semicolons): the minimum score and the most detections answered.

Responses, by ``Accept``:

* ``application/json`` (the default): SageMaker's built-in Object Detection form,
  ``{"prediction": [[class_id, score, xmin, ymin, xmax, ymax], ...]}``, corners as fractions
  of the image's width and height, best first;
* ``application/json;verbose``: the list ``detector-predict --json`` writes, one
  ``{"class", "score", "box"}`` per detection (box in pixels; a Mask R-CNN adds ``mask`` as
  COCO's compressed RLE);
* ``application/jsonlines`` (the default in batch transform) and ``application/jsonlines;verbose``:
  the same on one line, ended by a newline.

Answers are JSON in UTF-8 with the class names as written (a name that is not ASCII as its own
characters, not as ``\\u`` escapes).
"""

import email.message
import json

from werkzeug.http import parse_dict_header, parse_list_header

from detector_training.values import parse_detection_count, parse_score_threshold

IMAGE_TYPES = ("image/jpeg", "image/png", "application/x-image", "application/octet-stream")
JSON, JSON_LINES = "application/json", "application/jsonlines"
ANSWER_TYPES = (JSON, JSON_LINES)
ATTRIBUTE_LIMIT = 1024  # SageMaker forwards at most this many characters


class RequestError(Exception):
    """A request the server cannot answer: its HTTP status and a message for the client."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def check_content_type(content_type):
    """RequestError 415 unless the body is declared as an image."""
    media_type = _media_type(content_type or "")[0]
    if media_type not in IMAGE_TYPES:
        raise RequestError(415, "unsupported Content-Type %r: send the image bytes as one of %s"
                           % (content_type or "", ", ".join(IMAGE_TYPES)))


def answer_type(accept, batch):
    """``(media type, verbose)`` of the answer for an ``Accept`` header: the acceptable type
    with the highest quality; without one, JSON (JSON Lines in batch transform). RequestError 406
    when nothing acceptable can be answered."""
    default = (JSON_LINES if batch else JSON, False)
    if not accept or not accept.strip():
        return default
    best, best_q = None, 0.0
    for item in parse_list_header(accept):
        media_type, params = _media_type(item)
        try:
            quality = float(params.get("q", "1"))
        except ValueError:
            quality = 0.0
        verbose = "verbose" in params and params["verbose"].lower() not in ("false", "0")
        if media_type in ("*/*", "application/*"):
            choice = default[0], verbose
        elif media_type in ANSWER_TYPES:
            choice = media_type, verbose
        else:
            continue
        if quality > best_q:
            best, best_q = choice, quality
    if best is None:
        raise RequestError(406, "cannot answer Accept %r: ask for %s (add ;verbose for class names "
                           "and pixel boxes)" % (accept, " or ".join(ANSWER_TYPES)))
    return best


def _media_type(value):
    """The lower-case media type of a header value and its parameters (stdlib's MIME parser)."""
    message = email.message.Message()
    message["content-type"] = value
    params = {key.lower(): val for key, val in message.get_params(failobj=[])[1:]}
    return message.get_content_type() if value.strip() else "", params


def custom_attributes(header, threshold, max_detections):
    """``(threshold, max_detections)`` from the custom attributes, else the defaults given.
    RequestError 400 for anything else in them."""
    if not header or not header.strip():
        return threshold, max_detections
    if len(header) > ATTRIBUTE_LIMIT:
        raise RequestError(400, "custom attributes longer than %d characters" % ATTRIBUTE_LIMIT)
    allowed = ("threshold", "max_detections")
    for key, value in parse_dict_header(header.replace(";", ",")).items():
        key = key.strip()
        if key not in allowed or value is None:
            raise RequestError(400, "malformed custom attributes %r: expected key=value pairs of %s, "
                               "e.g. 'threshold=0.3, max_detections=20'" % (header, ", ".join(allowed)))
        parser = parse_score_threshold if key == "threshold" else parse_detection_count
        try:
            number = parser(value)
        except ValueError as exc:
            raise RequestError(400, "malformed custom attributes %r: %s must be %s"
                               % (header, key, exc)) from None
        if key == "threshold":
            threshold = number
        else:
            max_detections = number
    return threshold, max_detections


def builtin_prediction(detections, classes, width, height):
    """SageMaker's built-in Object Detection answer: class index, score and corners as
    fractions of the image size, best first."""
    index = {name: i for i, name in enumerate(classes)}
    return {"prediction": [[index[d["class"]], d["score"], d["box"][0] / width, d["box"][1] / height,
                            d["box"][2] / width, d["box"][3] / height] for d in detections]}


def render(detections, classes, width, height, media_type, verbose):
    """The response body (bytes) in the chosen form."""
    payload = detections if verbose else builtin_prediction(detections, classes, width, height)
    if media_type == JSON_LINES:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False) + "\n"
        return text.encode("utf-8")
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")
