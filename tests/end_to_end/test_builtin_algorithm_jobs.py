"""Whole jobs with the built-in Object Detection algorithm's hyperparameters, as its example
notebook sets them (at tiny sizes): with ``network`` they train that network."""

import json
import os
import re

from conftest import make_job, run_rank_job

# The example notebook's hyperparameters (object_detection_recordio_format.ipynb) with the sizes
# made tiny: batch, image shape, epochs, the generated data's 3 classes and 2 images, no
# downloaded weights.
NOTEBOOK_TINY = {"base_network": "resnet-50", "use_pretrained_model": "0", "num_classes": "3",
                 "mini_batch_size": "2", "epochs": "1", "learning_rate": "0.001",
                 "lr_scheduler_step": "3,6", "lr_scheduler_factor": "0.1", "optimizer": "sgd",
                 "momentum": "0.9", "weight_decay": "0.0005", "overlap_threshold": "0.5",
                 "nms_threshold": "0.45", "image_shape": "128", "label_width": "350",
                 "num_training_samples": "2"}
# What the generated data needs that the built-in algorithm has no name for.
DATA = {"dataset": "custom", "classes": "circle,square,triangle", "train_splits": "2007_trainval",
        "num_workers": "0", "log_interval": "1"}


def builtin_job(job_dir, hyperparameters):
    base = make_job(job_dir, {}, n_train=2, n_test=1)
    with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as handle:
        json.dump(hyperparameters, handle)
    return base


def read_json(*parts):
    with open(os.path.join(*parts)) as handle:
        return json.load(handle)


def test_the_notebooks_hyperparameters_with_a_network_train_that_network(job_dir):
    # 32-pixel images: the ResNet-50 C4 head runs a whole stage per proposal (90 here, not 300).
    base = builtin_job(job_dir, dict(NOTEBOOK_TINY, network="faster_rcnn_resnet50_v1b_voc",
                                     rcnn_num_samples="16", image_shape="32", **DATA))
    result = run_rank_job(base)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "built-in algorithm's hyperparameters: learning_rate=0.001 -> lr" in out
    assert "built-in algorithm's hyperparameters: label_width=350 (noted:" in out
    assert re.search(r"world: rank=0 size=1 .* family=faster_rcnn", out)
    # where each value came from: the job's, the built-in algorithm's defaults for the rest
    assert re.search(r"configuration: from the job's hyperparameters: .*\bepochs=1\b", out)
    assert re.search(r"configuration: from the built-in algorithm's default: .*\bearly_stopping=false", out)
    config = read_json(base, "model", "config.json")
    assert config["network"] == "faster_rcnn_resnet50_v1b_voc"
    assert (config["global_batch"], config["effective_lr"], config["short"]) == (2, 0.001, [32])
    assert (config["lr_decay_epoch"], config["wd"], config["pretrained_base"]) == ([3, 6], 0.0005, False)
    assert (config["nms_threshold"], config["num_classes"], config["optimizer"]) == (0.45, 3, "sgd")
    assert "base_network" not in config and "learning_rate" not in config  # replays in our names
    # the built-in algorithm's objective and training metric names find their values in the log
    from detector_training.job.metrics import METRIC_DEFINITIONS

    regexes = {d["Name"]: d["Regex"] for d in METRIC_DEFINITIONS}
    for name in ("validation:mAP", "train:throughput", "train:progress"):
        assert re.search(regexes[name], out), name
    assert float(re.search(regexes["train:progress"], out).group(1)) == 100.0


def test_the_notebooks_hyperparameters_without_a_network_train_the_ssd_the_algorithm_runs(job_dir):
    base = builtin_job(job_dir, dict(NOTEBOOK_TINY, **DATA))
    result = run_rank_job(base)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "built-in algorithm's hyperparameters: network=ssd_512_resnet50_v1_custom (the built-in " \
           "algorithm's SSD for base_network=resnet-50, image_shape=128)" in out
    assert re.search(r"world: rank=0 size=1 .* family=ssd", out)
    config = read_json(base, "model", "config.json")
    assert (config["network"], config["short"], config["nms_threshold"]) == \
        ("ssd_512_resnet50_v1_custom", [128], 0.45)
    from detector_training.job.metrics import METRIC_DEFINITIONS

    # the built-in algorithm's metric names, as a tuning job written for it reads them
    regexes = {d["Name"]: d["Regex"] for d in METRIC_DEFINITIONS}
    for name in ("validation:mAP", "train:cross_entropy", "train:smooth_l1", "train:throughput",
                 "train:progress"):
        assert re.search(regexes[name], out), name
    for name in ("model-symbol.json", "model-0000.params"):
        assert os.path.isfile(os.path.join(base, "model", name))


def test_num_classes_that_the_data_does_not_have_fails_naming_its_classes(job_dir):
    data = {k: v for k, v in DATA.items() if k != "classes"}  # the classes the data has
    base = builtin_job(job_dir, dict(NOTEBOOK_TINY, network="faster_rcnn_resnet50_v1b_voc",
                                     num_classes="20", **data))
    result = run_rank_job(base)
    assert result.returncode != 0
    with open(os.path.join(base, "output", "failure")) as handle:
        failure = handle.read()
    found = re.match(r"ConfigError: num_classes=20, but the training data has (\d) classes \(([a-z,]+)\)\.",
                     failure)
    assert found, failure
    assert "Fix: set num_classes=%s" % found.group(1) in failure
