"""Unit tests of the small job-side modules: the environment snapshot, stop requests, errors,
atomic files, the model directory, the family registry and metric definitions."""

import os
import pickle
import re
import signal

import pytest

from detector_training import families
from detector_training.core.config import FAMILY_NETWORKS, NETWORKS, family_of, from_hyperparameters
from detector_training.core.distributed import SingleProcess, launched_by_horovod
from detector_training.core.files import atomic_save, atomic_write_text, write_json
from detector_training.core.model_dir import ModelDirectory
from detector_training.errors import ConfigError, DataError, failure_text_for
from detector_training.job.metrics import (METRIC_DEFINITIONS, TRAIN_METRICS, VALIDATION_SCORES,
                                           definitions_for)
from detector_training.job.sm_env import Environment
from detector_training.job.stop import RankStop, StopSignal, clear_stale_request


# --- the environment, read once -------------------------------------------------------------

def test_environment_snapshot_takes_the_process_environment_once(tmp_path):
    environ = {"SAGEMAKER_BASE_DIR": str(tmp_path), "FRCNN_WORK_DIR": "/scratch",
               "OMPI_COMM_WORLD_RANK": "3", "FRCNN_PRETRAINED_DIR": "/weights"}
    env = Environment.read(environ=environ)
    environ["FRCNN_WORK_DIR"] = "/changed-later"  # the snapshot does not follow
    assert env.paths.base == str(tmp_path)
    assert env.work_dir == "/scratch" and env.stop_file == "/scratch/stop-requested"
    assert env.rank_hint == 3 and env.baked_pretrained_dir == "/weights"
    assert env.pretrained_dirs == ["/weights"]


def test_environment_defaults_without_launcher_variables(tmp_path):
    env = Environment.read(str(tmp_path), environ={})
    assert env.work_dir == str(tmp_path / "work") and env.rank_hint == 0
    assert env.stop_file == str(tmp_path / "work" / "stop-requested")
    assert Environment.read(str(tmp_path), environ={"FRCNN_STOP_FILE": "/x/stop"}).stop_file == "/x/stop"


def test_hyperparameters_file_that_is_not_an_object(tmp_path):
    (tmp_path / "input" / "config").mkdir(parents=True)
    (tmp_path / "input" / "config" / "hyperparameters.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        Environment.read(str(tmp_path), environ={})


def test_horovod_is_detected_from_the_launcher_variables_only():
    assert not launched_by_horovod({})
    assert launched_by_horovod({"OMPI_COMM_WORLD_SIZE": "2"}) or launched_by_horovod({"HOROVOD_RANK": "0"})
    single = SingleProcess()
    assert single.allgather_object({"a": 1}, "x") == [{"a": 1}] and single.allreduce_sum([1, 2]) == [1.0, 2.0]


# --- stop requests ----------------------------------------------------------------------------

def test_launcher_signal_writes_the_stop_file_that_the_rank_reads(tmp_path):
    stop_file = str(tmp_path / "work" / "stop-requested")
    rank = RankStop(stop_file)
    launcher = StopSignal(stop_file)
    assert not rank.requested()
    previous = signal.getsignal(signal.SIGINT)
    try:
        launcher.install()
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, previous)
    assert launcher.since is not None and rank.requested()
    clear_stale_request(stop_file)
    assert not rank.requested()


def test_a_rank_signal_is_a_stop_request_without_a_file():
    rank = RankStop(None)
    try:
        rank.install()
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert rank.requested()


# --- errors -----------------------------------------------------------------------------------

def test_errors_say_cause_and_fix_and_survive_pickling():
    err = DataError("the split file x is missing.", "add it.")
    again = pickle.loads(pickle.dumps(err))
    assert failure_text_for(again) == failure_text_for(err)
    assert failure_text_for(err).startswith("DataError: the split file x is missing. Fix: add it.")
    text = failure_text_for(KeyError("boom"))
    assert "KeyError" in text and "Fix:" in text


# --- atomic files and the model directory ----------------------------------------------------

def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "config.json")
    write_json(path, {"a": 1})

    def broken(tmp):
        with open(tmp, "w") as handle:
            handle.write('{"half":')
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_save(path, broken)
    assert open(path).read() == '{\n "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["config.json"]
    atomic_write_text(path, "new")
    assert open(path).read() == "new" and oct(os.stat(path).st_mode & 0o777) == "0o644"


class _Net:
    def save_parameters(self, path):
        with open(path, "wb") as handle:
            handle.write(b"params")


class _Family:
    loss_names = ("a_loss",)

    def __init__(self):
        self.exported = None

    def export(self, config, classes, params_path, prefix, fitted):
        self.exported = (params_path, prefix, fitted)
        with open(prefix + "-symbol.json", "w") as handle:
            handle.write("{}")


def test_model_directory_holds_every_file_of_a_finished_job(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    validation = {"mAP": 0.5, "AP50": 0.5, "per_class": {"a": 0.5}, "images": 2, "epoch": 1}
    directory.save_best(_Net(), validation)
    family = _Family()
    directory.write_final(family=family, config=None, net=_Net(), classes=("a",),
                          effective_config={"epochs": 2}, fitted={"k": 1},
                          history=[{"epoch": 0, "a_loss": 1.0, "lr": 0.1, "mAP": 0.5}],
                          validation=validation)
    names = set(os.listdir(tmp_path / "model"))
    assert names >= {"model.params", "model-best.params", "validation-best.json", "classes.json",
                     "config.json", "history.json", "validation.json", "model-symbol.json",
                     "training_curves.png", "per_class_ap.md", "per_class_ap.csv"}
    assert not [n for n in names if n.startswith(".tmp")]
    assert family.exported == (str(tmp_path / "model" / "model.params"),
                               str(tmp_path / "model" / "model"), {"k": 1})


# --- families and metric definitions ---------------------------------------------------------

def test_every_network_has_a_family_and_config_names_them_all():
    assert set(NETWORKS) == {n for names in FAMILY_NETWORKS.values() for n in names}
    for network in NETWORKS:
        family = families.get(network)
        assert family.name == family_of(network)
        assert from_hyperparameters({"network": network, "dataset": "coco"}).family == family.name


def test_metric_definitions_name_every_familys_losses_metrics_and_scores():
    for family in families.all_families():
        assert TRAIN_METRICS[family.name] == family.log_names
        assert VALIDATION_SCORES[family.name] == family.score_names
        names = {d["Name"] for d in definitions_for(family.name)}
        assert {"validation:" + n for n in family.score_names} <= names
        line = "validation: epoch=3 images=24 time=1.0s " + " ".join(
            "%s=0.%d" % (name, i + 1) for i, name in enumerate(family.score_names))
        for i, name in enumerate(family.score_names):
            regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "validation:" + name)
            assert float(re.search(regex, line).group(1)) == pytest.approx(float("0.%d" % (i + 1)))
        line = "[Epoch 3] summary: time=1.0s speed=2.0 samples/s data_wait=1.0% lr=0.001 " + \
            " ".join("%s=0.%d" % (name, i + 1) for i, name in enumerate(family.log_names))
        for i, name in enumerate(family.log_names):
            regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "train:" + name)
            assert float(re.search(regex, line).group(1)) == pytest.approx(float("0.%d" % (i + 1)))


def test_an_unknown_network_names_the_choices():
    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"network": "faster_rcnn_nope"})
    assert "faster_rcnn_resnet50_v1b_voc" in str(err.value)
