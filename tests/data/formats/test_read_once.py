"""A job parses each annotation file once on a rank: it reads its data through one instance of
the data format, and the data report describes the sets that instance read (main.read_data)."""

import collections
import os

import pytest

import builtin_exports as bx
import exports
import ground_truth as gt
from detector_training.data import formats
from detector_training.data.readers import builtin_json, coco_exports, coco_format, voc_xml, yolo_labels
from detector_training.data.readers import manifest as manifest_lines
from detector_training.data.generated.synthetic_voc import generate
from detector_training.job import check_data
from detector_training.job.config import from_hyperparameters

# (module, function, index of its path argument): where each reader parses an annotation file.
PARSERS = [(voc_xml, "parse_annotation", 1), (yolo_labels, "parse_labels", 1),
           (yolo_labels, "load_yaml", 0), (manifest_lines, "read_lines", 0),
           (builtin_json, "read_json", 0), (coco_format, "read_document", 0),
           (coco_exports, "read_document", 0)]


def cvat(data):
    exports.cvat_voc(os.path.join(data, "train"), subsets=(("Train", 6), ("Validation", 2)))


def labelimg(data):
    exports.labelimg_beside(os.path.join(data, "train"))


def roboflow_yolo(data):
    exports.roboflow_yolo(os.path.join(data, "train"))


def manifest(data):
    gt.file_mode_job(os.path.dirname(os.path.dirname(data)), {}, count=6, validation=2)


def builtin_json(data):
    bx.builtin_json_channels(data, n_train=5, n_val=2)


def official_voc(data):  # the VOCdevkit tree the job extracts from the official tars
    generate(os.path.join(data, "voc"), train_2007=5, test_2007=2, train_2012=2, seed=1,
             classes=("dog", "person"))


def coco_tree(data):  # GluonCV's COCO layout, generated
    from detector_training.data.generated.synthetic_coco import generate as generate_coco

    generate_coco(os.path.join(data, "coco"), 5, 2, seed=1)


def roboflow_coco(data):
    bx.roboflow_coco(os.path.join(data, "train"), {"train": bx.sample_objects(5), "valid": bx.sample_objects(2)})


LAYOUTS = [("voc", official_voc), ("coco", coco_tree), ("coco", roboflow_coco), ("custom", cvat), ("custom", labelimg), ("yolo", roboflow_yolo),
           ("manifest", manifest), ("builtin", builtin_json)]


@pytest.mark.parametrize("dataset, make", LAYOUTS, ids=[m.__name__ for _, m in LAYOUTS])
def test_training_and_the_data_report_parse_each_annotation_file_once(tmp_path, monkeypatch,
                                                                        dataset, make):
    data = str(tmp_path / "input" / "data")
    os.makedirs(data, exist_ok=True)
    make(data)
    parsed = collections.Counter()
    for module, name, where in PARSERS:  # every parser of an annotation file, counted by file
        real = getattr(module, name)

        def counting(*args, _real=real, _where=where, **kwargs):
            parsed[os.path.realpath(args[_where])] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
    config = from_hyperparameters({"dataset": dataset})
    fmt = formats.get(dataset)  # the job's one instance, as main.read_data holds it
    root = {"voc": os.path.join(data, "voc"),  # acquire_voc's folder
            "coco": os.path.join(data, "coco")}.get(dataset, data)  # the COCO channel
    if not os.path.isdir(root):  # an export: the channels folder
        root = data
    datasets = formats.build_datasets(config, root, fmt=fmt)
    report = check_data.DataReport(data, dataset, "the job's dataset")
    check_data.describe(report, fmt, fmt.labelled_root(root, data), config)
    assert report.ok, report.problems
    assert len(datasets.train) and parsed, "no annotation file was parsed"
    twice = {path: n for path, n in parsed.items() if n > 1}
    assert not twice, "parsed more than once: %s" % twice


def counted_parses(monkeypatch):
    parsed = collections.Counter()
    for module, name, where in PARSERS:
        real = getattr(module, name)

        def counting(*args, _real=real, _where=where, **kwargs):
            parsed[os.path.realpath(args[_where])] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
    return parsed


EVALUATED = [("custom", cvat), ("custom", labelimg), ("yolo", roboflow_yolo), ("coco", roboflow_coco)]


@pytest.mark.parametrize("dataset, make", EVALUATED, ids=[m.__name__ for _, m in EVALUATED])
def test_an_evaluation_reads_its_test_data_once_for_its_classes_and_its_datasets(tmp_path, monkeypatch,
                                                                                  dataset, make):
    """mode=evaluate learns the test data's classes (to check them against the model's) and
    scores the model's classes from one read (evaluate.evaluation_data, as run_evaluation calls it)."""
    from detector_training import evaluate, families
    from detector_training.core.distributed import World
    from detector_training.job.sm_env import Environment

    base = tmp_path / "opt_ml"
    data = str(base / "input" / "data")
    os.makedirs(data)
    make(data)
    os.rename(os.path.join(data, "train"), os.path.join(data, "test"))
    os.makedirs(base / "input" / "config")
    env = Environment.read(str(base), {})
    config = from_hyperparameters({"dataset": dataset, "mode": "evaluate"})
    family = families.get(config.network)
    (tmp_path / "look").mkdir()
    data_classes = formats.get(dataset).read(config, formats.stage_evaluation_data(
        data, str(tmp_path / "look"))).classes  # the data's own classes, read before counting
    # a model class the data has no object of: scored with a warning (COCO's reader refuses it)
    extra = ["unlabelled"] if isinstance(formats.get(dataset), formats.LabelledFormat) else []
    model = evaluate.EvaluatedModel("model", "model.params", list(data_classes) + extra, {})
    config = evaluate.evaluation_config(config, model)
    parsed = counted_parses(monkeypatch)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    datasets, missing = evaluate.evaluation_data(config, env, World(), model, family, str(scratch))
    assert missing == extra and tuple(datasets.classes) == tuple(model.classes)
    assert len(datasets.val) and parsed, "no annotation file was parsed"
    twice = {path: n for path, n in parsed.items() if n > 1}
    assert not twice, "parsed more than once: %s" % twice
