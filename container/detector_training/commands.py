"""The commands, wired at the top floor: what each console script (container/pyproject.toml) and
each executable in the repository's ``entrypoint/`` runs.

``train`` is the launcher (job/launcher.py) given the rank's job (main.py) to run in-process for
one rank, and the module mpirun starts on every rank for more (rank.py); the launcher, a floor
below, never imports them. ``serve`` is the inference server (serve/server.py).
"""

import argparse
import sys

from detector_training.job import demo, launcher
from detector_training.main import job_main
from detector_training.serve.server import main as serve_main


def rank_program():
    """The argv mpirun runs on every rank."""
    return [sys.executable, "-m", "detector_training.rank"]


def train_job():
    """The job on this host, as SageMaker's ``docker run IMAGE train`` runs it; the exit code."""
    return launcher.main(job_main, rank_program())


def train():
    """``train`` (``entrypoint/train`` in the image)."""
    sys.exit(train_job())


def evaluate():
    """``evaluate`` (``entrypoint/evaluate`` in the image): ``train`` with ``mode=evaluate``,
    whatever the hyperparameters say (evaluate.py)."""
    import os

    from detector_training import settings

    os.environ[settings.name(settings.MODE)] = "evaluate"  # read by every rank (load_config)
    sys.exit(train_job())


def serve():
    """``serve`` (``entrypoint/serve`` in the image): SageMaker's ``docker run IMAGE serve`` for
    endpoints and batch transform."""
    sys.exit(serve_main())


def run():
    """``detector-run`` (``make run``): generated data, then the same job as ``train``."""
    sys.exit(demo.run_cli(train_job))


def train_one_rank(argv=None):
    """``detector-train-job``: one rank of the job in a SageMaker-style tree, no launcher."""
    parser = argparse.ArgumentParser(
        description="Run one rank of the training job in a SageMaker-style directory tree.")
    parser.add_argument("--base-dir", default=None,
                        help="the /opt/ml root (default: $SAGEMAKER_BASE_DIR or /opt/ml)")
    args = parser.parse_args(argv)
    sys.exit(job_main(args.base_dir))
