"""Deploy what a job trained: a real-time endpoint (or local mode) and batch transform.

The image that trained the model serves it (its ``serve`` command; see docs/serving.md). The
predictor sends image bytes and reads the verbose answer: a list of detections with class names,
scores and boxes in pixels (a Mask R-CNN adds each mask as COCO RLE).

    predictor = deploy(estimator, instance_type="ml.c5.xlarge")        # or "local"
    detections = predictor.detect(open("street.jpg", "rb").read(), threshold=0.3)
    predictor.delete_endpoint()
    transform(estimator, "s3://bucket/images/", "s3://bucket/detections/", instance_type="ml.c5.xlarge")
"""

from sagemaker.deserializers import JSONDeserializer
from sagemaker.predictor import Predictor
from sagemaker.serializers import IdentitySerializer

from detector_training.values import parse_detection_count, parse_score_threshold

from .job import LOCAL_TYPES, LaunchError

IMAGE_TYPE = "application/x-image"  # any format serve decodes (JPEG, PNG, ...)
VERBOSE = "application/json;verbose"
VERBOSE_LINES = "application/jsonlines;verbose"


class DetectorPredictor(Predictor):
    """A Predictor for a detector endpoint: image bytes in, detections with class names out."""

    def __init__(self, endpoint_name, sagemaker_session=None, **kwargs):
        kwargs.setdefault("serializer", IdentitySerializer(content_type=IMAGE_TYPE))
        kwargs.setdefault("deserializer", JSONDeserializer(accept=VERBOSE))
        super().__init__(endpoint_name, sagemaker_session, **kwargs)

    def detect(self, image_bytes, threshold=None, max_detections=None):
        """``[{"class", "score", "box"[, "mask"]}]`` for one image, best first; ``threshold`` and
        ``max_detections`` override the endpoint's defaults for this request."""
        attributes = custom_attributes(threshold, max_detections)
        return self.predict(image_bytes, initial_args={"CustomAttributes": attributes} if attributes else None)


def custom_attributes(threshold=None, max_detections=None):
    """The ``X-Amzn-SageMaker-Custom-Attributes`` value serve reads ("" for its defaults)."""
    parts = []
    for key, value, parser in (("threshold", threshold, parse_score_threshold),
                               ("max_detections", max_detections, parse_detection_count)):
        if value is not None:
            try:
                parts.append("%s=%r" % (key, parser(value)))
            except ValueError as exc:  # serve's own parsers: what it refuses is refused here
                raise LaunchError("%s=%r: expected %s." % (key, value, exc)) from None
    return ", ".join(parts)


def serving_environment(threshold=None, max_detections=None, workers=None):
    """Environment of the serving container: the default score threshold, most detections per
    image and worker count (unset: serve's own defaults)."""
    environment = {}
    if threshold is not None:
        custom_attributes(threshold=threshold)
        environment["DETECTOR_SCORE_THRESHOLD"] = repr(parse_score_threshold(threshold))
    if max_detections is not None:
        custom_attributes(max_detections=max_detections)
        environment["DETECTOR_MAX_DETECTIONS"] = str(parse_detection_count(max_detections))
    if workers is not None:
        environment["SAGEMAKER_MODEL_SERVER_WORKERS"] = str(int(workers))
    return environment


def build_model(source, image_uri=None, role=None, session=None, environment=None):
    """A SageMaker Model of ``source``: a trained Estimator (its model and image), or the URI of a
    ``model.tar.gz`` a job wrote (s3://, or file:// in local mode) with ``image_uri`` and ``role``."""
    from sagemaker.model import Model

    if isinstance(source, str):
        if not source.startswith(("s3://", "file://")):
            raise LaunchError("model %r: expected a trained estimator or the s3:// (file:// in local "
                              "mode) URI of a job's model.tar.gz." % source)
        if not image_uri or not role:
            raise LaunchError("deploying %s needs image_uri (the detector-training image that trained "
                              "it) and role." % source)
        model_data = source
    else:
        model_data = source.model_data
        image_uri = image_uri or source.image_uri
        role = role or source.role
        session = session or source.sagemaker_session
    return Model(image_uri=image_uri, model_data=model_data, role=role, predictor_cls=DetectorPredictor,
                 env=environment or None, sagemaker_session=session)


def _local_session(instance_type, session):
    if session is None and instance_type in LOCAL_TYPES:
        from sagemaker.local import LocalSession

        session = LocalSession()
        session.config = {"local": {"local_code": True}}
    return session


def deploy(source, instance_type, instance_count=1, image_uri=None, role=None, session=None,
           endpoint_name=None, threshold=None, max_detections=None, workers=None, wait=True):
    """Deploy ``source`` (see build_model) to an endpoint; returns its DetectorPredictor."""
    model = build_model(source, image_uri, role, _local_session(instance_type, session),
                        serving_environment(threshold, max_detections, workers))
    return model.deploy(initial_instance_count=instance_count, instance_type=instance_type,
                        endpoint_name=endpoint_name, wait=wait)


def transform(source, input_uri, output_path, instance_type, instance_count=1, image_uri=None, role=None,
              session=None, threshold=None, max_detections=None, verbose=True, wait=True):
    """Batch transform every image under ``input_uri`` (an S3 prefix; a folder as file:// in local
    mode), one request per image (SingleRecord), writing ``<image name>.out`` under
    ``output_path``: one JSON line of detections (with class names when ``verbose``, else the
    built-in algorithm's form). Returns the Transformer."""
    model = build_model(source, image_uri, role, _local_session(instance_type, session),
                        serving_environment(threshold, max_detections))
    transformer = model.transformer(instance_count=instance_count, instance_type=instance_type,
                                    strategy="SingleRecord", output_path=output_path,
                                    accept=VERBOSE_LINES if verbose else "application/jsonlines")
    transformer.transform(input_uri, content_type=IMAGE_TYPE, split_type=None, wait=wait,
                          logs=wait and instance_type not in LOCAL_TYPES)
    return transformer
