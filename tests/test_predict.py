"""Inference on one image with a model a real (tiny) training job wrote: loading from the model
directory and from model.tar.gz, box coordinates, drawing, unsafe archives, CLI errors."""

import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import pytest
from PIL import Image

from conftest import make_job, run_rank_job
from detector_training import predict
from detector_training.core import model_dir as layout
from detector_training.data.synthetic_voc import make_image

SCALE = 3  # test image = a generated image enlarged 3x, so the network input is smaller


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    base = make_job(tmp_path_factory.mktemp("job") / "opt_ml", {"epochs": "1", "batch_size": "2"},
                    n_train=6, n_test=2)
    result = run_rank_job(base)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return os.path.join(base, "model")


@pytest.fixture(scope="module")
def model(model_dir):
    return predict.load_model(model_dir)


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


def run_cli(*args, tmpdir=None):
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run([sys.executable, "-m", "detector_training.predict"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=300, env=env)


# --- loading ---------------------------------------------------------------------------------

def test_model_directory_loads_with_its_classes_and_test_sizes(model_dir, model):
    assert model.classes == json.load(open(os.path.join(model_dir, "classes.json")))
    config = json.load(open(os.path.join(model_dir, "config.json")))
    assert (model.short, model.max_size) == (config["short"][-1], config["max_size"]) == (128, 176)


@pytest.mark.parametrize("arc_root", [".", "model"])
def test_model_tar_gz_gives_the_same_detections_and_leaves_no_files(archives, model, image_path,
                                                                   tmp_path, monkeypatch, arc_root):
    archive = archives[arc_root]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    from_tar = predict.load_model(archive)
    assert os.listdir(scratch) == []  # the extraction directory is gone again
    assert from_tar.classes == model.classes and from_tar.short == model.short
    expected = predict.detect(model, image_path, 0.0)
    got = predict.detect(from_tar, image_path, 0.0)
    assert [d["class"] for d in got] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] for d in got], [d["box"] for d in expected], atol=1e-3)


def test_archive_extracts_only_the_model_files(model_dir, tmp_path):
    archive = make_tar(str(tmp_path / "model.tar.gz"), model_dir, "model",
                       names=layout.EXPORT_FILES + ("history.json",),
                       extra=[member("model/notes/readme.txt")])
    target = predict.extract_model_files(archive, str(tmp_path))
    assert os.path.dirname(target) == str(tmp_path)
    found = sorted(os.path.relpath(os.path.join(d, f), target) for d, _, fs in os.walk(target) for f in fs)
    assert found == sorted(os.path.join("model", n) for n in layout.EXPORT_FILES)


@pytest.mark.parametrize("bad", [
    member("../evil"),
    member("sub/../../evil"),
    member("/tmp/evil-absolute-detector-predict-test"),
    member("evil-link", kind=tarfile.SYMTYPE, target="../evil"),
    member("evil-hardlink", kind=tarfile.LNKTYPE, target="model.params"),
    member("evil-fifo", kind=tarfile.FIFOTYPE),
    member("model/classes.json", kind=tarfile.GNUTYPE_SPARSE),
    member("model/na\x00me.json", data=b"x"),
    member("model/classes.json", data=b" " * ((1 << 20) + 1)),
    member("model/classes.json", data=b"[]"),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink", "hardlink", "fifo", "sparse", "nul-in-name",
        "oversized-classes", "duplicate"])
def test_unsafe_archive_is_refused_and_nothing_is_written(model_dir, tmp_path, monkeypatch, bad):
    archive = make_tar(str(tmp_path / "model.tar.gz"), model_dir, arc_root="model", names=SMALL, extra=[bad],
                       fmt=tarfile.PAX_FORMAT)
    scratch = tmp_path / "scratch" / "tmp"
    scratch.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(predict.PredictError, match="unsafe model archive"):
        predict.load_model(archive)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # temp dir removed, no evil
    assert not os.path.exists("/tmp/evil-absolute-detector-predict-test")
    # The real files came before the bad member: none of them was extracted either.
    assert os.listdir(scratch) == []


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


# --- detections ------------------------------------------------------------------------------

def test_detections_are_in_original_image_pixels(model, image_path):
    width, height = Image.open(image_path).size
    detections = predict.detect(model, image_path, 0.0)
    assert detections
    boxes = np.array([d["box"] for d in detections])
    assert (boxes[:, [0, 2]] >= 0).all() and (boxes[:, [0, 2]] <= width - 1).all()
    assert (boxes[:, [1, 3]] >= 0).all() and (boxes[:, [1, 3]] <= height - 1).all()
    assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()
    # The network saw the image at most 176 pixels on its long side; boxes cover the full image.
    assert max(width, height) > 2 * 176
    assert boxes[:, 2].max() > 0.75 * width and boxes[:, 3].max() > 0.75 * height
    scores = [d["score"] for d in detections]
    assert scores == sorted(scores, reverse=True) and 0.0 <= min(scores) and max(scores) <= 1.0
    assert {d["class"] for d in detections} <= set(model.classes)
    assert all(set(d) == {"class", "score", "box"} and len(d["box"]) == 4 for d in detections)


def test_threshold_keeps_only_the_higher_scores(model, image_path):
    every = predict.detect(model, image_path, 0.0)
    cut = every[len(every) // 2]["score"]
    kept = predict.detect(model, image_path, cut)
    assert kept == [d for d in every if d["score"] >= cut]
    assert 0 < len(kept) < len(every) or len({d["score"] for d in every}) == 1
    assert predict.detect(model, image_path, 1.0) == [d for d in every if d["score"] >= 1.0]


def test_drawn_box_edge_changes_exactly_the_edge_pixels(model, image_path, tmp_path):
    before = pixels(image_path)
    height, width = before.shape[:2]
    det = next(d for d in predict.detect(model, image_path, 0.0)
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
    expected = predict.detect(model, image_path, 0.0)
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


def test_corrupt_export_is_refused(model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in layout.EXPORT_FILES:
        data = open(os.path.join(model_dir, name), "rb").read()
        (broken / name).write_bytes(data[:100] if name == layout.EXPORT_PARAMS else data)
    with pytest.raises(predict.PredictError, match="cannot load the exported network"):
        predict.load_model(str(broken))


def test_an_oversized_classes_file_in_a_model_directory_is_refused(model_dir, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in layout.EXPORT_FILES:
        (copy / name).write_bytes(open(os.path.join(model_dir, name), "rb").read())
    (copy / layout.CLASSES_FILE).write_bytes(b"[" + b" " * (1 << 20) + b"]")
    with pytest.raises(predict.PredictError, match="classes.json is larger than the 1048576 bytes allowed"):
        predict.load_model(str(copy))


def copy_model(model_dir, target, **replace):
    target.mkdir()
    for name in layout.EXPORT_FILES:
        data = replace.get(name) or open(os.path.join(model_dir, name), "rb").read()
        (target / name).write_bytes(data)
    return str(target)


@pytest.mark.parametrize("config, words", [
    (b'{"short": 1e999}', ["config.json", "a number too large for a float"]),
    (b'{"short": [600, NaN]}', ["config.json", "NaN, which JSON does not allow"]),
    (b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", ["config.json", "nested more than 64 levels"]),
    (b'{"short": true}', ["config.json field short is true; it must be a whole number of pixels"]),
    (b'{"max_size": 1000000000}', ["config.json field max_size is 1000000000"]),
])
def test_a_config_json_that_lies_is_refused_naming_the_field(model_dir, tmp_path, config, words):
    copy = copy_model(model_dir, tmp_path / "copy", **{layout.CONFIG_FILE: config})
    with pytest.raises(predict.PredictError) as caught:
        predict.load_model(copy)
    for word in words:
        assert word in str(caught.value)


def test_a_corrupt_xz_model_archive_is_a_predict_error(model_dir, tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name in layout.EXPORT_FILES:
            tar.add(os.path.join(model_dir, name), arcname=name)
    packed = bytearray(buffer.getvalue())
    packed[len(packed) // 2] ^= 0x55
    damaged = tmp_path / "model.tar.xz"
    damaged.write_bytes(bytes(packed))
    with pytest.raises(predict.PredictError, match="neither a model directory nor a model.tar.gz"):
        predict.load_model(str(damaged))


def test_a_model_archive_that_does_not_fit_the_free_disk_is_a_predict_error(tmp_path, small_disk):
    path = tmp_path / "model.tar.gz"
    with tarfile.open(str(path), "w:gz") as out:
        info = tarfile.TarInfo("model/" + layout.EXPORT_PARAMS)
        info.size = 30 << 20  # zeros: more than the 24 MB disk holds
        out.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(predict.PredictError, match=r"cannot extract model archive .*expands to 31457280 bytes"):
        predict.extract_model_files(str(path), str(small_disk))
    assert os.listdir(small_disk) == []


# --- decoding image bytes ----------------------------------------------------------------------

def encoded(img, fmt, **options):
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **options)
    return io.BytesIO(buffer.getvalue())


@pytest.fixture(scope="module")
def rgb_image():
    img, _objects = make_image(random.Random(7), ["circle", "square", "triangle"])
    return img


def test_decoded_image_is_rgb_uint8_at_its_stored_size(rgb_image):
    rgb = predict.decode_image(encoded(rgb_image, "PNG"))
    assert rgb.dtype == np.uint8 and rgb.shape == (rgb_image.height, rgb_image.width, 3)
    assert (rgb == np.asarray(rgb_image)).all()


def test_grey_palette_rgba_cmyk_and_16_bit_images_are_converted(rgb_image):
    grey = np.asarray(rgb_image.convert("L"))
    assert (predict.decode_image(encoded(rgb_image.convert("L"), "PNG")) == grey[:, :, None]).all()
    sixteen = Image.fromarray(grey.astype(np.uint16) * 257)  # the full 16-bit range, not clipped
    assert (predict.decode_image(encoded(sixteen, "PNG")) == grey[:, :, None]).all()
    assert (predict.decode_image(encoded(rgb_image.convert("RGBA"), "PNG")) == np.asarray(rgb_image)).all()
    palette = rgb_image.convert("P")
    assert (predict.decode_image(encoded(palette, "PNG")) == np.asarray(palette.convert("RGB"))).all()
    cmyk = predict.decode_image(encoded(rgb_image.convert("CMYK"), "JPEG", quality=95))
    assert np.abs(cmyk.astype(int) - np.asarray(rgb_image, dtype=int)).mean() < 8


def test_truncated_image_is_refused_although_gluoncv_allows_truncated_images_process_wide(rgb_image):
    import gluoncv.data  # noqa: F401  (sets PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True)
    from PIL import ImageFile

    assert ImageFile.LOAD_TRUNCATED_IMAGES is True
    whole = encoded(rgb_image, "JPEG", quality=95).getvalue()
    with pytest.raises(predict.BadImage, match="truncated"):
        predict.decode_image(io.BytesIO(whole[: len(whole) // 2]))
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # the process-wide setting is left as found


def test_decompression_bomb_is_refused_from_its_header():
    bomb = encoded(Image.new("1", (9000, 9000)), "PNG")
    assert len(bomb.getvalue()) < 100_000
    with pytest.raises(predict.BadImage, match=r"image too large: 9000 x 9000 pixels is more than the 64000000"):
        predict.decode_image(bomb)


@pytest.mark.parametrize("data, words", [
    (b"", "not an image"), (b"GIF89a" + b"\x00" * 64, "not an image"), (b"%PDF-1.4 junk", "not an image"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not an image")])
def test_bytes_that_are_no_allowed_image_are_refused(data, words):
    with pytest.raises(predict.BadImage, match=words):
        predict.decode_image(io.BytesIO(data))
