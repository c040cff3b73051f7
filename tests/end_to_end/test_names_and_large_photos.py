"""What users' data holds and our generated data did not: class names that are not ASCII or have
spaces ("café", "熊猫", "traffic light"), file names with spaces and accents, a job whose base
path has both, and a 6000 x 4000 phone photo. One tiny job on a Roboflow YOLOv8 export carrying
all of them: recognised, checked, trained (the big photo resized as configured); its model then
answers ``detector-predict`` and ``serve`` with the class names as written (UTF-8), the big photo
within the worker's memory bound, and a decompression bomb still refused with a 400."""

import json
import os
import re
import subprocess
import sys

import pytest
from PIL import Image, ImageDraw

import exports
from conftest import BIN, TINY
from serve.served import Served, bomb_png, encoded

NAMES = ("café", "熊猫", "traffic light")
BIG = (6000, 4000)
BIG_NAME = "IMG 2024 été 熊猫.jpg"  # a phone photo's size, a name with spaces and accents
JOB = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
           epochs="1", batch_size="2")


def _yolo_line(name, box, size):
    (x0, y0, x1, y1), (width, height) = box, size
    return "%d %.6f %.6f %.6f %.6f\n" % (NAMES.index(name), (x0 + x1) / 2.0 / width,
                                         (y0 + y1) / 2.0 / height, (x1 - x0) / width,
                                         (y1 - y0) / height)


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def big_photo():
    """A 6000 x 4000 picture with three objects (one of each class) and their boxes."""
    image = Image.new("RGB", BIG, (96, 110, 90))
    draw = ImageDraw.Draw(image)
    objects = [(NAMES[0], (600, 500, 2100, 2000)), (NAMES[1], (2800, 900, 4300, 2400)),
               (NAMES[2], (4500, 2600, 5600, 3700))]
    for (_name, box), colour in zip(objects, ((220, 40, 40), (40, 40, 220), (240, 200, 30))):
        draw.rectangle(box, fill=colour)
    return image, objects


def named_export(root):
    """A Roboflow YOLOv8 export (``data.yaml`` with ``../train/images``) whose classes are
    NAMES and whose photos are named with spaces and accents, the big photo among the training
    ones."""
    made = exports.photos(8, seed=3)
    renamed = {"circle": NAMES[0], "square": NAMES[1]}
    for number, photo in enumerate(made):
        split = "train" if number < 6 else "valid"
        name = "photo %d – été 熊猫.jpg" % number
        path = exports.save(photo, os.path.join(root, split, "images"), name)
        objects = [(NAMES[2] if i % 3 == 2 else renamed[o[0]], o[1:])
                   for i, o in enumerate(photo.objects)]
        _write(os.path.join(root, split, "labels", os.path.splitext(name)[0] + ".txt"),
               "".join(_yolo_line(n, box, photo.image.size) for n, box in objects))
    image, objects = big_photo()
    image.save(os.path.join(root, "train", "images", BIG_NAME), "JPEG", quality=85)
    _write(os.path.join(root, "train", "labels", os.path.splitext(BIG_NAME)[0] + ".txt"),
           "".join(_yolo_line(n, box, BIG) for n, box in objects))
    _write(os.path.join(root, "README.roboflow.txt"), exports.ROBOFLOW_README)
    _write(os.path.join(root, "data.yaml"),
           "train: ../train/images\nval: ../valid/images\n\nnc: 3\nnames: [%s]\n\nroboflow:\n"
           "  workspace: café-ws\n  project: 熊猫\n  version: 1\n"
           % ", ".join("'%s'" % n for n in NAMES))


@pytest.fixture(scope="module")
def named_job(tmp_path_factory):
    """The job, trained once under a base path with a space and non-ASCII letters: (base, its
    output, its peak resident memory in bytes, the big photo's path)."""
    base = str(tmp_path_factory.mktemp("names") / "job base é 熊猫" / "opt ml")
    exports.job(base, JOB, {"train": named_export})
    big = os.path.join(base, "input", "data", "train", "train", "images", BIG_NAME)
    # The job under a parent that reports its peak memory (the largest resident set of the job).
    peak = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
            "print('peak rss kB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", peak, os.path.join(BIN, "detector-train-job"),
                             "--base-dir", base], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    rss = int(re.search(r"peak rss kB (\d+)", out).group(1)) * 1024
    return base, out, rss, big


def test_names_go_through_recognition_the_data_check_and_training(named_job):
    base, out, peak, _big = named_job
    assert "dataset=yolo recognised in channel 'train': Roboflow YOLOv8 (data.yaml)" in out
    model = os.path.join(base, "model")
    with open(os.path.join(model, "classes.json"), encoding="utf-8") as handle:
        assert json.load(handle) == list(NAMES)
    with open(os.path.join(model, "data_report.md"), encoding="utf-8") as handle:
        report = handle.read()
    assert "- classes: café, 熊猫, traffic light" in report and "7 images" in report
    assert "## Problems\n\nNone" in report
    # The 6000 x 4000 photo trained resized to short=128/max_size=176 (what a ResNet-18 Faster
    # R-CNN needs at that size is under 2 GB; at 24 megapixels its activations alone are tens).
    assert peak < 2.5 * 2**30, "the job peaked at %.1f GB" % (peak / 2**30)


def test_detector_predict_answers_the_class_names_as_written(named_job, tmp_path):
    base, _out, _peak, big = named_job
    photo = os.path.join(os.path.dirname(big), "photo 0 – été 熊猫.jpg")
    answer = tmp_path / "réponse 熊猫.json"
    result = subprocess.run([os.path.join(BIN, "detector-predict"), os.path.join(base, "model"),
                             photo, "-o", str(tmp_path / "drawn é.png"), "--json", str(answer),
                             "--threshold", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    raw = answer.read_bytes()
    detections = json.loads(raw.decode("utf-8"))
    assert detections and {d["class"] for d in detections} <= set(NAMES)
    for name in {d["class"] for d in detections}:
        assert json.dumps(name, ensure_ascii=False).encode("utf-8") in raw  # as written, UTF-8


def test_serve_answers_names_as_written_and_a_6000x4000_photo_within_its_memory_bound(named_job,
                                                                                     tmp_path):
    base, _out, _peak, big = named_job
    with open(big, "rb") as handle:
        jpeg = handle.read()
    picture = BIG[0] * BIG[1] * 3  # the decoded photo's bytes
    server = Served(os.path.join(base, "model"), tmp_path / "serve.log",
                    SAGEMAKER_MODEL_SERVER_WORKERS="1")
    try:
        server.wait_healthy()
        worker = server.workers()[0]
        before = _peak_rss(worker)
        answer = server.invoke(jpeg, Accept="application/json;verbose",
                               **{"X-Amzn-SageMaker-Custom-Attributes": "threshold=0"})
        assert answer.status_code == 200, answer.text[:500]
        grown = _peak_rss(worker) - before
        detections = json.loads(answer.content.decode("utf-8"))
        assert detections and {d["class"] for d in detections} <= set(NAMES)
        for name in {d["class"] for d in detections}:
            assert json.dumps(name, ensure_ascii=False).encode("utf-8") in answer.content
        assert all(0 <= d["box"][0] <= d["box"][2] <= BIG[0] - 1 for d in detections)
        # Pillow's decoded image (4 bytes a pixel) and the array made of it, then that array and
        # MXNet's copy that it resizes: under 4 decoded pictures (3.1 measured; 4.4 while
        # Pillow's convert() copied an RGB image too).
        assert grown < 4 * picture, "the worker's peak grew by %.0f MB" % (grown / 2**20)
        bomb = server.invoke(bomb_png(), content_type="image/png")
        assert bomb.status_code == 400 and "too large" in bomb.json()["error"]
        plain = server.invoke(encoded(Image.open(big).resize((600, 400))))
        assert plain.status_code == 200 and server.workers() == [worker]
    finally:
        server.stop()


def _peak_rss(pid):
    """The process's peak resident set (VmHWM), in bytes."""
    with open("/proc/%d/status" % pid) as handle:
        return int(re.search(r"VmHWM:\s+(\d+) kB", handle.read()).group(1)) * 1024
