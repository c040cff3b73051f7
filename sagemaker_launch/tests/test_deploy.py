"""The requests deploy, predict and batch transform would send to real AWS, captured with
botocore's Stubber: the model on the training image, the endpoint, the predictor's Content-Type,
Accept and custom attributes, detections with class names back, and a SingleRecord transform job."""

import io
import json

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from sagemaker_launch import LaunchError
from sagemaker_launch.deploy import DetectorPredictor, custom_attributes, deploy, transform

ROLE = "arn:aws:iam::111111111111:role/SageMakerRole"
IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/detector-training:abc123"
MODEL = "s3://detector-test-bucket/jobs/detector-1/output/model.tar.gz"
ARN = "arn:aws:sagemaker:us-east-1:111111111111:%s/x"


def stubbed_session(responses):
    """A SageMaker session whose API calls are answered by ``responses`` ([(operation, answer)])
    and recorded with their parameters."""
    import sagemaker

    boto_session = boto3.Session(region_name="us-east-1")
    client = boto_session.client("sagemaker")
    runtime = boto_session.client("sagemaker-runtime")
    captured = []
    for each in (client, runtime):
        each.meta.events.register("provide-client-params.*.*",
                                  lambda params, model, **_: captured.append((model.name, params)))
    stubbers = [Stubber(client), Stubber(runtime)]
    for operation, answer in responses:
        stubber = stubbers[1] if operation == "invoke_endpoint" else stubbers[0]
        stubber.add_response(operation, answer)
    for stubber in stubbers:
        stubber.activate()
    session = sagemaker.Session(boto_session=boto_session, sagemaker_client=client,
                                sagemaker_runtime_client=runtime, default_bucket="detector-test-bucket")
    return session, Calls(captured), stubbers


class Calls:
    """The parameters of the first call to an operation, looked up when asked."""

    def __init__(self, captured):
        self.captured = captured

    def __getitem__(self, name):
        return next(params for operation, params in self.captured if operation == name)

    def names(self):
        return [operation for operation, _params in self.captured]


DETECTIONS = [{"class": "square", "score": 0.9, "box": [10.0, 20.0, 110.0, 70.0]}]


def test_deploy_a_model_tar_gz_then_detect_with_class_names():
    answer_body = json.dumps(DETECTIONS).encode()
    session, calls, stubbers = stubbed_session([
        ("create_model", {"ModelArn": ARN % "model"}),
        ("create_endpoint_config", {"EndpointConfigArn": ARN % "endpoint-config"}),
        ("create_endpoint", {"EndpointArn": ARN % "endpoint"}),
        ("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(answer_body), len(answer_body)),
                             "ContentType": "application/json"}),
    ])
    predictor = deploy(MODEL, "ml.c5.xlarge", image_uri=IMAGE, role=ROLE, session=session,
                       endpoint_name="detector-test", threshold=0.25, max_detections=50, wait=False)
    assert isinstance(predictor, DetectorPredictor) and predictor.endpoint_name == "detector-test"
    model = calls["CreateModel"]
    assert model["PrimaryContainer"]["Image"] == IMAGE and model["PrimaryContainer"]["ModelDataUrl"] == MODEL
    assert model["PrimaryContainer"]["Environment"] == {"DETECTOR_SCORE_THRESHOLD": "0.25",
                                                        "DETECTOR_MAX_DETECTIONS": "50"}
    assert model["ExecutionRoleArn"] == ROLE
    variant = calls["CreateEndpointConfig"]["ProductionVariants"][0]
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.c5.xlarge", 1)
    assert calls["CreateEndpoint"]["EndpointName"] == "detector-test"

    assert predictor.detect(b"\xff\xd8 jpeg bytes", threshold=0.5, max_detections=3) == DETECTIONS
    request = calls["InvokeEndpoint"]
    assert request["ContentType"] == "application/x-image" and request["Accept"] == "application/json;verbose"
    assert request["CustomAttributes"] == "threshold=0.5, max_detections=3"
    assert request["Body"] == b"\xff\xd8 jpeg bytes"
    for stubber in stubbers:
        stubber.assert_no_pending_responses()


def test_batch_transform_over_an_s3_prefix_one_record_per_image():
    session, calls, stubbers = stubbed_session([
        ("create_model", {"ModelArn": ARN % "model"}),
        ("create_transform_job", {"TransformJobArn": ARN % "transform-job"}),
    ])
    transform(MODEL, "s3://detector-test-bucket/images/", "s3://detector-test-bucket/detections/",
              "ml.c5.xlarge", image_uri=IMAGE, role=ROLE, session=session, wait=False)
    job = calls["CreateTransformJob"]
    assert job["BatchStrategy"] == "SingleRecord"
    assert job["TransformInput"]["ContentType"] == "application/x-image"
    assert job["TransformInput"].get("SplitType", "None") == "None"
    assert job["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://detector-test-bucket/images/"
    assert job["TransformOutput"]["S3OutputPath"] == "s3://detector-test-bucket/detections/"
    assert job["TransformOutput"]["Accept"] == "application/jsonlines;verbose"
    assert job["TransformResources"] == {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1}
    for stubber in stubbers:
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize("call, words", [
    (lambda s: deploy("model.tar.gz", "ml.c5.xlarge", image_uri=IMAGE, role=ROLE, session=s), "s3://"),
    (lambda s: deploy(MODEL, "ml.c5.xlarge", role=ROLE, session=s), "needs image_uri"),
    (lambda s: deploy(MODEL, "ml.c5.xlarge", image_uri=IMAGE, role=ROLE, session=s, threshold=2), "threshold=2"),
    (lambda s: transform(MODEL, "s3://b/i/", "s3://b/o/", "ml.c5.xlarge", image_uri=IMAGE, role=ROLE,
                         session=s, max_detections=0), "max_detections=0"),
])
def test_what_cannot_work_is_refused_before_anything_is_sent(call, words):
    session, calls, _ = stubbed_session([])
    with pytest.raises(LaunchError, match=words):
        call(session)
    assert calls.names() == []


def test_custom_attributes_are_what_serve_reads():
    assert custom_attributes() == ""
    assert custom_attributes(threshold=0) == "threshold=0.0"
    assert custom_attributes(threshold="0.3") == "threshold=0.3"
    assert custom_attributes(max_detections=7) == "max_detections=7"


@pytest.mark.parametrize("attributes, words", [
    ({"threshold": float("nan")}, "a score between 0 and 1"), ({"threshold": -0.1}, "a score between 0 and 1"),
    ({"max_detections": 2.5}, "a whole number of detections"), ({"max_detections": "many"}, "a whole number"),
])
def test_the_launcher_refuses_what_serve_refuses_with_the_same_parsers(attributes, words):
    with pytest.raises(LaunchError, match=words):
        custom_attributes(**attributes)


def test_the_command_line_deploys_and_transforms(monkeypatch, capsys):
    from sagemaker_launch import cli

    session, calls, stubbers = stubbed_session([
        ("create_model", {"ModelArn": ARN % "model"}),
        ("create_endpoint_config", {"EndpointConfigArn": ARN % "endpoint-config"}),
        ("create_endpoint", {"EndpointArn": ARN % "endpoint"}),
        ("create_model", {"ModelArn": ARN % "model"}),
        ("create_transform_job", {"TransformJobArn": ARN % "transform-job"}),
    ])
    import sagemaker

    monkeypatch.setattr(sagemaker.session, "Session", lambda *a, **k: session)  # the stubbed clients
    monkeypatch.setattr(sagemaker, "Session", lambda *a, **k: session)
    common = ["--model", MODEL, "--image", IMAGE, "--role", ROLE, "--instance-type", "ml.c5.xlarge", "--no-wait"]
    assert cli.main(["deploy"] + common + ["--endpoint-name", "detector-cli", "--threshold", "0.4"]) == 0
    assert json.loads(capsys.readouterr().out) == {"endpoint_name": "detector-cli"}
    assert calls["CreateModel"]["PrimaryContainer"]["Environment"] == {"DETECTOR_SCORE_THRESHOLD": "0.4"}
    assert cli.main(["transform"] + common + ["--input", "s3://b/images/", "--output", "s3://b/out/"]) == 0
    assert calls["CreateTransformJob"]["BatchStrategy"] == "SingleRecord"
    assert cli.main(["deploy"] + common + ["--threshold", "3"]) == 2
    assert "threshold=3.0" in capsys.readouterr().err
