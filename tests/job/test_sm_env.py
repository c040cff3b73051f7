"""The /opt/ml and process-environment snapshot (job/sm_env.py), read once."""


import os

import pytest
from detector_training.errors import ConfigError
from detector_training.job.sm_env import Environment


def test_environment_snapshot_takes_the_process_environment_once(tmp_path):
    environ = {"SAGEMAKER_BASE_DIR": str(tmp_path), "DETECTOR_WORK_DIR": "/scratch",
               "OMPI_COMM_WORLD_RANK": "3", "DETECTOR_PRETRAINED_DIR": "/weights"}
    env = Environment.read(environ=environ)
    environ["DETECTOR_WORK_DIR"] = "/changed-later"  # the snapshot does not follow
    assert env.paths.base == str(tmp_path)
    assert env.work_dir == "/scratch" and env.stop_file == "/scratch/stop-requested"
    assert env.rank_hint == 3 and env.baked_pretrained_dir == "/weights"
    assert env.pretrained_dirs == ["/weights"]


def test_environment_defaults_without_launcher_variables(tmp_path):
    env = Environment.read(str(tmp_path), environ={})
    assert env.work_dir == str(tmp_path / "work") and env.rank_hint == 0
    assert env.stop_file == str(tmp_path / "work" / "stop-requested")
    assert Environment.read(str(tmp_path), environ={"DETECTOR_STOP_FILE": "/x/stop"}).stop_file == "/x/stop"


def test_hyperparameters_file_that_is_not_an_object(tmp_path):
    (tmp_path / "input" / "config").mkdir(parents=True)
    (tmp_path / "input" / "config" / "hyperparameters.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        Environment.read(str(tmp_path), environ={})



def test_the_old_setting_names_still_work_for_one_release_with_a_warning(tmp_path, caplog):
    from detector_training import settings

    settings._warned.clear()
    old = Environment.read(str(tmp_path), environ={"FRCNN_WORK_DIR": "/old", "FRCNN_STOP_FILE": "/old/stop"})
    with caplog.at_level("WARNING"):
        assert old.work_dir == "/old" and old.stop_file == "/old/stop"
    assert "FRCNN_WORK_DIR is deprecated" in caplog.text and "set DETECTOR_WORK_DIR instead" in caplog.text
    both = Environment.read(str(tmp_path), environ={"FRCNN_WORK_DIR": "/old", "DETECTOR_WORK_DIR": "/new"})
    assert both.work_dir == "/new"  # the new name wins


def test_configuration_files_that_lie_are_config_errors_naming_the_file(tmp_path):
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text("{\"a\": " + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(ConfigError, match="hyperparameters.json is not usable JSON: it is nested more than 64"):
        Environment.read(str(tmp_path), environ={})
    (config / "hyperparameters.json").write_text("{}")
    (config / "resourceconfig.json").write_text("[\"algo-1\"]")
    with pytest.raises(ConfigError, match="resourceconfig.json must hold a JSON object"):
        Environment.read(str(tmp_path), environ={})
    (config / "resourceconfig.json").unlink()
    os.mkfifo(str(config / "inputdataconfig.json"))  # no writer: an open that blocks would hang here
    with pytest.raises(ConfigError, match="inputdataconfig.json is not a regular file"):
        Environment.read(str(tmp_path), environ={})
