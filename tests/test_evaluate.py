"""mode=evaluate: a trained model scored on labelled data without training (evaluate.py).

The whole-job tests train one tiny Faster R-CNN (VOCdevkit tree, dataset=custom), then evaluate
its model on its own validation data through ``train`` (mode=evaluate, model.tar.gz in the model
channel, one rank) and through ``evaluate`` (two ranks under mpirun, the model directory in the
channel): the mAP and every class's AP must be the training job's validation numbers.
"""

import json
import logging
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import BIN, trained_job
from detector_training import evaluate, families
from detector_training.core.eval_report import FILES as REPORT_FILES
from detector_training.data import formats
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters


def evaluation_job(root, trained_base, hyperparameters, model_as="tar.gz", data_channel="test"):
    """An /opt/ml tree for an evaluation job: the trained model in the model channel (SageMaker's
    model.tar.gz of the model directory, or the directory's files), the training job's data in
    ``data_channel``."""
    root = str(root)
    os.makedirs(os.path.join(root, "input", "config"))
    model_channel = os.path.join(root, "input", "data", "model")
    model_dir = os.path.join(trained_base, "model")
    if model_as == "tar.gz":
        os.makedirs(model_channel)
        with tarfile.open(os.path.join(model_channel, "model.tar.gz"), "w:gz") as tar:
            for name in sorted(os.listdir(model_dir)):
                tar.add(os.path.join(model_dir, name), arcname=name)
    else:
        shutil.copytree(model_dir, model_channel)
    shutil.copytree(os.path.join(trained_base, "input", "data", "voc"),
                    os.path.join(root, "input", "data", data_channel))
    with open(os.path.join(root, "input", "config", "hyperparameters.json"), "w") as handle:
        json.dump(hyperparameters, handle)
    return root


def run_command(command, base, timeout=600):
    return subprocess.run([os.path.join(BIN, command)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, SAGEMAKER_BASE_DIR=base,
                                                    PYTHONUNBUFFERED="1"))


def failed_job_reason(base):
    """Run the job, which must fail; its output/failure text."""
    result = run_command("train", base)
    assert result.returncode != 0, result.stdout[-2000:]
    with open(os.path.join(base, "output", "failure")) as handle:
        return handle.read()


def read_evaluation(base):
    with open(os.path.join(base, "model", "evaluation.json")) as handle:
        return json.load(handle)


def assert_same_scores(evaluation, validation):
    assert evaluation["images"] == validation["images"] == 4
    assert evaluation["mAP"] == pytest.approx(validation["mAP"], abs=1e-9)
    assert evaluation["mAP"] > 0  # a model that finds something: equal numbers mean something
    assert evaluation["per_class"] == pytest.approx(validation["per_class"], abs=1e-9)


# --- whole jobs ----------------------------------------------------------------------------------

def test_train_with_mode_evaluate_scores_a_model_tarball_as_its_training_validated(trained, tmp_path):
    trained_base, validation = trained
    with open(os.path.join(trained_base, "model", "config.json")) as handle:
        assert json.load(handle)["world_size"] == 2  # a model of a job on two ranks
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate", "num_workers": "0"})
    result = run_command("train", base)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    evaluation = read_evaluation(base)
    assert_same_scores(evaluation, validation)
    assert evaluation["classes"] == ["circle", "square", "triangle"]
    assert evaluation["dataset"] == "custom" and evaluation["model"] == "model.params"
    assert "dataset=custom recognised in channel 'test'" in result.stdout
    for name in REPORT_FILES:  # the pictures and tables a training job writes
        assert os.path.getsize(os.path.join(base, "model", name)) > 0, name
    assert not os.path.exists(os.path.join(base, "model", "model.params"))  # nothing trained
    assert not os.path.exists(os.path.join(base, "output", "failure"))


def test_evaluate_on_two_ranks_shards_the_images_and_scores_them_together(trained, tmp_path):
    trained_base, validation = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base,
                          {"processes_per_host": "2", "num_workers": "0"}, model_as="directory",
                          data_channel="validation")
    result = run_command("evaluate", base)  # the command sets mode=evaluate itself
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "world=2" in out
    assert sorted(re.findall(r"\[rank (\d)\] evaluation: rank=\d detects 2 of the 4 image", out)) == ["0", "1"]
    assert_same_scores(read_evaluation(base), validation)
    assert "dataset=custom recognised in channel 'validation'" in out


def test_a_stop_request_ends_an_evaluation_before_it_scores_and_says_so(trained, tmp_path):
    """SIGTERM (the launcher's stop file, here already there: the stop at the first image) ends
    mode=evaluate at the next image, as it ends training at the next step: the rank's own error,
    nothing written, within seconds instead of SageMaker's SIGKILL 120 s later."""
    from conftest import run_rank_job

    trained_base, _validation = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate", "num_workers": "0"})
    stop_file = tmp_path / "stop-requested"
    stop_file.write_text("")
    result = run_rank_job(base, timeout=300, extra_env={"DETECTOR_STOP_FILE": str(stop_file)})
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    with open(os.path.join(base, "output", "failure")) as handle:
        reason = handle.read()
    assert reason.startswith("Stopped: the evaluation was stopped before it scored all 4 image(s) (a stop was "
                             "requested after 0 image(s)"), reason
    assert "run the evaluation again" in reason
    assert not os.path.exists(os.path.join(base, "model", "evaluation.json"))


def test_classes_that_are_not_the_models_fail_naming_both_lists(trained, tmp_path):
    trained_base, _ = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate", "num_workers": "0"},
                          model_as="directory")
    with open(os.path.join(base, "input", "data", "model", "classes.json"), "w") as handle:
        json.dump(["cat", "dog", "bird"], handle)  # a model of other classes, same head size
    failure = failed_job_reason(base)
    assert "the test data's classes (circle, square, triangle) do not match the model's (cat, dog, " \
           "bird)" in failure, failure
    assert not os.path.exists(os.path.join(base, "model", "evaluation.json"))


def test_a_classes_json_that_does_not_fit_the_network_fails_as_a_data_error_naming_the_channel(trained, tmp_path):
    trained_base, _ = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate", "num_workers": "0"},
                          model_as="directory")
    with open(os.path.join(base, "input", "data", "model", "classes.json"), "w") as handle:
        json.dump(["circle", "square", "triangle", "hexagon"], handle)  # the network predicts 3
    failure = failed_job_reason(base)
    assert failure.startswith("DataError: the 'model' channel's model: classes.json lists 4 classes but "
                              "the network in model-symbol.json predicts 3. Fix: "), failure
    assert "\n" not in failure.strip() and "Traceback" not in failure, failure
    assert not os.path.exists(os.path.join(base, "model", "evaluation.json"))


def test_without_a_model_channel_the_job_fails_saying_what_to_put_there(trained, tmp_path):
    trained_base, _ = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate"})
    shutil.rmtree(os.path.join(base, "input", "data", "model"))
    assert "has no 'model' channel" in failed_job_reason(base)


@pytest.mark.parametrize("damage", ["truncated", "another-networks"])
def test_parameters_that_do_not_load_fail_as_a_data_error_naming_the_file(trained, tmp_path, damage):
    import mxnet as mx

    trained_base, _ = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base, {"mode": "evaluate", "num_workers": "0"},
                          model_as="directory")
    params = os.path.join(base, "input", "data", "model", "model.params")
    if damage == "truncated":
        with open(params, "r+b") as handle:
            handle.truncate(os.path.getsize(params) // 2)
    else:
        mx.nd.save(params, {"conv0_weight": mx.nd.ones((2, 3, 3, 3))})
    failure = failed_job_reason(base)
    assert failure.startswith("DataError: cannot load model.params from the 'model' channel into "
                              "faster_rcnn"), failure
    assert "Traceback" not in failure and "File \"" not in failure and "\n" not in failure.strip(), failure
    assert not os.path.exists(os.path.join(base, "model", "evaluation.json"))


# --- the pieces ----------------------------------------------------------------------------------

def test_the_test_channel_is_preferred_to_validation_and_one_of_them_is_needed(tmp_path):
    (tmp_path / "validation").mkdir()
    assert formats.evaluation_channel(str(tmp_path)) == ("validation", str(tmp_path / "validation"))
    (tmp_path / "test").mkdir()
    assert formats.evaluation_channel(str(tmp_path)) == ("test", str(tmp_path / "test"))
    with pytest.raises(DataError, match="neither a 'test' nor a 'validation' channel"):
        formats.evaluation_channel(str(tmp_path / "nothing"))


def test_the_staged_channels_show_the_test_data_as_training_and_validation(tmp_path):
    (tmp_path / "data" / "test").mkdir(parents=True)
    (tmp_path / "data" / "test" / "labels.json").write_text("{}")
    staged = formats.stage_evaluation_data(str(tmp_path / "data"), str(tmp_path))
    for name in ("train", "validation"):
        assert os.listdir(os.path.join(staged, name)) == ["labels.json"]


@pytest.mark.parametrize("network, short, test_short, expected", [
    ("yolo3_mobilenet0.25_voc", [96, 128, 160], 128, (128,)),  # multi-scale: its validation size
    ("ssd_512_mobilenet1.0_voc", [128], 128, (128,)),
    ("faster_rcnn_resnet18_v1b_voc", [96, 128], 128, (96, 128)),  # R-CNN: its scales, last tests
    ("yolo3_mobilenet0.25_voc", [96], None, (96,)),  # a model from before test_short
])
def test_a_model_is_scored_at_the_sizes_it_validated_at(network, short, test_short, expected):
    model = evaluate.EvaluatedModel("m", "m/model.params", ["a", "b"],
                                    {"network": network, "short": short, "test_short": test_short,
                                     "max_size": 1000, "multi_scale": True})
    base = from_hyperparameters({"dataset": "custom"})
    config = evaluate.evaluation_config(base, model)
    assert config.network == network and config.short == expected
    families.get(network).check_config(config)  # the family takes it


def test_a_subset_of_the_models_classes_is_scored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="detector_training"):
        assert evaluate.check_classes(["b"], ["a", "b", "c"]) == ["a", "c"]
    assert "the test data has 1 of the model's 3 classes; a, c have no labelled object" in caplog.text
    assert evaluate.check_classes(["a", "b"], ["a", "b"]) == []
    with pytest.raises(DataError, match=r"\(a, x\) do not match the model's \(a, b\): x is not"):
        evaluate.check_classes(["a", "x"], ["a", "b"])


def test_model_files_come_from_a_directory_or_a_tarball_and_prefer_the_final_params(trained, tmp_path):
    trained_base, _ = trained
    model_dir = os.path.join(trained_base, "model")
    found = evaluate.model_files(model_dir, str(tmp_path))
    assert found.params == os.path.join(model_dir, "model.params")
    assert found.classes == ["circle", "square", "triangle"]
    assert found.config["network"] == "faster_rcnn_resnet18_v1b_voc"
    channel = tmp_path / "channel"
    channel.mkdir()
    with tarfile.open(channel / "model.tar.gz", "w:gz") as tar:
        tar.add(model_dir, arcname="inner")  # a folder inside the archive
    found = evaluate.model_files(str(channel), str(tmp_path))
    assert os.path.basename(found.params) == "model.params" and found.directory.endswith("inner")
    assert not os.path.exists(os.path.join(found.directory, "history.json"))  # only what is read
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no model"):
        evaluate.model_files(str(tmp_path / "empty"), str(tmp_path))


def test_data_in_another_format_with_a_subset_of_the_classes_is_scored_with_a_warning(trained, tmp_path):
    import exports

    trained_base, _ = trained
    base = str(tmp_path / "opt_ml")
    exports.job(base, {"mode": "evaluate", "num_workers": "0"},
                {"test": lambda folder: exports.ultralytics_yolo(folder, train=2, val=3)})
    shutil.copytree(os.path.join(trained_base, "model"), os.path.join(base, "input", "data", "model"))
    result = run_command("train", base)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "dataset=yolo recognised in channel 'test'" in result.stdout
    assert "the test data has 2 of the model's 3 classes; triangle has no labelled object" in result.stdout
    evaluation = read_evaluation(base)
    assert evaluation["dataset"] == "yolo" and evaluation["classes_without_data"] == ["triangle"]
    assert evaluation["images"] == 3  # the export's validation split, as a training job validates
    assert set(evaluation["per_class"]) == {"circle", "square", "triangle"}
    assert os.path.isfile(os.path.join(base, "model", "precision_recall.png"))


def test_a_format_with_fixed_classes_takes_no_class_list_and_needs_the_models_to_be_its_own():

    voc, custom = (from_hyperparameters({"dataset": name}) for name in ("voc", "custom"))
    assert not evaluate.takes_class_list(voc)
    assert evaluate.takes_class_list(custom)
    evaluate.check_fixed_classes(["cat", "dog"], ["cat", "dog"])
    with pytest.raises(DataError, match=r"classes \(cat, dog\) do not match the model's \(dog, cat\)"):
        evaluate.check_fixed_classes(["cat", "dog"], ["dog", "cat"])  # label rows index the order


def test_coco_format_data_is_scored_by_cocos_metric_as_its_training_validated(tmp_path):
    """COCO-format data (recognised in the test channel): the COCO mAP of the training job."""
    hyperparameters = {"dataset": "coco", "train_splits": "instances_train2017",
                       "val_splits": "instances_val2017", "epochs": "1", "batch_size": "2"}
    trained_base = trained_job(tmp_path / "job", hyperparameters, n_train=4, n_test=2)
    with open(os.path.join(trained_base, "model", "validation.json")) as handle:
        validation = json.load(handle)
    base = str(tmp_path / "opt_ml")
    os.makedirs(os.path.join(base, "input", "config"))
    shutil.copytree(os.path.join(trained_base, "model"), os.path.join(base, "input", "data", "model"))
    (channel,) = os.listdir(os.path.join(trained_base, "input", "data"))
    shutil.copytree(os.path.join(trained_base, "input", "data", channel),
                    os.path.join(base, "input", "data", "test"))
    with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as handle:
        json.dump({"mode": "evaluate", "num_workers": "0", "val_splits": "instances_val2017"}, handle)
    result = run_command("train", base)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "dataset=coco recognised in channel 'test'" in result.stdout
    evaluation = read_evaluation(base)
    assert evaluation["dataset"] == "coco" and evaluation["images"] == validation["images"] == 2
    assert evaluation["mAP"] == pytest.approx(validation["mAP"], abs=1e-9)
    assert evaluation["AP50"] == pytest.approx(validation["AP50"], abs=1e-9)
    assert os.path.isfile(os.path.join(base, "model", "ap_by_size.csv"))


def test_a_models_config_value_that_does_not_parse_is_a_data_error_naming_it():
    model = evaluate.EvaluatedModel("m", "m/model.params", ["a", "b"],
                                    {"network": "faster_rcnn_resnet18_v1b_voc", "short": "tall"})
    with pytest.raises(DataError, match=r"config.json has short=\"tall\": expected"):
        evaluate.evaluation_config(from_hyperparameters({"dataset": "custom"}), model)
