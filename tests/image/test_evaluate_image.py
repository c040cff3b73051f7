"""Evaluation without training in the CPU image: `docker run IMAGE evaluate` on two ranks, and
the launcher's ``evaluate`` in SageMaker SDK v2 local mode (the image's `train` with
mode=evaluate). Both score a tiny model trained here on its own validation data: the mAP must be
the training job's validation mAP.

Needs a Docker engine and the CPU image (IMAGE, as tests/image/test_container.py)."""

import json
import os
import subprocess
import tarfile
import uuid

import pytest

from conftest import require_image
from test_container import IMAGE, ROOT, SDK_PYTHON, remove_compose_containers, sdk_environment
from test_evaluate import assert_same_scores, evaluation_job

pytestmark = [pytest.mark.docker_engine("container tests"), pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def image():
    return require_image(IMAGE, "image")


def test_docker_run_evaluate_on_two_ranks(image, trained, tmp_path):
    trained_base, validation = trained
    base = evaluation_job(tmp_path / "opt_ml", trained_base,
                          {"processes_per_host": "2", "num_workers": "0"})
    result = subprocess.run(["docker", "run", "--rm", "--shm-size", "1g", "-v", "%s:/opt/ml" % base,
                             image, "evaluate"], capture_output=True, text=True, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "world=2" in out and "[rank 1] evaluation: rank=1 detects 2 of the 4 image" in out
    with open(os.path.join(base, "model", "evaluation.json")) as handle:
        assert_same_scores(json.load(handle), validation)
    assert os.path.isfile(os.path.join(base, "model", "precision_recall.png"))


def test_sdk_local_mode_evaluate_through_the_launcher(image, trained, tmp_path):
    assert os.path.exists(SDK_PYTHON), "the SDK environment is missing: run `make sdk-venv`"
    trained_base, validation = trained
    tree = evaluation_job(tmp_path / "tree", trained_base, {})  # model.tar.gz and test data
    spec = {"image": image, "model_dir": os.path.join(tree, "input", "data", "model"),
            "test_dir": os.path.join(tree, "input", "data", "test"),
            "output_dir": str(tmp_path / "output"), "hyperparameters": {"num_workers": "0"}}
    (tmp_path / "output").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    project = "detector-test-%s" % uuid.uuid4().hex[:12]
    env = dict(sdk_environment(tmp_path), COMPOSE_PROJECT_NAME=project)
    try:
        result = subprocess.run([SDK_PYTHON, os.path.join(ROOT, "tests", "sdk_local_evaluate.py"),
                                 str(tmp_path / "spec.json")], capture_output=True, text=True,
                                timeout=1500, env=env, cwd=str(tmp_path))
    finally:
        remove_compose_containers(project)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    line = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")][-1]
    model_data = json.loads(line[len("RESULT "):])["model_data"]
    with tarfile.open(model_data[len("file://"):]) as tar:
        evaluation = json.load(tar.extractfile(tar.getmember("evaluation.json")))
        assert "validation_images.png" in tar.getnames()
    assert_same_scores(evaluation, validation)
    assert "dataset=custom recognised in channel 'test'" in out
