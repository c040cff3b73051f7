"""detector-predict, the command line and the drawing, with a model a real (tiny) training job
wrote: drawing boxes, the JSON it writes, a model.tar.gz, and one-line errors for a missing or
broken image or model and an unsafe archive."""

import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from PIL import Image

import oriented
from detector_training import inference, predict
from detector_training.core import model_dir as layout
from detector_training.data.generated.synthetic_voc import make_image

SCALE = 3  # test image = a generated image enlarged 3x, so the network input is smaller


@pytest.fixture(scope="module")
def model_dir(trained_models):
    """A tiny Faster R-CNN a real job wrote (conftest's SERVED_JOBS, trained once a session)."""
    return trained_models["faster_rcnn"]


@pytest.fixture(scope="module")
def model(model_dir):
    return inference.load_model(model_dir)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    img, _objects = make_image(random.Random(5), ["circle", "square", "triangle"])
    img = img.resize((img.width * SCALE, img.height * SCALE), Image.NEAREST)
    path = str(tmp_path_factory.mktemp("images") / "shapes.jpg")
    img.save(path, quality=95)
    return path


def pixels(path):
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def make_tar(path, model_dir, arc_root=".", names=layout.EXPORT_FILES, extra=(), fmt=tarfile.GNU_FORMAT):
    """A model.tar.gz as SageMaker packs the model directory (files at the top, or under
    ``arc_root``), plus ``extra`` (TarInfo, data) members appended after the real files."""
    with tarfile.open(path, "w:gz", compresslevel=1, format=fmt) as tar:
        for name in names:
            tar.add(os.path.join(model_dir, name), arcname=os.path.join(arc_root, name))
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


@pytest.fixture(scope="module")
def archives(model_dir, tmp_path_factory):
    """model.tar.gz with the files at the top and with them under model/."""
    where = tmp_path_factory.mktemp("archives")
    return {root: make_tar(str(where / ("%s.tar.gz" % ("flat" if root == "." else root))), model_dir, root)
            for root in (".", "model")}


SMALL = ("classes.json", "config.json")  # enough real members in front of a bad one


def member(name, data=b"owned\n", kind=tarfile.REGTYPE, target=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if "\x00" in name:  # a pax path keeps the NUL (a ustar name would end there)
        info.pax_headers = {"path": name}
    return info, data if kind == tarfile.REGTYPE else None


def detect(model, image_path, threshold):
    return inference.detect_image(model, inference.read_image(image_path), threshold)


def run_cli(*args, tmpdir=None):
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run([sys.executable, "-m", "detector_training.predict"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=300, env=env)


# --- the command line ------------------------------------------------------------------------

def test_unsafe_archive_on_the_command_line_is_one_line(model_dir, image_path, tmp_path):
    archive = make_tar(str(tmp_path / "model.tar.gz"), model_dir, names=SMALL,
                       extra=[member("../evil")])
    scratch = tmp_path / "scratch" / "tmp"
    scratch.mkdir(parents=True)
    result = run_cli(archive, image_path, "--output", tmp_path / "out.png", tmpdir=scratch)
    line = one_line_error(result)
    assert "unsafe model archive" in line and "'../evil'" in line
    assert os.listdir(scratch) == [] and os.listdir(scratch.parent) == ["tmp"]
    assert not (tmp_path / "out.png").exists()


# --- drawing ---------------------------------------------------------------------------------

def test_drawn_box_edge_changes_exactly_the_edge_pixels(model, image_path, tmp_path):
    before = pixels(image_path)
    height, width = before.shape[:2]
    det = next(d for d in detect(model, image_path, 0.0)
               if d["box"][2] - d["box"][0] >= 8 and d["box"][3] - d["box"][1] >= 40)
    out = str(tmp_path / "one.png")
    assert predict.draw(image_path, [det], out) == 1
    with open(out, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    after = pixels(out)
    assert after.shape == before.shape
    x0, y0, x1, y1 = predict.pixel_box(det["box"])
    colour = np.array(predict.colour_for(det["class"]))
    lw = predict.line_width(width, height)
    # Bottom edge (the label sits at the top): every pixel in the box colour, and changed.
    edge = after[y1, x0:x1 + 1]
    assert (edge == colour).all()
    assert (before[y1, x0:x1 + 1] != colour).any(axis=-1).any()
    # Left and right edges below the label.
    assert (after[y1 - 2 * lw:y1 + 1, x0] == colour).all() and (after[y1 - 2 * lw:y1 + 1, x1] == colour).all()
    changed = (after != before).any(axis=-1)
    assert changed[y1, x0:x1 + 1].any()
    # Nothing changes left of the box or below it, nor well inside it under the label.
    assert not changed[:, :x0].any() and not changed[y1 + 1:, :].any()
    inner = changed[y1 - 2:y1 - lw + 1, x0 + lw:x1 - lw + 1]
    assert not inner.any()


def test_command_line_draws_and_writes_json(model_dir, model, image_path, tmp_path):
    out_png, out_json = tmp_path / "out" / "drawn.png", tmp_path / "dets.json"
    result = run_cli(model_dir, image_path, "--output", out_png, "--threshold", "0", "--json", out_json)
    assert result.returncode == 0, result.stderr[-2000:]
    detections = json.load(open(out_json))
    expected = detect(model, image_path, 0.0)
    assert detections and [d["class"] for d in detections] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] + [d["score"]] for d in detections],
                               [d["box"] + [d["score"]] for d in expected], atol=1e-3)
    assert "drew %d detection(s)" % len(detections) in result.stdout
    reference = str(tmp_path / "reference.png")
    predict.draw(image_path, detections, reference)
    drawn = pixels(str(out_png))
    assert (drawn == pixels(reference)).all()
    assert (drawn != pixels(image_path)).any()


def test_command_line_from_tar_gz_with_default_threshold(archives, image_path, tmp_path):
    result = run_cli(archives["."], image_path, "-o", tmp_path / "a.png")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("drew ") and "score >= 0.5" in result.stdout
    assert pixels(str(tmp_path / "a.png")).shape == pixels(image_path).shape


# --- errors ----------------------------------------------------------------------------------

def one_line_error(result):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("detector-predict: error: ")
    return lines[0]


def test_a_photo_stored_sideways_is_answered_and_drawn_upright(model_dir, model, image_path, tmp_path):
    upright = pixels(image_path).astype(np.uint8)
    reference = str(tmp_path / "upright.png")
    Image.fromarray(upright).save(reference)
    sideways = oriented.save(str(tmp_path / "phone.png"), upright, 6)  # lossless: the same pixels
    out_png, out_json = tmp_path / "drawn.png", tmp_path / "dets.json"
    assert predict.main([model_dir, sideways, "--output", str(out_png), "--threshold", "0",
                         "--json", str(out_json)]) == 0
    detections, expected = json.load(open(out_json)), detect(model, reference, 0.0)
    assert detections and [d["class"] for d in detections] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] + [d["score"]] for d in detections],
                               [d["box"] + [d["score"]] for d in expected], atol=1e-4)
    assert pixels(str(out_png)).shape == upright.shape  # drawn on the upright picture


def test_missing_image_is_a_one_line_error(model_dir, tmp_path):
    result = run_cli(model_dir, tmp_path / "nope.jpg", "--output", tmp_path / "o.png")
    line = one_line_error(result)
    assert "image not found" in line and "nope.jpg" in line
    assert not (tmp_path / "o.png").exists()


def test_undecodable_image_is_a_one_line_error(model_dir, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    line = one_line_error(run_cli(model_dir, bad, "--output", tmp_path / "o.png"))
    assert "cannot read image" in line and "bad.jpg" in line


def test_missing_or_invalid_model_is_a_one_line_error(model_dir, image_path, tmp_path):
    line = one_line_error(run_cli(tmp_path / "no-model", image_path, "--output", tmp_path / "o.png"))
    assert "model not found" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(run_cli(empty, image_path, "--output", tmp_path / "o.png"))
    assert "not a model" in line and "model-symbol.json" in line
    not_tar = tmp_path / "model.tar.gz"
    not_tar.write_bytes(b"\x1f\x8b garbage")
    line = one_line_error(run_cli(not_tar, image_path, "--output", tmp_path / "o.png"))
    assert "not a model" in line
    assert not (tmp_path / "o.png").exists()


def test_a_classes_json_that_does_not_fit_the_network_is_a_one_line_error(model_dir, image_path, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    (copy / layout.CLASSES_FILE).write_text(json.dumps(["circle", "square"]))
    line = one_line_error(run_cli(copy, image_path, "--output", tmp_path / "o.png"))
    assert line == ("detector-predict: error: invalid model %s: classes.json lists 2 classes but the "
                    "network in model-symbol.json predicts 3" % copy)
    assert not (tmp_path / "o.png").exists()
