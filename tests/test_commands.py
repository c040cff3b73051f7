"""What each command runs (commands.py): the console scripts and the image's entrypoint/ call these."""

import os
import subprocess
import sys

from conftest import BIN, make_job, train_env
from detector_training import commands


def test_mpirun_runs_the_rank_module_with_this_interpreter():
    assert commands.rank_program() == [sys.executable, "-m", "detector_training.rank"]


def test_train_runs_the_job_in_the_tree_and_reports_a_bad_hyperparameter(tmp_path):
    base = make_job(tmp_path / "opt_ml", {"epochs": "-1"}, n_train=2, n_test=1)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=300,
                            env=train_env(base))
    assert result.returncode != 0
    failure = open(os.path.join(base, "output", "failure")).read()
    assert failure.startswith("ConfigError: invalid hyperparameters: epochs=-1"), failure


def test_the_one_rank_command_takes_the_tree_from_its_argument(tmp_path):
    base = make_job(tmp_path / "opt_ml", {"epochs": "-1"}, n_train=2, n_test=1)
    result = subprocess.run([os.path.join(BIN, "detector-train-job"), "--base-dir", base],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, SAGEMAKER_BASE_DIR=str(tmp_path / "elsewhere")))
    assert result.returncode == 1
    assert os.path.isfile(os.path.join(base, "output", "failure"))
    assert not os.path.exists(tmp_path / "elsewhere")
