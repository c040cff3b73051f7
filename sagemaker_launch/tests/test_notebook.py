"""The example notebook runs top to bottom in SageMaker local mode with the CPU image: train, look
at the result, run the job's ONNX file here without MXNet, evaluate the model on a second data set
and compare, deploy, predict one image, draw it, delete the endpoint; the ONNX file answers what
the endpoint answers."""

import os
import re
import subprocess
import uuid

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.environ.get("IMAGE", "detector-training:cpu")


# One detection as the notebook prints it: class, score, box rounded to pixels.
DETECTION = re.compile(r"^(circle|square|triangle) +([01]\.\d\d) \[(\d+), (\d+), (\d+), (\d+)\]$", re.M)


def code_cell(nb, text):
    """The one code cell whose source holds ``text``."""
    found = [cell for cell in nb.cells if cell.cell_type == "code" and text in cell.source]
    assert len(found) == 1, "%d code cells hold %r" % (len(found), text)
    return found[0]


def stream_text(cell, names=("stdout", "stderr")):
    """What the cell printed (on ``names``)."""
    return "".join(o.get("text", "") for o in cell.outputs
                   if o.get("output_type") == "stream" and o.get("name") in names)


def detections(text):
    """(class, score, box) of each detection line in ``text``, in order."""
    return [(m[0], float(m[1]), [int(v) for v in m[2:]]) for m in DETECTION.findall(text)]


def assert_same_detections(onnx_text, served_text):
    """The ONNX file's detections (detect_onnx, here) are the endpoint's (serve, in the image): 1 to
    5, each with its own of the same class, score within 0.01 and box within 1 pixel as printed, in
    any order (the tiny model's scores lie 0.0003 apart: two may trade places)."""
    onnx, served = detections(onnx_text), detections(served_text)
    assert len(onnx) == len(onnx_text.splitlines()), onnx_text  # it prints the detections, only them
    assert 1 <= len(served) <= 5, served_text[-3000:]  # at most max_detections, with class names
    assert len(onnx) == len(served), (onnx_text[-3000:], served_text[-3000:])
    left = list(served)
    for name, score, box in onnx:
        same = [d for d in left if d[0] == name and abs(d[1] - score) <= 0.01 + 1e-9
                and max(abs(a - b) for a, b in zip(d[2], box)) <= 1]
        assert same, ((name, score, box), onnx, served)
        left.remove(same[0])


def image_present():
    try:
        return subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.docker_engine("notebook test")
@pytest.mark.timeout(3600)  # training and an endpoint in local mode, 1200 s per cell
def test_example_notebook_executes_in_local_mode(tmp_path, monkeypatch):
    assert image_present(), "image %s is missing: run `make image`" % IMAGE
    data = tmp_path / "voc"
    subprocess.run([os.path.join(ROOT, ".venv", "bin", "detector-generate-voc"), str(data),
                    "--train-2007", "6", "--test-2007", "2", "--train-2012", "0"], check=True,
                   capture_output=True)
    second = tmp_path / "second"  # other images of the same classes, for the evaluation job
    subprocess.run([os.path.join(ROOT, ".venv", "bin", "detector-generate-voc"), str(second),
                    "--train-2007", "1", "--test-2007", "3", "--train-2012", "0", "--seed", "11"],
                   check=True, capture_output=True)
    monkeypatch.setenv("DETECTOR_SECOND_DATA", "file://%s" % second)
    output = tmp_path / "output"
    output.mkdir()
    monkeypatch.setenv("DETECTOR_IMAGE", IMAGE)
    monkeypatch.setenv("DETECTOR_VOC", "file://%s" % data)
    monkeypatch.setenv("DETECTOR_OUTPUT", "file://%s" % output)
    jpegs = data / "VOCdevkit" / "VOC2007" / "JPEGImages"
    monkeypatch.setenv("DETECTOR_PICTURE", str(jpegs / sorted(os.listdir(jpegs))[0]))
    # The SDK's `docker compose up` leaves its exited containers behind; a project name of our
    # own lets the test remove exactly those.
    project = "detector-notebook-%s" % uuid.uuid4().hex[:12]
    monkeypatch.setenv("COMPOSE_PROJECT_NAME", project)
    nb = nbformat.read(os.path.join(ROOT, "sagemaker_launch", "example.ipynb"), as_version=4)
    try:
        NotebookClient(nb, timeout=1200, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        nbformat.write(nb, str(tmp_path / "executed.ipynb"))  # kept when the test fails
        ids = subprocess.run(["docker", "ps", "-aq", "--filter",
                              "label=com.docker.compose.project=%s" % project],
                             capture_output=True, text=True, check=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f"] + ids, capture_output=True, check=True)
    assert len(ids) == 3, "training, evaluation and serving ran %d containers under %s" % (len(ids), project)
    last = code_cell(nb, "result = summary(download_model(")
    kinds = {o.get("output_type") for o in last.outputs}
    assert "display_data" in kinds  # the curves image and the AP table were displayed
    mimes = {m for o in last.outputs if o.get("output_type") == "display_data" for m in o["data"]}
    assert "image/png" in mimes and "text/markdown" in mimes
    assert len([o for o in last.outputs if "image/png" in o.get("data", {})]) == 4  # curves, report
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert "mAP:" in text
    assert len(list(output.rglob("model.tar.gz"))) == 2  # the training job's, the evaluation's
    evaluated = code_cell(nb, "evaluate(estimator.model_data")
    pictures = [o for o in evaluated.outputs if o.get("output_type") == "display_data"
                and "image/png" in o["data"]]
    assert len(pictures) == 2  # the evaluation's precision-recall curves, the comparison
    printed = "".join(o.get("text", "") for o in evaluated.outputs if o.get("output_type") == "stream")
    assert "| class | validation | second data set | difference |" in printed, printed[-3000:]
    assert re.search(r"^\| mAP \| \d\.\d{4} \| \d\.\d{4} \| [+-]\d\.\d{4} \|$", printed, re.M), printed
    assert (tmp_path / "compare.png").stat().st_size > 0
    served = code_cell(nb, "predictor.detect(")
    assert "image/png" in {m for o in served.outputs if o.get("output_type") == "display_data" for m in o["data"]}
    assert (tmp_path / "detections.png").stat().st_size > 0
    # The job's model.onnx, run in the notebook's own Python (onnxruntime, no MXNet), answers what
    # the endpoint answered: the same picture, threshold 0, the best 5.
    assert_same_detections(stream_text(code_cell(nb, "detect_onnx("), ["stdout"]), stream_text(served))
