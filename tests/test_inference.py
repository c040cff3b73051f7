"""The inference core (inference.py) that serve, detector-predict, the evaluation report and the
serving benchmark share: loading a model directory or a model.tar.gz (safely), decoding image
bytes under the policy, detections in original-image pixels for every family (models tiny real
jobs wrote), the square input of YOLOv3, and the results the evaluation report reads."""

import ast
import io
import json
import os
import random
import shutil
import tarfile
import tempfile

import numpy as np
import pytest
from PIL import Image

import oriented
from detector_training import inference
from detector_training.core import model_dir as layout
from conftest import SERVED_JOBS
from detector_training.data.generated.synthetic_voc import make_image
from test_predict import SMALL, archives, detect, image_path, make_tar, member, model, model_dir  # noqa: F401 (fixtures)


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
    from_tar = inference.load_model(archive)
    assert os.listdir(scratch) == []  # the extraction directory is gone again
    assert from_tar.classes == model.classes and from_tar.short == model.short
    expected = detect(model, image_path, 0.0)
    got = detect(from_tar, image_path, 0.0)
    assert [d["class"] for d in got] == [d["class"] for d in expected]
    np.testing.assert_allclose([d["box"] for d in got], [d["box"] for d in expected], atol=1e-3)


def test_archive_extracts_only_the_model_files(model_dir, tmp_path):
    archive = make_tar(str(tmp_path / "model.tar.gz"), model_dir, "model",
                       names=layout.EXPORT_FILES + ("history.json",),
                       extra=[member("model/notes/readme.txt")])
    target = inference.extract_model_files(archive, str(tmp_path))
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
    with pytest.raises(inference.InferenceError, match="unsafe model archive"):
        inference.load_model(archive)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # temp dir removed, no evil
    assert not os.path.exists("/tmp/evil-absolute-detector-predict-test")
    # The real files came before the bad member: none of them was extracted either.
    assert os.listdir(scratch) == []


def test_detections_are_in_original_image_pixels(model, image_path):
    width, height = Image.open(image_path).size
    detections = detect(model, image_path, 0.0)
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
    every = detect(model, image_path, 0.0)
    cut = every[len(every) // 2]["score"]
    kept = detect(model, image_path, cut)
    assert kept == [d for d in every if d["score"] >= cut]
    assert 0 < len(kept) < len(every) or len({d["score"] for d in every}) == 1
    assert detect(model, image_path, 1.0) == [d for d in every if d["score"] >= 1.0]


def test_corrupt_export_is_refused(model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in layout.EXPORT_FILES:
        data = open(os.path.join(model_dir, name), "rb").read()
        (broken / name).write_bytes(data[:100] if name == layout.EXPORT_PARAMS else data)
    with pytest.raises(inference.InferenceError, match="cannot load the exported network"):
        inference.load_model(str(broken))


def test_an_oversized_classes_file_in_a_model_directory_is_refused(model_dir, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in layout.EXPORT_FILES:
        (copy / name).write_bytes(open(os.path.join(model_dir, name), "rb").read())
    (copy / layout.CLASSES_FILE).write_bytes(b"[" + b" " * (1 << 20) + b"]")
    with pytest.raises(inference.InferenceError, match="classes.json is larger than the 1048576 bytes allowed"):
        inference.load_model(str(copy))


def copy_model(model_dir, target, **replace):
    target.mkdir()
    for name in layout.EXPORT_FILES:
        data = replace.get(name) or open(os.path.join(model_dir, name), "rb").read()
        (target / name).write_bytes(data)
    return str(target)


def with_classes(model_dir, target, classes):
    """A copy of ``model_dir`` whose classes.json lists ``classes`` instead."""
    return copy_model(model_dir, target, **{layout.CLASSES_FILE: json.dumps(classes).encode()})


@pytest.mark.parametrize("names", [["circle", "square"], ["circle", "square", "triangle", "hexagon", "star"]],
                         ids=["shorter", "longer"])
def test_a_classes_json_that_does_not_fit_the_network_is_refused_at_load(model_dir, tmp_path, names):
    copy = with_classes(model_dir, tmp_path / "copy", names)
    with pytest.raises(inference.InferenceError) as caught:
        inference.load_model(copy)
    assert str(caught.value) == ("invalid model %s: classes.json lists %d classes but the network in "
                                 "model-symbol.json predicts 3" % (copy, len(names)))


def test_a_class_id_past_the_end_of_the_class_list_is_never_dropped_silently(model, image_path):
    every = detect(model, image_path, 0.0)
    assert {d["class"] for d in every} - {model.classes[0]}  # the network answers other classes too
    cut = inference.Model(model.net, model.classes[:1], model.short, model.max_size, model.source, model.ctx)
    with pytest.raises(AssertionError, match=r"class id [12] past the end of the model's 1 classes"):
        detect(cut, image_path, 0.0)  # load_model refuses such a model; this is the guard behind it


@pytest.mark.parametrize("config, words", [
    (b'{"short": 1e999}', ["config.json", "a number too large for a float"]),
    (b'{"short": [600, NaN]}', ["config.json", "NaN, which JSON does not allow"]),
    (b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", ["config.json", "nested more than 64 levels"]),
    (b'{"short": true}', ["config.json field short is true; it must be a whole number of pixels"]),
    (b'{"short": [128], "max_size": 1000000000}', ["config.json field max_size is 1000000000"]),
    # no test size recorded: refused, not guessed from the network's name (800/1333 for "coco")
    (b'{"network": "faster_rcnn_resnet50_v1b_coco", "max_size": 1333}',
     ["config.json has no short, the test size its training job validated at"]),
])
def test_a_config_json_that_lies_is_refused_naming_the_field(model_dir, tmp_path, config, words):
    copy = copy_model(model_dir, tmp_path / "copy", **{layout.CONFIG_FILE: config})
    with pytest.raises(inference.InferenceError) as caught:
        inference.load_model(copy)
    for word in words:
        assert word in str(caught.value)


def test_a_corrupt_xz_model_archive_is_an_inference_error(model_dir, tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name in layout.EXPORT_FILES:
            tar.add(os.path.join(model_dir, name), arcname=name)
    packed = bytearray(buffer.getvalue())
    packed[len(packed) // 2] ^= 0x55
    damaged = tmp_path / "model.tar.xz"
    damaged.write_bytes(bytes(packed))
    with pytest.raises(inference.InferenceError, match="neither a model directory nor a model.tar.gz"):
        inference.load_model(str(damaged))


def test_a_model_archive_that_does_not_fit_the_free_disk_is_an_inference_error(tmp_path, small_disk):
    path = tmp_path / "model.tar.gz"
    with tarfile.open(str(path), "w:gz") as out:
        info = tarfile.TarInfo("model/" + layout.EXPORT_PARAMS)
        info.size = 30 << 20  # zeros: more than the 24 MB disk holds
        out.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(inference.InferenceError, match=r"cannot extract model archive .*expands to 31457280 bytes"):
        inference.extract_model_files(str(path), str(small_disk))
    assert os.listdir(small_disk) == []


def encoded(img, fmt, **options):
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **options)
    return io.BytesIO(buffer.getvalue())


@pytest.fixture(scope="module")
def rgb_image():
    img, _objects = make_image(random.Random(7), ["circle", "square", "triangle"])
    return img


def test_decoded_image_is_rgb_uint8_at_its_stored_size(rgb_image):
    rgb = inference.decode_image(encoded(rgb_image, "PNG"))
    assert rgb.dtype == np.uint8 and rgb.shape == (rgb_image.height, rgb_image.width, 3)
    assert (rgb == np.asarray(rgb_image)).all()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("orientation", oriented.ORIENTATIONS)
def test_a_photo_stored_sideways_is_decoded_upright_as_its_viewer_sees_it(rgb_image, orientation,
                                                                         fmt, tmp_path):
    path = oriented.save(str(tmp_path / ("phone." + fmt.lower())), rgb_image, orientation, fmt)
    with open(path, "rb") as handle:
        served = inference.decode_image(io.BytesIO(handle.read()))  # a request's body (serve)
    assert oriented.same_picture(served, np.asarray(rgb_image))
    assert oriented.same_picture(inference.read_image(path), np.asarray(rgb_image))  # predict
    if fmt == "PNG":  # lossless: the very pixels
        assert (served == np.asarray(rgb_image)).all()


def test_grey_palette_rgba_cmyk_and_16_bit_images_are_converted(rgb_image):
    grey = np.asarray(rgb_image.convert("L"))
    assert (inference.decode_image(encoded(rgb_image.convert("L"), "PNG")) == grey[:, :, None]).all()
    sixteen = Image.fromarray(grey.astype(np.uint16) * 257)  # the full 16-bit range, not clipped
    assert (inference.decode_image(encoded(sixteen, "PNG")) == grey[:, :, None]).all()
    assert (inference.decode_image(encoded(rgb_image.convert("RGBA"), "PNG")) == np.asarray(rgb_image)).all()
    palette = rgb_image.convert("P")
    assert (inference.decode_image(encoded(palette, "PNG")) == np.asarray(palette.convert("RGB"))).all()
    cmyk = inference.decode_image(encoded(rgb_image.convert("CMYK"), "JPEG", quality=95))
    assert np.abs(cmyk.astype(int) - np.asarray(rgb_image, dtype=int)).mean() < 8


def test_truncated_image_is_refused_although_gluoncv_allows_truncated_images_process_wide(rgb_image):
    import gluoncv.data  # noqa: F401  (sets PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True)
    from PIL import ImageFile

    assert ImageFile.LOAD_TRUNCATED_IMAGES is True
    whole = encoded(rgb_image, "JPEG", quality=95).getvalue()
    with pytest.raises(inference.BadImage, match="truncated"):
        inference.decode_image(io.BytesIO(whole[: len(whole) // 2]))
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # the process-wide setting is left as found


def test_decompression_bomb_is_refused_from_its_header():
    bomb = encoded(Image.new("1", (9000, 9000)), "PNG")
    assert len(bomb.getvalue()) < 100_000
    with pytest.raises(inference.BadImage, match=r"image too large: 9000 x 9000 pixels is more than the 64000000"):
        inference.decode_image(bomb)


@pytest.mark.parametrize("data, words", [
    (b"", "not an image"), (b"GIF89a" + b"\x00" * 64, "not an image"), (b"%PDF-1.4 junk", "not an image"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not an image")])
def test_bytes_that_are_no_allowed_image_are_refused(data, words):
    with pytest.raises(inference.BadImage, match=words):
        inference.decode_image(io.BytesIO(data))



# --- one core: serve, detector-predict and the benchmark import it ------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "container", "detector_training")
USERS = {"serve/app.py": PACKAGE, "serve/server.py": PACKAGE, "serve/environment.py": PACKAGE,
         "predict.py": PACKAGE, "main.py": PACKAGE, "benchmarks/serving.py": ROOT}


def imports(path):
    """Every detector_training module a file imports (``from detector_training import x``: x)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module == "detector_training":
            found.update("detector_training." + alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("detector_training."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("user", sorted(USERS))
def test_serve_predict_the_report_and_the_benchmark_import_the_one_inference_module(user):
    found = imports(os.path.join(USERS[user], user))
    assert "detector_training.inference" in found
    assert "detector_training.predict" not in found  # predict.py is the command line only


def test_predict_defines_no_loading_decoding_or_forward_pass_of_its_own():
    tree = ast.parse(open(os.path.join(PACKAGE, "predict.py")).read())
    defined = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert defined.isdisjoint({"load_model", "decode_image", "detect_image", "read_model_directory",
                               "extract_model_files", "Model", "PredictError", "BadImage"})
    assert not any(isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "imports"
                   for node in ast.walk(tree))  # no SymbolBlock.imports: the model is inference's


# --- every family --------------------------------------------------------------------------------

FAMILIES = ("faster_rcnn", "yolo3", "ssd", "mask_rcnn")


@pytest.fixture(scope="module")
def wide_image():
    """The serve tests' picture of shapes (400 x 240), larger than every tiny model's input."""
    img, _objects = make_image(random.Random(5), ["circle", "square", "triangle"])
    return np.asarray(img.resize((img.width * 2, img.height * 2), Image.NEAREST).convert("RGB"))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_familys_export_says_how_many_classes_it_predicts(trained_models, family):
    directory = trained_models[family]
    classes = json.load(open(os.path.join(directory, layout.CLASSES_FILE)))
    assert layout.predicted_classes(os.path.join(directory, layout.SYMBOL_FILE)) == len(classes) == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_detects_in_original_image_pixels(trained_models, family, wide_image):
    model = inference.load_model(trained_models[family])
    found = inference.detect_image(model, wide_image, 0.0)
    assert found and {d["class"] for d in found} <= set(model.classes)
    boxes = np.array([d["box"] for d in found])
    height, width = wide_image.shape[:2]
    assert (boxes >= 0).all() and (boxes[:, [0, 2]] <= width - 1).all() and (boxes[:, [1, 3]] <= height - 1).all()
    assert all(("mask" in d) == (family == "mask_rcnn") for d in found)
    assert all("mask" not in d for d in inference.detect_image(model, wide_image, 0.0, masks=False))
    assert len(inference.detect_image(model, wide_image, 0.0, max_detections=1)) == 1


@pytest.mark.parametrize("family, square", [("faster_rcnn", False), ("yolo3", True), ("ssd", True),
                                            ("mask_rcnn", False)])
def test_the_input_is_resized_as_the_family_validates(trained_models, family, square, wide_image):
    """A family that validates on its data shape's square (SSD's and YOLOv3's validation
    transforms: short x short) is run on one; the R-CNN families keep the aspect."""
    model = inference.load_model(trained_models[family])
    assert model.square is square
    config = json.load(open(os.path.join(trained_models[family], "config.json")))
    data, (scale_x, scale_y) = inference.network_input(model, wide_image)
    if square:
        size = config["test_short"]
        assert size == int(SERVED_JOBS[family][0]["short"]) and size != 400
        assert data.shape == (1, 3, size, size)
        assert (scale_x, scale_y) == (400 / size, 240 / size)
    else:
        short, max_size = config["short"][-1], config["max_size"]
        assert data.shape[2:] in ((short, min(max_size, round(short * 5 / 3))), (round(max_size * 3 / 5), max_size))
        assert scale_x == pytest.approx(scale_y, rel=0.02)


@pytest.mark.parametrize("family", ["yolo3", "ssd"])
def test_a_square_model_is_run_at_the_size_it_validated_at(trained_models, family, tmp_path):
    """The validation size (config.json's test_short), not the last multi-scale training size;
    a model written before test_short existed: its short; none: the network's own data shape."""
    model_dir = tmp_path / "model"
    shutil.copytree(trained_models[family], model_dir)
    config_path = model_dir / "config.json"
    config = json.load(open(config_path))
    size = config["test_short"]
    json.dump(dict(config, short=[size - 32, size, size + 32]), open(config_path, "w"))
    assert inference.load_model(str(model_dir)).short == size
    del config["test_short"]
    json.dump(config, open(config_path, "w"))
    assert inference.load_model(str(model_dir)).short == config["short"][-1]
    json.dump(dict(config, short=None), open(config_path, "w"))
    assert inference.load_model(str(model_dir)).short == {"yolo3": 416, "ssd": 512}[family]


@pytest.mark.parametrize("family", ["faster_rcnn", "yolo3", "ssd"])
def test_the_input_is_what_the_familys_validation_transform_makes(trained_models, family, wide_image):
    """Pixels and the factor back to the image, as validation has them (so that a model scores
    the same through inference as in its job's validation)."""
    import mxnet as mx
    from gluoncv.data.transforms.presets.rcnn import FasterRCNNDefaultValTransform
    from gluoncv.data.transforms.presets.ssd import SSDDefaultValTransform
    from gluoncv.data.transforms.presets.yolo import YOLO3DefaultValTransform

    from detector_training.families.yolo3 import SquareValTransform

    model = inference.load_model(trained_models[family])
    data, scale = inference.network_input(model, wide_image)
    preset = {"yolo3": YOLO3DefaultValTransform, "ssd": SSDDefaultValTransform}.get(family)
    transform = SquareValTransform(model.short, preset) \
        if model.square else FasterRCNNDefaultValTransform(model.short, model.max_size)
    expected, _label, factor = transform(mx.nd.array(wide_image, dtype="uint8"), np.zeros((1, 5), dtype=np.float32))
    np.testing.assert_allclose(data[0].asnumpy(), expected.asnumpy(), atol=1e-5)
    np.testing.assert_allclose(scale, factor.asnumpy()[:2] if model.square else [factor.asscalar()] * 2, rtol=1e-6)


# --- what the evaluation report reads --------------------------------------------------------------

def test_labelled_results_are_the_detections_beside_the_labels(model, wide_image):
    gt_boxes, gt_labels = np.array([[10.0, 20.0, 100.0, 120.0]]), np.array([1])
    results = inference.labelled_results(model, [("shapes.png", wide_image, gt_boxes, gt_labels,
                                                  np.array([False]), lambda: wide_image)])
    (result,) = results
    expected = inference.detect_image(model, wide_image, 0.0)
    assert (result.name, result.width, result.height) == ("shapes.png", 400, 240)
    np.testing.assert_allclose(result.boxes, [d["box"] for d in expected])
    assert [model.classes[i] for i in result.labels] == [d["class"] for d in expected]
    np.testing.assert_allclose(result.scores, [d["score"] for d in expected])
    np.testing.assert_array_equal(result.gt_boxes, gt_boxes)
    assert result.load() is wide_image


def test_dataset_samples_read_gluoncv_items_without_placeholders():
    """Items as the families' readers give them (GluonCV's protocol): an image NDArray and label
    rows [x0, y0, x1, y1, class, (difficult)]; a class -1 row is a negative's placeholder."""
    import mxnet as mx

    image = mx.nd.array(np.full((30, 40, 3), 9), dtype="uint8")
    items = [(image, np.array([[1, 2, 11, 12, 0, 0], [5, 5, 25, 25, 2, 1]], dtype=np.float32)),
             (image, np.full((1, 6), -1, dtype=np.float32)),
             (image, np.zeros((0,), dtype=np.float32))]
    samples = list(inference.dataset_samples(items))
    assert [s[0] for s in samples] == ["#0", "#1", "#2"]
    name, rgb, boxes, labels, difficult, load = samples[0]
    assert rgb.shape == (30, 40, 3) and (load() == rgb).all()
    np.testing.assert_array_equal(boxes, [[1, 2, 11, 12], [5, 5, 25, 25]])
    assert list(labels) == [0, 2] and list(difficult) == [False, True]
    assert all(len(s[2]) == 0 and len(s[3]) == 0 for s in samples[1:])


def test_a_labelled_set_is_evaluated_into_the_report(model, tmp_path, wide_image):
    """What an evaluation without training calls: labelled images as a layout's reader gives them
    (data/labelled.py), the loaded model, the report written."""
    from detector_training.core import eval_report
    from detector_training.data.labelled import Box, LabelledImage, LabelledSet

    path = tmp_path / "street.png"
    Image.fromarray(wide_image).save(path)
    labelled = LabelledSet(images=[LabelledImage(str(path), [Box(10, 20, 100, 120, model.classes[1]),
                                                           Box(150, 30, 200, 90, model.classes[0], True)])])
    samples = list(inference.labelled_set_samples(labelled, model.classes))
    name, rgb, boxes, labels, difficult, load = samples[0]
    assert name == "street.png" and (rgb == wide_image).all() and (load() == wide_image).all()
    assert list(labels) == [1, 0] and list(difficult) == [False, True] and boxes.shape == (2, 4)
    evaluation, pictures, text = inference.evaluate(model, samples, str(tmp_path / "report"))
    assert evaluation.images == 1 and evaluation.classes == model.classes
    assert set(eval_report.FILES) == set(os.listdir(tmp_path / "report"))
    assert "street.png (F1" in text and evaluation.curves[1].positives == 1
    stranger = LabelledSet(images=[LabelledImage(str(path), [Box(1, 1, 9, 9, "zebra")], where="a.xml")])
    with pytest.raises(inference.InferenceError, match="a.xml: class zebra is not one of the model's"):
        list(inference.labelled_set_samples(stranger, model.classes))


def test_an_mxnet_error_reads_the_same_every_time_without_its_clock_and_source_file():
    """Two workers that fail on the same model one second apart log the same reason."""
    import mxnet as mx

    from detector_training.errors import one_line

    reasons = set()
    for when in ("01:48:53", "01:48:54"):
        error = mx.base.MXNetError(
            "Traceback (most recent call last):\n  File \"../src/a.cc\", line 1\n"
            "Error in operator rpn0_slice_axis0: [%s] ../src/operator/tensor/./matrix_op-inl.h:1294: "
            "Check failed: *end <= axis_size: Invalid end for end=100 as axis_size is 12" % when)
        reasons.add(one_line(error))
    assert reasons == {"Error in operator rpn0_slice_axis0: Check failed: *end <= axis_size: "
                       "Invalid end for end=100 as axis_size is 12"}
