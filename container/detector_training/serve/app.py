"""The WSGI application of one gunicorn worker: the model, loaded in the worker after the fork,
a warm-up forward pass, then ``/ping``, ``/invocations`` and ``/execution-parameters``.

Every error answer is a short JSON ``{"error": "..."}``; a traceback goes to the log only, and an
error in one request never ends the worker.
"""

import io
import json
import logging
import time

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from detector_training import inference
from detector_training.errors import one_line
from detector_training.serve import formats

LOG = logging.getLogger("detector_training.serve")


def load_worker_model(env, runtime=inference.MXNET):
    """The model of ``env.model_dir`` run by ``runtime``: MXNet on this worker's device (GPU 0 of
    what the worker sees on a GPU host: server.py pins each worker to one), or ONNX Runtime with
    the worker's share of the cores as its threads; after one warm-up forward pass, so that the
    first request does not pay for the runtime's first-call set-up. InferenceError when it cannot
    be."""
    import mxnet as mx
    import numpy as np

    started = time.time()
    model = inference.load_model(env.model_dir, mx.gpu(0) if env.gpus else mx.cpu(), runtime,
                                 threads=env.threads_per_worker)
    grey = np.full((model.short, model.short * 4 // 3, 3), 127, dtype=np.uint8)
    try:
        inference.detect_image(model, grey, threshold=1.0)
    except Exception as exc:  # MXNetError and friends: an export that loads but cannot run
        raise inference.InferenceError("invalid model %s: its warm-up forward pass failed (%s)"
                                       % (env.model_dir, one_line(exc))) from exc
    LOG.info("serve: model %s loaded and warmed up in %.1f s (runtime %s, classes %s, short %d, max_size %d)",
             env.model_dir, time.time() - started, model.runtime, ", ".join(model.classes), model.short,
             model.max_size)
    return model


def _error(status, message):
    return Response(json.dumps({"error": message}), status=status,
                    mimetype="application/json")


def _body(limit):
    """The request's body, at most ``limit`` bytes (RequestEntityTooLarge past it: a 413). A body
    without a Content-Length (``Transfer-Encoding: chunked``) is read to one byte past the limit
    to tell: werkzeug alone would stop at the limit and pass its first bytes on as the body."""
    if request.content_length is not None:
        return request.get_data(cache=False)  # werkzeug refuses a Content-Length over the limit
    body = request.environ["wsgi.input"].read(limit + 1)  # gunicorn ends it at the last chunk
    if len(body) > limit:
        raise RequestEntityTooLarge()
    return body


def create_app(model, env):
    """The Flask application answering with ``model`` under the settings ``env``."""
    app = Flask("detector_training.serve")
    app.config["MAX_CONTENT_LENGTH"] = env.max_payload_bytes

    @app.get("/ping")
    def ping():
        # The application exists only once its worker's model answered a warm-up pass.
        return Response('{"status": "healthy"}', mimetype="application/json")

    @app.get("/execution-parameters")
    def execution_parameters():
        return Response(json.dumps(env.execution_parameters()), mimetype="application/json")

    @app.post("/invocations")
    def invocations():
        formats.check_content_type(request.headers.get("Content-Type"))
        media_type, verbose = formats.answer_type(request.headers.get("Accept"), env.batch)
        threshold, max_detections = formats.custom_attributes(
            request.headers.get("X-Amzn-SageMaker-Custom-Attributes"), env.threshold,
            env.max_detections)
        body = _body(env.max_payload_bytes)
        if not body:
            raise formats.RequestError(400, "empty body: send the image's bytes")
        try:
            rgb = inference.decode_image(io.BytesIO(body))
        except inference.BadImage as exc:
            raise formats.RequestError(400, str(exc)) from None
        try:
            detections = inference.detect_image(model, rgb, threshold, max_detections)
        except inference.BadImage as exc:  # decoded, but not one this model can take
            raise formats.RequestError(400, str(exc)) from None
        height, width = rgb.shape[:2]
        return Response(formats.render(detections, model.classes, width, height, media_type, verbose),
                        mimetype=media_type)

    @app.errorhandler(formats.RequestError)
    def request_error(exc):
        LOG.info("serve: %d %s", exc.status, exc.message)
        return _error(exc.status, exc.message)

    @app.errorhandler(HTTPException)
    def http_error(exc):  # 404, 405, 413 (body over the payload limit), ...
        message = exc.description
        if exc.code == 413:
            message = "request body over %d MB: send a smaller image" % env.max_payload_mb
        return _error(exc.code, message)

    @app.errorhandler(Exception)
    def unexpected(exc):
        LOG.exception("serve: request failed")
        return _error(500, "internal error (%s): see the endpoint's log" % type(exc).__name__)

    return app
