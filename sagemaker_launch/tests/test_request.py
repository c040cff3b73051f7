"""The CreateTrainingJob request the SDK would send for real AWS, captured with botocore's Stubber."""

import boto3
import pytest
from botocore.stub import Stubber

from detector_training.job.guards import SUPPORTED_GPU_FAMILIES, UNSUPPORTED_GPU_FAMILIES, instance_family
from detector_training.job.metrics import METRIC_DEFINITIONS
from sagemaker_launch import JobSpec, LaunchError, build_tuner, launch, processes_per_host
from sagemaker_launch.job import _GPUS

ROLE = "arn:aws:iam::111111111111:role/SageMakerRole"
IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/detector-training:abc123"


def stubbed_session():
    import sagemaker

    boto_session = boto3.Session(region_name="us-east-1")
    client = boto_session.client("sagemaker")
    captured = {}

    def capture(params, **_):
        captured.update(params)

    client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob", capture)
    stubber = Stubber(client)
    stubber.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:111111111111:training-job/x"})
    stubber.activate()
    session = sagemaker.Session(boto_session=boto_session, sagemaker_client=client,
                                default_bucket="detector-test-bucket")
    return session, captured, stubber


def test_create_training_job_request_for_two_gpu_hosts_on_spot():
    session, captured, stubber = stubbed_session()
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.p3.16xlarge", instance_count=2,
                   hyperparameters={"epochs": 20, "batch_size": 16, "mixup": False, "lr_decay_epoch": [14, 20]},
                   volume_size=200, max_run=36000, output_path="s3://detector-test-bucket/out/",
                   checkpoint_s3_uri="s3://detector-test-bucket/ckpt/", use_spot_instances=True,
                   max_wait=72000, tags=[{"Key": "team", "Value": "vision"}])
    launch(spec, {"voc": "s3://detector-test-bucket/voc/", "pretrained": "s3://detector-test-bucket/weights/"},
           wait=False, session=session)
    stubber.assert_no_pending_responses()
    req = captured
    assert req["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert req["ResourceConfig"] == {"InstanceType": "ml.p3.16xlarge", "InstanceCount": 2, "VolumeSizeInGB": 200}
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in req["InputDataConfig"]}
    assert channels == {"voc": "s3://detector-test-bucket/voc/", "pretrained": "s3://detector-test-bucket/weights/"}
    hps = req["HyperParameters"]
    assert hps["processes_per_host"] == "8"  # the container's MPI setting: one rank per GPU
    assert hps["epochs"] == "20" and hps["batch_size"] == "16" and hps["mixup"] == "false"
    assert hps["lr_decay_epoch"] == "14,20"
    assert req["CheckpointConfig"]["S3Uri"] == "s3://detector-test-bucket/ckpt/"
    assert req["EnableManagedSpotTraining"] is True
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 36000, "MaxWaitTimeInSeconds": 72000}
    sent = {d["Name"]: d["Regex"] for d in req["AlgorithmSpecification"]["MetricDefinitions"]}
    assert sent == {d["Name"]: d["Regex"] for d in METRIC_DEFINITIONS}
    assert {"Key": "team", "Value": "vision"} in req["Tags"]
    assert req["OutputDataConfig"]["S3OutputPath"] == "s3://detector-test-bucket/out/"
    assert req["RoleArn"] == ROLE


@pytest.mark.parametrize("changes, words", [
    (dict(hyperparameters={"epochs": "ten"}), "epochs=ten"),
    (dict(hyperparameters={"lrr": 0.1}), "did you mean 'lr'"),
    (dict(hyperparameters={"batch_size": 12}), "set batch_size to 8 or 16"),
    (dict(use_spot_instances=True), "checkpoint_s3_uri"),
    (dict(use_spot_instances=True, checkpoint_s3_uri="s3://b/c", max_wait=10), "max_wait"),
    (dict(instance_type="ml.p5.48xlarge"), "sm_90"),
    (dict(instance_type="ml.p5en.48xlarge", processes_per_host=8), "sm_90"),
    (dict(instance_type="ml.p6-b200.48xlarge"), "B200 GPUs (sm_100)"),
])
def test_invalid_jobs_are_refused_before_anything_is_sent(changes, words):
    session, captured, _ = stubbed_session()
    base = dict(image_uri=IMAGE, role=ROLE, instance_type="ml.p3.8xlarge", instance_count=2)
    base.update(changes)
    with pytest.raises(LaunchError) as err:
        launch(JobSpec(**base), {"voc": "s3://b/voc/"}, wait=False, session=session)
    assert words in str(err.value)
    assert captured == {}  # nothing reached the API


def test_the_instance_table_holds_only_families_the_image_can_run():
    supported = {family for family, _, _ in SUPPORTED_GPU_FAMILIES}
    assert {instance_family(name) for name in _GPUS} == supported
    for family, gpu, arch in UNSUPPORTED_GPU_FAMILIES:
        with pytest.raises(LaunchError) as err:
            processes_per_host(family + ".48xlarge")
        assert "%s GPUs (%s)" % (gpu, arch) in str(err.value) and "ml.g5 (A10G)" in str(err.value)


def test_processes_per_host_follow_the_gpu_count():
    assert processes_per_host("ml.p3.2xlarge") == 1
    assert processes_per_host("ml.g5.48xlarge") == 8
    assert processes_per_host("ml.c5.4xlarge") == 1
    assert processes_per_host("local") == 1


def test_tuner_targets_validation_map():
    session, _, _ = stubbed_session()
    from sagemaker_launch import build_estimator

    est = build_estimator(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge"), session)
    tuner = build_tuner(est, max_jobs=4, max_parallel_jobs=2)
    assert tuner.objective_metric_name == "validation:mAP" and tuner.objective_type == "Maximize"
    assert set(tuner._hyperparameter_ranges) == {"lr", "wd", "momentum"}
    assert any(d["Name"] == "validation:mAP" for d in tuner.metric_definitions)


def test_cli_refuses_bad_input_with_exit_code_2(capsys):
    from sagemaker_launch.cli import main

    code = main(["--image", IMAGE, "--role", ROLE, "--instance-type", "ml.p3.2xlarge",
                 "--input", "voc=s3://b/voc/", "--hp", "epochs=zero"])
    assert code == 2
    assert "epochs=zero" in capsys.readouterr().err


def test_a_job_without_data_is_refused_and_told_the_channels():
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge")
    with pytest.raises(LaunchError) as err:
        launch(spec, {}, wait=False, session=stubbed_session()[0])
    for words in ("{'voc'", "{'coco'", "{'train'", "data_s3_uri"):
        assert words in str(err.value)
    session, captured, _ = stubbed_session()
    launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge",
                   output_path="s3://detector-test-bucket/out/",
                   hyperparameters={"data_s3_uri": "s3://b/voc/"}), {}, wait=False, session=session)
    assert captured["HyperParameters"]["data_s3_uri"] == "s3://b/voc/"


OUT = "s3://detector-test-bucket/out/"  # else the SDK looks for its default bucket


def test_tensorboard_s3_uri_sets_the_jobs_tensorboard_output_config():
    session, captured, _ = stubbed_session()
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                   tensorboard_s3_uri="s3://detector-test-bucket/tb/run-1/")
    launch(spec, {"voc": "s3://b/voc/"}, wait=False, session=session)
    assert captured["TensorBoardOutputConfig"]["S3OutputPath"] == "s3://detector-test-bucket/tb/run-1/"
    session, captured, _ = stubbed_session()
    launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT), {"voc": "s3://b/voc/"},
           wait=False, session=session)
    assert "TensorBoardOutputConfig" not in captured


@pytest.mark.parametrize("changes, words", [
    (dict(tensorboard_s3_uri="/tmp/tb"), "expected an s3://bucket/prefix/ URI"),
    (dict(tensorboard_s3_uri="s3://b/tb/", instance_type="local"), "they come back in output.tar.gz"),
])
def test_a_tensorboard_s3_uri_that_cannot_work_is_refused(changes, words):
    session, _, _ = stubbed_session()
    spec = JobSpec(**dict(dict(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT), **changes))
    with pytest.raises(LaunchError, match=words):
        launch(spec, {"voc": "s3://b/voc/"}, wait=False, session=session)


def test_hyperparameters_over_a_config_file_are_checked_one_by_one():
    """The config file is in a channel the launcher does not read: the hyperparameters going over
    it are checked each on its own (names and values); the whole configuration by the job."""
    session, captured, _ = stubbed_session()
    # classes without dataset=coco would be refused on its own; the file may say dataset=coco.
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                   hyperparameters={"lr": 0.01, "classes": "cat,dog"})
    launch(spec, {"coco": "s3://b/coco/", "config": "s3://b/experiments/1/"}, wait=False, session=session)
    assert captured["HyperParameters"]["classes"] == "cat,dog"
    session, captured, _ = stubbed_session()
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                   hyperparameters={"config_file": "coco/experiment.yaml", "epochs": 3})
    launch(spec, {"coco": "s3://b/coco/"}, wait=False, session=session)
    assert captured["HyperParameters"]["config_file"] == "coco/experiment.yaml"
    for hyperparameters, words in (({"epochs": "ten"}, "epochs=ten: expected"),
                                   ({"wieght_decay": 0.1}, "did you mean 'weight_decay'")):
        with pytest.raises(LaunchError, match=words):
            launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                           hyperparameters=hyperparameters), {"config": "s3://b/c/"}, wait=False,
                   session=stubbed_session()[0])
    with pytest.raises(LaunchError, match="classes is only used with dataset=custom or coco"):
        launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                       hyperparameters={"classes": "cat,dog"}), {"voc": "s3://b/voc/"}, wait=False,
               session=stubbed_session()[0])


def test_a_manifest_channel_is_sent_as_a_built_in_algorithm_job_sends_it():
    from sagemaker_launch import manifest_inputs

    session, captured, stubber = stubbed_session()
    inputs = manifest_inputs({"train": "s3://labels/job/manifests/output/output.manifest",
                              "validation": "s3://labels/job/val.manifest"}, "shapes-job")
    launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge",
                   output_path="s3://detector-test-bucket/out/"), inputs, wait=False, session=session)
    stubber.assert_no_pending_responses()  # botocore checked the request against its model
    channels = {c["ChannelName"]: c for c in captured["InputDataConfig"]}
    assert channels["train"] == {
        "ChannelName": "train", "InputMode": "Pipe", "RecordWrapperType": "RecordIO",
        "ContentType": "application/x-recordio",
        "DataSource": {"S3DataSource": {
            "S3DataType": "AugmentedManifestFile",
            "S3Uri": "s3://labels/job/manifests/output/output.manifest",
            "S3DataDistributionType": "FullyReplicated",
            "AttributeNames": ["source-ref", "shapes-job", "shapes-job-metadata"]}}}
    assert channels["validation"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://labels/job/val.manifest"
    assert captured["HyperParameters"]["dataset"] == "manifest"  # checked as the job reads it


def test_a_manifest_without_its_metadata_needs_the_classes(capsys):
    from sagemaker_launch import manifest_inputs
    from sagemaker_launch.cli import main

    inputs = manifest_inputs({"train": "s3://labels/out.manifest"}, "boxes", with_metadata=False)
    assert inputs["train"].config["DataSource"]["S3DataSource"]["AttributeNames"] == ["source-ref", "boxes"]
    spec = JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge")
    session, captured, _ = stubbed_session()
    with pytest.raises(LaunchError, match="set the hyperparameter classes"):
        launch(spec, inputs, wait=False, session=session)
    assert captured == {}
    code = main(["--image", IMAGE, "--role", ROLE, "--instance-type", "ml.g5.xlarge",
                 "--manifest", "train=s3://labels/out.manifest", "--label-attribute", "boxes",
                 "--without-metadata"])
    assert code == 2 and "classes" in capsys.readouterr().err
    session, captured, _ = stubbed_session()
    launch(JobSpec(image_uri=IMAGE, role=ROLE, instance_type="ml.g5.xlarge", output_path=OUT,
                   hyperparameters={"classes": "circle,square"}), inputs, wait=False, session=session)
    assert captured["HyperParameters"]["classes"] == "circle,square"
    with pytest.raises(LaunchError, match="label attribute"):
        manifest_inputs({"train": "s3://labels/out.manifest"}, "")
    with pytest.raises(LaunchError, match="needs an s3:// URI"):
        manifest_inputs({"train": "file:///data/out.manifest"}, "boxes")
