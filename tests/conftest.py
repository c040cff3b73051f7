import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)

# Small enough for 2 CPU cores: the project's ResNet-18 network, 128-pixel images.
TINY = {
    "network": "faster_rcnn_resnet18_v1b_voc",
    "dataset": "custom",
    "pretrained_base": "false",
    "short": "128",
    "max_size": "176",
    "lr": "0.02",
    "lr_decay_epoch": "10",
    "num_workers": "0",
    "log_interval": "2",
    "train_splits": "2007_trainval",
}


def make_job(base, hyperparameters, n_train=8, n_test=4, seed=0):
    """A SageMaker-style tree under ``base`` with a generated VOCdevkit in the 'voc' channel."""
    from frcnn_train.main import prepare_run_tree

    prepare_run_tree(str(base), dict(TINY, **hyperparameters), n_train=n_train, n_test=n_test,
                     n_train_2012=0, seed=seed)
    return str(base)


def run_rank_job(base, timeout=600, extra_env=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    return subprocess.run([os.path.join(BIN, "frcnn-train-job"), "--base-dir", base],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def job_dir(tmp_path):
    return tmp_path / "opt_ml"
