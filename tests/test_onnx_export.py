"""ONNX export (onnx_export.py): every family's tiny trained model (conftest's SERVED_JOBS) exported
and verified, MXNet's stock exporter failing or answering differently where REFERENCE.md §16 says
it does, the refusal, the command, the job's hyperparameter, and docs/onnx.md's script run as
written outside the project's environment."""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from conftest import SERVED_JOBS, copy_export, real_export, trained_job
from detector_training import inference, onnx_export, predict
from detector_training.core import model_dir

FAMILIES = ("ssd", "yolo3", "faster_rcnn", "mask_rcnn")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def exported(exported_models):
    return exported_models


def stock_export(directory, path):
    """MXNet's exporter as GluonCV's users run it: ``mx.onnx.export_model`` on the export pair."""
    import mxnet as mx

    model = inference.load_model(directory)
    size = (model.short, model.short) if model.square else (model.short, model.max_size)
    mx.onnx.export_model(os.path.join(directory, model_dir.SYMBOL_FILE),
                         os.path.join(directory, model_dir.EXPORT_PARAMS), in_shapes=[(1, 3) + size],
                         in_types=[np.float32], onnx_file_path=str(path))
    return str(path)


def answers(model, runtime, rgb):
    """(MXNet's, ONNX Runtime's) detections for one picture, prepared as inference prepares it."""
    data, _scale = inference.network_input(model, rgb)
    size = data.shape[3], data.shape[2]
    return (onnx_export.detections([o.asnumpy() for o in model.net(data)], *size),
            onnx_export.detections(runtime.run(None, {"data": data.asnumpy()}), *size))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_exports_a_file_onnx_runtime_runs_as_mxnet_does(exported, trained_models, family):
    import onnx

    assert not os.path.exists(os.path.join(trained_models[family], onnx_export.ONNX_FILE))  # export_onnx: false
    directory = exported[family]
    info = json.load(open(os.path.join(directory, onnx_export.ONNX_JSON)))
    model = inference.load_model(directory)
    graph = onnx.load(os.path.join(directory, onnx_export.ONNX_FILE))
    assert graph.ir_version == 8 and [(o.domain, o.version) for o in graph.opset_import] == [("", 13)]
    assert [i.name for i in graph.graph.input] == [info["input_name"]] == ["data"]  # no weights among them
    read = {name for node in graph.graph.node for name in node.input}
    assert {tensor.name for tensor in graph.graph.initializer} <= read  # no constant nothing reads
    assert info["classes"] == model.classes and info["network"] == SERVED_JOBS[family][0].get(
        "network", "faster_rcnn_resnet18_v1b_voc")
    assert json.load(open(os.path.join(directory, "config.json")))["export_onnx"] is True  # the job wrote it
    assert info["outputs"] == [o.name for o in graph.graph.output]
    assert len(info["outputs"]) == (4 if family == "mask_rcnn" else 3)
    if model.square:
        assert (info["resize"], info["height"], info["width"], info["dynamic_input"]) == ("square", model.short,
                                                                                          model.short, False)
    else:
        assert (info["resize"], info["short"], info["max_size"], info["dynamic_input"]) == (
            "short_side", model.short, model.max_size, True)
    # a picture it was not verified on, of another size (the R-CNN input is dynamic); Mask R-CNN's
    # MXNet answer is its guarded ROIAlign's (the next test)
    rgb = onnx_export.generated_images(model.classes, 1, seed=7)[0]
    expected, got = answers(model, inference.onnx_session(graph.SerializeToString()), rgb)
    assert expected and onnx_export.difference(expected, got) is None


def test_mxnets_cpu_roialign_answers_a_first_roi_followed_by_empty_rows_differently_from_onnx_runtime():
    """Why a Mask R-CNN (FPN) export can part from MXNet on a picture it was not verified on:
    MXNet 1.9.1's CPU ROIAlign answers the first RoI of a list differently when empty rows (batch
    index -1, as the FPN's per-level lists hold for RoIs of other levels) follow it, more so the
    more of them; the same RoI alone, or after an empty row, gets ONNX Runtime's answer."""
    import mxnet as mx
    import onnxruntime
    from onnx import TensorProto, helper

    features = np.random.RandomState(0).randn(1, 8, 12, 17).astype(np.float32)
    box, empty = [0, 0, 0, 132, 96], [-1] * 5

    def mxnet(rows):
        return mx.nd.contrib.ROIAlign(mx.nd.array(features), mx.nd.array(np.array(rows, np.float32)), pooled_size=(7, 7),
                                      spatial_scale=0.125, sample_ratio=2).asnumpy()

    node = helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], output_height=7, output_width=7,
                            sampling_ratio=2, spatial_scale=0.125)
    inputs = [helper.make_tensor_value_info(name, kind, None)
              for name, kind in (("X", TensorProto.FLOAT), ("rois", TensorProto.FLOAT), ("batch", TensorProto.INT64))]
    graph = helper.make_graph([node], "roialign", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_export.OPSET)])
    model.ir_version = onnx_export.IR_VERSION
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx_answer = session.run(None, {"X": features, "rois": np.array([box[1:]], np.float32),
                                     "batch": np.zeros(1, np.int64)})[0][0]
    alone = mxnet([box])[0]
    assert np.abs(alone - onnx_answer).max() < 1e-5 and np.abs(mxnet([empty, box])[1] - alone).max() < 1e-5
    gaps = [np.abs(mxnet([box] + [empty] * n)[0] - alone).max() for n in (1, 9)]
    assert 0.01 < gaps[0] < gaps[1], gaps
    # The guard the project's MXNet inference puts round each ROIAlign (what serve, predict,
    # evaluate and the export's check load): ONNX Runtime's answer for every region, zeros for
    # the empty rows.
    import json

    from detector_training.inference import roialign_guarded

    symbol = mx.sym.contrib.ROIAlign(mx.sym.var("data"), mx.sym.var("rois"), pooled_size=(7, 7),
                                     spatial_scale=0.125, sample_ratio=2)
    guarded = mx.sym.load_json(json.dumps(roialign_guarded(json.loads(symbol.tojson()))))
    rows = np.array([box] + [empty] * 9 + [box], np.float32)
    out = guarded.eval(ctx=mx.cpu(), data=mx.nd.array(features), rois=mx.nd.array(rows))[0].asnumpy()
    assert out.shape == (11, 8, 7, 7)
    assert np.abs(out[0] - onnx_answer).max() < 1e-5 and np.abs(out[10] - onnx_answer).max() < 1e-5
    assert not out[1:10].any()


@pytest.mark.parametrize("family", ["yolo3", "faster_rcnn", "mask_rcnn"])
def test_the_stock_exporter_fails_where_ours_exports(exported, trained_models, tmp_path, family):
    """YOLOv3's file does not load in ONNX Runtime (its upsample's unnamed nodes); the project's
    Faster R-CNN and Mask R-CNN do not convert (``>=`` with a scalar), and given that converter
    still fail: Faster R-CNN's file at the exporter's default opset does not load, Mask R-CNN's -4
    reshapes do not convert."""
    import onnxruntime

    assert os.path.isfile(os.path.join(exported[family], onnx_export.ONNX_FILE))
    fails_to_load = (onnxruntime.capi.onnxruntime_pybind11_state.Fail,)
    if family == "yolo3":
        path = stock_export(trained_models[family], tmp_path / "stock.onnx")
        with pytest.raises(fails_to_load, match="replace the existing tensor"):
            inference.onnx_session(open(path, "rb").read())
        return
    with pytest.raises(AttributeError, match="No conversion function registered for op type _greater_equal_scalar"):
        stock_export(trained_models[family], tmp_path / "stock.onnx")
    with onnx_export.project_converters():
        if family == "faster_rcnn":
            path = stock_export(trained_models[family], tmp_path / "stock.onnx")
            with pytest.raises(fails_to_load, match="Split"):
                inference.onnx_session(open(path, "rb").read())
        else:
            with pytest.raises(AttributeError, match="Shape value not supported in ONNX.*-4"):
                stock_export(trained_models[family], tmp_path / "stock.onnx")


def random_ssd(directory):
    """An untrained SSD (random weights: every class scores alike at every anchor), exported as a
    job exports it: the case where class-agnostic NMS shows."""
    import mxnet as mx

    from detector_training import families
    from detector_training.job.config import from_hyperparameters

    hyperparameters = {"network": "ssd_512_mobilenet1.0_custom", "short": "128", "max_size": "128",
                       "dataset": "custom"}
    config, classes = from_hyperparameters(hyperparameters), ["circle", "square", "triangle"]
    family = families.get(config.network)
    mx.random.seed(0)
    net = family.build_network(config, classes, 1, False, None, mx.cpu())
    net(mx.nd.zeros((1, 3, 128, 128)))
    os.makedirs(directory)
    net.save_parameters(os.path.join(directory, model_dir.FINAL_PARAMS))
    family.export(config, classes, os.path.join(directory, model_dir.FINAL_PARAMS),
                  os.path.join(directory, model_dir.EXPORT_PREFIX), None)
    json.dump(classes, open(os.path.join(directory, model_dir.CLASSES_FILE), "w"))
    json.dump(dict(hyperparameters, short=[128], max_size=128), open(os.path.join(directory, model_dir.CONFIG_FILE), "w"))
    return str(directory)


def test_the_stock_exporter_keeps_fewer_ssd_detections_and_ours_keeps_them_all(tmp_path):
    import onnx

    directory = random_ssd(tmp_path / "ssd")
    model = inference.load_model(directory)
    rgb = onnx_export.generated_images(model.classes, 1)[0]
    stock = inference.onnx_session(open(stock_export(directory, tmp_path / "stock.onnx"), "rb").read())
    expected, got = answers(model, stock, rgb)
    assert len(got) < len(expected)
    assert "no counterpart in ONNX Runtime" in onnx_export.difference(expected, got)
    onnx_export.export_model_directory(directory, [rgb])
    ours = inference.onnx_session(onnx.load(os.path.join(directory, onnx_export.ONNX_FILE)).SerializeToString())
    expected, got = answers(model, ours, rgb)
    assert got == expected or onnx_export.difference(expected, got) is None
    assert len(got) == len(expected)


def test_an_export_that_answers_differently_is_refused_and_nothing_is_written(exported, trained_models, tmp_path):
    import onnx
    from onnx import numpy_helper

    directory = copy_export(trained_models["yolo3"], tmp_path / "yolo3")
    before = sorted(os.listdir(directory))
    with pytest.raises(onnx_export.OnnxExportError) as refused:
        onnx_export.export_model_directory(directory, score_tol=-1.0)  # no score can be that close
    assert sorted(os.listdir(directory)) == before
    assert refused.value.failure_text().startswith(
        "OnnxExportError: yolo3_mobilenet0.25_custom: the ONNX export answers differently from MXNet on sample image 1")
    # a graph whose last convolution's weights were changed: the verification sees it
    graph = onnx.load(os.path.join(exported["yolo3"], onnx_export.ONNX_FILE))
    weights = [t for t in graph.graph.initializer if t.name.endswith("_conv0_weight") and "yolooutputv3" in t.name]
    for tensor in weights:
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * 1.5, tensor.name))
    model = inference.load_model(exported["yolo3"])
    with pytest.raises(onnx_export.OnnxExportError, match=r"yolo3_mobilenet0\.25_custom: .*answers differently"):
        onnx_export.verify(model, graph, onnx_export.generated_images(model.classes, 2), "yolo3_mobilenet0.25_custom")


def test_the_command_exports_a_model_archive_beside_it_and_names_a_bad_model(exported, trained_models, tmp_path,
                                                                          capsys):
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in model_dir.EXPORT_FILES:
            tar.add(os.path.join(trained_models["ssd"], name), arcname=name)
    photo = os.path.join(real_export("raccoon-labelimg-voc", tmp_path / "raccoon"), "images", "raccoon-45.jpg")
    assert onnx_export.main([str(archive), "--image", photo]) == 0
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "model.tar.gz", "onnx.json", "raccoon"]
    assert json.load(open(tmp_path / "onnx.json"))["classes"] == ["circle", "square", "triangle"]
    assert onnx_export.main([str(tmp_path / "onnx.json")]) == 1
    assert "detector-export-onnx: error: not a model: %s is neither" % (tmp_path / "onnx.json") in capsys.readouterr().err


def doc_script():
    """The Python block of docs/onnx.md, as written: sagemaker_launch/run_onnx.py's text, byte for
    byte (the launcher's detect_onnx is that file, so the two cannot drift apart)."""
    text = open(os.path.join(ROOT, "docs", "onnx.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/onnx.md should hold one Python block"
    with open(os.path.join(ROOT, "sagemaker_launch", "run_onnx.py"), "rb") as handle:
        module = handle.read()
    assert blocks[0].encode("utf-8") == module, "docs/onnx.md's block differs from sagemaker_launch/run_onnx.py"
    return blocks[0]


def bare_python(tmp_path):
    """(argv, env) of an interpreter that imports only onnxruntime, numpy and Pillow and what
    they import: no site-packages (-S), a folder of links to those packages on its path."""
    import importlib.util

    site = tmp_path / "site"
    site.mkdir()
    for name in ("onnxruntime", "numpy", "PIL", "flatbuffers", "packaging", "google"):
        spec = importlib.util.find_spec(name)
        folder = os.path.dirname(spec.origin) if spec.origin else list(spec.submodule_search_locations)[0]
        os.symlink(folder, site / name)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)}
    return [sys.executable, "-S"], env


@pytest.mark.parametrize("family", FAMILIES)
def test_the_documented_script_gives_detector_predicts_answer_on_real_photos(exported, tmp_path, family):
    """A 2-epoch job's export, run by docs/onnx.md's script outside the project's environment on
    three raccoon photos (two landscape, one portrait): detector-predict's detections."""
    python, env = bare_python(tmp_path)
    for module in ("mxnet", "gluoncv", "detector_training"):
        probe = subprocess.run(python + ["-c", "import " + module], env=env, capture_output=True, text=True)
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr
    script = tmp_path / "run_onnx.py"
    script.write_text(doc_script())
    photos = os.path.join(real_export("raccoon-labelimg-voc", tmp_path / "raccoon"), "images")
    threshold = "0.05"  # clear of the networks' own 0.01 cut before NMS
    for photo in ("raccoon-45.jpg", "raccoon-89.jpg", "raccoon-9.jpg"):
        path = os.path.join(photos, photo)
        result = subprocess.run(python + [str(script), exported[family], path, threshold], env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "Removing initializer" not in result.stderr, result.stderr[-2000:]
        got = json.loads(result.stdout)
        assert predict.main([exported[family], path, "-o", str(tmp_path / "out.png"), "--json",
                             str(tmp_path / "out.json"), "--threshold", threshold]) == 0
        expected = json.load(open(tmp_path / "out.json"))
        rows = [[(d["class"], d["score"], d["box"]) for d in found] for found in (expected, got)]
        full = [found[-1][1] for found in rows if len(found) >= 100]  # the networks answer at most 100
        assert expected and onnx_export.difference(*rows, threshold=float(threshold), cut=max(full) if full else None) \
            is None, (photo, expected[:3], got[:3])


def test_tied_scores_are_compared_by_class_and_score_and_nothing_else_is_loosened():
    box, moved = [10.0, 10.0, 50.0, 50.0], [18.0, 2.0, 58.0, 42.0]
    mxnet = [(0, 0.9, box), (1, 0.25, box), (1, 0.25, [60.0, 60.0, 90.0, 90.0])]  # class 1: a tie
    # NMS kept another of the tied class-1 boxes, and only one of them: the same answer
    assert onnx_export.difference(mxnet, [(0, 0.9, box), (1, 0.25, moved)]) is None
    assert "tied detections of class 1" in onnx_export.difference(mxnet, [(0, 0.9, box)])
    far = [100.0, 100.0, 140.0, 140.0]  # not the tie's, nor a rival overlapping it
    assert "box 90.00 pixels away" in onnx_export.difference(mxnet, [(0, 0.9, far), (1, 0.25, box)])
    assert "answers 1 detection(s) MXNet does not" in onnx_export.difference(
        mxnet, [(0, 0.9, box), (1, 0.25, box), (2, 0.25, box)])


def test_at_the_cut_of_a_full_output_the_next_candidate_may_stand_in():
    box, other = [10.0, 10.0, 50.0, 50.0], [60.0, 10.0, 99.0, 50.0]
    mxnet = [(0, 0.9, box), (1, 0.28875, box)]  # as many as the network answers: 0.28875 is the cut
    onnx = [(0, 0.9, box), (1, 0.28871, other)]  # its next candidate, 4e-5 lower, made it instead
    assert "box 50.00 pixels away" in onnx_export.difference(mxnet, onnx)
    assert onnx_export.difference(mxnet, onnx, cut=0.28871) is None
    assert "has no counterpart" in onnx_export.difference(mxnet, [onnx[1]], cut=0.28871)  # not above it


def test_a_near_tie_may_keep_the_overlapping_rival_but_every_box_moved_is_refused():
    def row(score, x):
        return (0, score, [x, 352.0, x + 97.7, 415.0])

    mxnet = [row(0.9 - i / 100, 400.0 * i) for i in range(10)]  # ten far-apart boxes
    rival = list(mxnet)
    rival[6] = row(0.84 + 2e-5, 400.0 * 6 - 32.0)  # NMS kept the neighbouring cell's box
    assert onnx_export.difference(mxnet, rival) is None
    moved = [row(score, box[0] - 32.0) for _cid, score, box in mxnet]  # a stride off, every one
    assert "box 32.00 pixels away" in onnx_export.difference(mxnet, moved)
    far = list(mxnet)
    far[6] = row(0.84, 400.0 * 6 - 90.0)  # same score, hardly overlapping: not a rival
    assert "box 90.00 pixels away" in onnx_export.difference(mxnet, far)


@pytest.mark.parametrize("size", [64, 416, 512, 1000], ids=lambda size: "square%d" % size)
def test_the_documented_scripts_resize_makes_mxnets_pixels(tmp_path, size):
    """The script's resize against MXNet's (OpenCV's) on real photos: the R-CNN resize (bilinear)
    pixel for pixel; the square one as MXNet chooses it (area to shrink, bicubic to enlarge,
    bilinear when one side shrinks and the other grows) within one level on at most 1 pixel in 1,000."""
    import mxnet as mx
    from gluoncv.data.transforms import image as timage

    script = {}
    exec(compile(doc_script(), "run_onnx.py", "exec"), script)  # pylint: disable=exec-used
    photos = os.path.join(real_export("raccoon-labelimg-voc", tmp_path / "raccoon"), "images")
    modes = set()
    for photo in ("raccoon-45.jpg", "raccoon-9.jpg", "raccoon-84.jpg", "raccoon-63.jpg"):
        rgb = inference.read_image(os.path.join(photos, photo))
        height, width = rgb.shape[:2]
        image = mx.nd.array(rgb, dtype="uint8")
        short = timage.resize_short_within(image, size, size * 5 // 3, interp=1).asnumpy()
        ours = script["resize"](rgb, short.shape[1], short.shape[0], "linear")
        assert np.array_equal(ours, short), (photo, int((ours != short).sum()))
        mode = "area" if size < min(width, height) else "cubic" if size > max(width, height) else "linear"
        modes.add(mode)
        square = timage.imresize(image, size, size, interp=9).asnumpy().astype(int)
        ours = script["resize"](rgb, size, size, mode).astype(int)
        assert np.abs(ours - square).max() <= 1 and (ours != square).mean() <= 0.001, (photo, mode)
    assert modes == {64: {"area"}, 416: {"linear", "cubic"}, 512: {"linear", "cubic"}, 1000: {"cubic"}}[size]
