"""One mpirun rank (rank.py, ``python -m detector_training.rank``): the rank's job in the tree that
$SAGEMAKER_BASE_DIR names, its exit code the process's, the failure file written once."""

import os
import subprocess
import sys

from conftest import make_job, train_env


def test_a_rank_that_fails_exits_non_zero_with_the_reason_in_the_failure_file(tmp_path):
    base = make_job(tmp_path / "opt_ml", {"lr": "fast"}, n_train=2, n_test=1)
    result = subprocess.run([sys.executable, "-m", "detector_training.rank"], capture_output=True,
                            text=True, timeout=300, env=train_env(base))
    assert result.returncode == 1, result.stdout[-2000:]
    failure = open(os.path.join(base, "output", "failure")).read()
    assert failure.startswith("ConfigError: invalid hyperparameters: lr=fast") and "Fix:" in failure
    assert "job failed: ConfigError" in result.stdout
