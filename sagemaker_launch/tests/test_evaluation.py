"""evaluate(): the CreateTrainingJob request of an evaluation job (botocore's Stubber, as
test_request.py); compare(): two real evaluation.json files side by side.

The two files in evaluations/ are what the container's evaluation job wrote (tests/test_evaluate.py
runs the same jobs): one tiny Faster R-CNN scored on a generated VOCdevkit tree (devkit/) and on a
generated Ultralytics YOLO export holding two of its three classes (yolo/: triangle has no
labelled object, so its AP is NaN, as the job writes it)."""

import json
import math
import os

import pytest
from PIL import Image

from sagemaker_launch import LaunchError, compare, evaluate, read_evaluation
from sagemaker_launch.cli import main as cli_main
from sagemaker_launch.evaluation import comparison_rows, comparison_table
from test_request import IMAGE, ROLE, stubbed_session

HERE = os.path.dirname(os.path.abspath(__file__))
DEVKIT = os.path.join(HERE, "evaluations", "devkit", "evaluation.json")
YOLO = os.path.join(HERE, "evaluations", "yolo")  # the folder holding it


def test_evaluate_sends_a_mode_evaluate_job_with_the_model_and_test_channels():
    session, captured, stubber = stubbed_session()
    evaluate("s3://detector-test-bucket/job/output/model.tar.gz", "s3://detector-test-bucket/test/",
             IMAGE, ROLE, "ml.g5.xlarge", hyperparameters={"dataset": "yolo"}, wait=False,
             session=session, output_path="s3://detector-test-bucket/evaluations/")
    stubber.assert_no_pending_responses()
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in captured["InputDataConfig"]}
    assert channels == {"model": "s3://detector-test-bucket/job/output/model.tar.gz",
                        "test": "s3://detector-test-bucket/test/"}
    hps = captured["HyperParameters"]
    assert hps["mode"] == "evaluate" and hps["dataset"] == "yolo" and hps["processes_per_host"] == "1"
    assert captured["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert captured["TrainingJobName"].startswith("detector-evaluate")
    assert captured["OutputDataConfig"]["S3OutputPath"] == "s3://detector-test-bucket/evaluations/"


@pytest.mark.parametrize("model, test, hps, words", [
    ("", "s3://b/test/", {}, "evaluate needs the model"),
    ("s3://b/model.tar.gz", "s3://b/test/", {"mode": "train"}, "drop mode=train"),
    ("s3://b/model.tar.gz", "s3://b/test/", {"val_fraction": "2"}, "val_fraction"),
])
def test_evaluate_refuses_what_cannot_work_before_anything_is_sent(model, test, hps, words):
    session, captured, _ = stubbed_session()
    with pytest.raises(LaunchError, match=words):
        evaluate(model, test, IMAGE, ROLE, "ml.g5.xlarge", hyperparameters=hps, wait=False, session=session)
    assert not captured


def test_detector_launch_evaluate_sends_the_same_request(monkeypatch, capsys):
    session, captured, stubber = stubbed_session()
    import sagemaker_launch.job as job

    real = job.build_estimator
    monkeypatch.setattr(job, "build_estimator", lambda spec, _session=None, **kw: real(spec, session, **kw))
    code = cli_main(["evaluate", "--model", "s3://b/m/model.tar.gz", "--test", "s3://b/t/", "--image", IMAGE,
                     "--role", ROLE, "--instance-type", "ml.g5.xlarge", "--hp", "dataset=custom",
                     "--hp", "classes=cat,dog", "--output-path", "s3://b/evaluations/", "--no-wait"])
    assert code == 0, capsys.readouterr().err
    stubber.assert_no_pending_responses()
    assert captured["HyperParameters"]["mode"] == "evaluate"
    assert captured["HyperParameters"]["classes"] == "cat,dog"
    assert json.loads(capsys.readouterr().out)["job_name"].startswith("detector-evaluate")


def test_compare_prints_two_real_evaluations_side_by_side_and_draws_them(tmp_path, capsys):
    devkit, yolo = read_evaluation(DEVKIT), read_evaluation(YOLO)
    rows = compare(DEVKIT, YOLO, output=str(tmp_path / "compare.png"), labels=("devkit", "yolo"))
    names = [r[0] for r in rows]
    assert names == ["mAP", "circle", "square", "triangle"]
    mean = rows[0]
    assert mean[1] == devkit["mAP"] and mean[2] == yolo["mAP"]
    assert mean[3] == pytest.approx(yolo["mAP"] - devkit["mAP"])
    circle = rows[1]
    assert circle[3] == pytest.approx(yolo["per_class"]["circle"] - devkit["per_class"]["circle"])
    assert math.isnan(yolo["per_class"]["triangle"])  # as the job wrote it
    assert rows[3][2] is None and rows[3][3] is None  # no AP: no difference
    printed = capsys.readouterr().out
    assert printed.startswith("| class | devkit | yolo | difference |")
    assert "| triangle | %.4f | n/a | n/a |" % devkit["per_class"]["triangle"] in printed
    assert "| circle | %.4f | %.4f | %+.4f |" % (devkit["per_class"]["circle"], yolo["per_class"]["circle"],
                                                 circle[3]) in printed
    with Image.open(tmp_path / "compare.png") as image:
        assert image.format == "PNG" and image.size[0] == 720
        assert len(set(image.getdata())) > 2  # bars and text, not a blank page


def test_a_class_only_one_evaluation_has_is_listed_without_a_difference():
    a = {"mAP": 0.5, "per_class": {"cat": 0.5}}
    b = {"mAP": 0.25, "per_class": {"cat": 0.25, "dog": 0.75}}
    assert comparison_rows(a, b) == [("mAP", 0.5, 0.25, -0.25), ("cat", 0.5, 0.25, -0.25),
                                     ("dog", None, 0.75, None)]
    assert "| dog | n/a | 0.7500 | n/a |" in comparison_table(comparison_rows(a, b))


def test_compare_from_the_command_line_and_what_is_not_an_evaluation(tmp_path, capsys):
    assert cli_main(["compare", DEVKIT, YOLO, "--output", str(tmp_path / "c.png")]) == 0
    assert "| mAP |" in capsys.readouterr().out and (tmp_path / "c.png").is_file()
    (tmp_path / "validation.json").write_text(json.dumps({"mAP": 0.1}))
    assert cli_main(["compare", str(tmp_path / "validation.json"), YOLO]) == 2
    assert "is not an evaluation job's evaluation.json" in capsys.readouterr().err
    assert cli_main(["compare", str(tmp_path / "nothing"), YOLO]) == 2
    assert "no evaluation.json" in capsys.readouterr().err
