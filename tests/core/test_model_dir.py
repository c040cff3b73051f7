"""The model directory (core/model_dir.py): every file of a finished job, and reading one back."""

import json
import os
import tarfile

import pytest

from detector_training.core import archive, model_dir
from detector_training.core.model_dir import ModelDirectory
from detector_training.errors import ModelError


class _Net:
    def save_parameters(self, path):
        with open(path, "wb") as handle:
            handle.write(b"params")


class _Family:
    loss_names = ("a_loss",)
    report_columns = (("AP", "per_class", "mAP"),)

    def __init__(self):
        self.exported = None

    def export(self, config, classes, params_path, prefix, fitted):
        self.exported = (params_path, prefix, fitted)
        with open(prefix + "-symbol.json", "w") as handle:
            handle.write("{}")


def test_model_directory_holds_every_file_of_a_finished_job(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    validation = {"mAP": 0.5, "AP50": 0.5, "per_class": {"a": 0.5}, "images": 2, "epoch": 1}
    directory.save_best(_Net(), validation)
    family = _Family()
    directory.write_final(family=family, config=None, net=_Net(), classes=("a",),
                          effective_config={"epochs": 2}, fitted={"k": 1},
                          history=[{"epoch": 0, "a_loss": 1.0, "lr": 0.1, "mAP": 0.5}],
                          validation=validation)
    names = set(os.listdir(tmp_path / "model"))
    assert names >= {"model.params", "model-best.params", "validation-best.json", "classes.json",
                     "config.json", "history.json", "validation.json", "model-symbol.json",
                     "training_curves.png", "per_class_ap.md", "per_class_ap.csv"}
    assert not [n for n in names if n.startswith(".tmp")]
    params, prefix, fitted = family.exported  # exported beside the model, then renamed into it
    assert (params, fitted) == (str(tmp_path / "model" / "model.params"), {"k": 1})
    assert os.path.basename(prefix) == "model" and os.path.dirname(os.path.dirname(prefix)) == str(tmp_path / "model")
    assert json.load(open(tmp_path / "model" / "model-symbol.json")) == {}



# --- reading: what inference and fine-tuning take from a model directory ------------------------

def write_export(directory, classes=b'["a", "b"]', config=b'{"short": [128], "max_size": 176}'):
    os.makedirs(directory, exist_ok=True)
    for name, data in {model_dir.SYMBOL_FILE: b"{}", model_dir.EXPORT_PARAMS: b"",
                       model_dir.CLASSES_FILE: classes, model_dir.CONFIG_FILE: config}.items():
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)
    return str(directory)


def test_the_writer_and_the_readers_name_the_same_files(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    directory.write_final(family=_Family(), config=None, net=_Net(), classes=("a",),
                          effective_config={"short": [128]}, fitted=None, history=[], validation=None)
    names = set(os.listdir(tmp_path / "model"))
    assert set(model_dir.START_PARAMS) & names == {model_dir.FINAL_PARAMS}
    assert model_dir.missing_files(str(tmp_path / "model")) == [model_dir.EXPORT_PARAMS]  # the fake family exports no params
    assert model_dir.read_classes(str(tmp_path / "model" / model_dir.CLASSES_FILE)) == ["a"]


def test_an_export_is_read_with_its_classes_and_configuration(tmp_path):
    export = model_dir.read_export(write_export(tmp_path / "m"))
    assert export.classes == ["a", "b"] and export.config == {"short": [128], "max_size": 176}
    assert export.symbol_file == str(tmp_path / "m" / "model-symbol.json")
    assert export.params_file == str(tmp_path / "m" / "model-0000.params")


@pytest.mark.parametrize("classes, config, words", [
    (b'["a", "b"]', None, "the model lacks config.json"),
    (b'{"a": 1}', b"{}", "classes.json is not a list of class names"),
    (b"[]", b"{}", "classes.json is not a list of class names"),
    (b'["a", 1]', b"{}", "classes.json: entry 1 is 1; class names are strings"),
    (b"[oops", b"{}", "classes.json is not valid JSON"),
    (b'["a"]', b"[1]", "config.json is not an object"),
    (b'["' + b"a" * (1 << 20) + b'"]', b"{}", "classes.json is larger than the 1048576 bytes allowed"),
])
def test_a_broken_model_directory_is_a_model_error_naming_the_file(tmp_path, classes, config, words):
    directory = write_export(tmp_path / "m", classes, config or b"{}")
    if config is None:
        os.remove(os.path.join(directory, model_dir.CONFIG_FILE))
    with pytest.raises(ModelError) as err:
        model_dir.read_export(directory)
    assert words in str(err.value) and "Fix:" in str(err.value)


def test_a_model_archive_gives_only_the_files_asked_for_under_the_limits(tmp_path):
    source = write_export(tmp_path / "job" / "model")
    with open(os.path.join(source, model_dir.FINAL_PARAMS), "wb") as handle:
        handle.write(b"final")
    tarball = str(tmp_path / "model.tar.gz")
    (tmp_path / "scratch").mkdir()
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(source, arcname="model")
    extracted = model_dir.extract_model(tarball, str(tmp_path / "scratch"), model_dir.EXPORT_FILES)
    directory, name = model_dir.shallowest_with(extracted, (model_dir.SYMBOL_FILE,))
    assert directory == os.path.join(extracted, "model") and name == model_dir.SYMBOL_FILE
    assert sorted(os.listdir(directory)) == sorted(model_dir.EXPORT_FILES)
    assert model_dir.read_export(directory).classes == ["a", "b"]

    oversized = write_export(tmp_path / "big", config=b"{}" + b" " * (1 << 20))
    with tarfile.open(str(tmp_path / "big.tar.gz"), "w:gz") as tar:
        tar.add(oversized, arcname=".")
    with pytest.raises(archive.UnsafeArchive, match="config.json"):
        model_dir.extract_model(str(tmp_path / "big.tar.gz"), str(tmp_path / "scratch"),
                                model_dir.EXPORT_FILES)


def test_the_shallowest_directory_wins_and_the_first_name_within_it(tmp_path):
    for rel in ("deep/er/model.params", "deep/model-best.params", "deep/model.params"):
        os.makedirs(os.path.dirname(tmp_path / rel), exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert model_dir.shallowest_with(str(tmp_path), model_dir.START_PARAMS) == (
        str(tmp_path / "deep"), model_dir.BEST_PARAMS)
    assert model_dir.shallowest_with(str(tmp_path), ("other.json",)) is None


class _LoadableNet(_Net):
    def __init__(self):
        self.loaded = None

    def load_parameters(self, path, ctx=None):
        self.loaded = path


def test_after_early_stopping_the_best_model_is_loaded_and_the_reason_written(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    net = _LoadableNet()
    assert directory.load_best(net, None) is None and net.loaded is None  # no best yet
    best = {"mAP": 0.5, "AP50": 0.5, "per_class": {"a": 0.5, "b": float("nan")}, "images": 2, "epoch": 1}
    directory.save_best(_Net(), best)
    assert directory.load_best(net, None) is best
    assert net.loaded == str(tmp_path / "model" / "model-best.params")
    # after a resume, from the file the run before wrote (NaN for a class without objects)
    resumed = ModelDirectory(str(tmp_path / "model")).load_best(_LoadableNet(), None)
    assert resumed["per_class"]["a"] == 0.5 and resumed["per_class"]["b"] != resumed["per_class"]["b"]
    stopped = {"epoch": 4, "best_epoch": 1, "reason": "mAP did not improve"}
    directory.write_final(family=_Family(), config=None, net=net, classes=("a",), effective_config={},
                          fitted={}, history=[{"epoch": 0, "a_loss": 1.0, "lr": 0.1, "mAP": 0.5}],
                          validation=best, stopped=stopped)
    import json

    with open(tmp_path / "model" / "stopped.json") as handle:
        assert json.load(handle) == stopped


def test_a_run_that_was_not_stopped_early_has_no_stopped_file(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    directory.write_final(family=_Family(), config=None, net=_Net(), classes=("a",), effective_config={},
                          fitted={}, history=[], validation=None)
    assert not os.path.exists(tmp_path / "model" / "stopped.json")


def class_ids_graph(*ranges):
    """An exported graph (MXNet's symbol JSON) with these class-id ranges, as GluonCV's decoders
    serialise them: ("decoder", n) is MultiPerClassDecoder's arange(n), ("yolo", n) YOLOOutputV3's
    arange(0, n); other nodes stand for the rest of a network."""
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "_arange", "name": "fasterrcnn0__arange0", "attrs": {"start": "0", "stop": "1"}, "inputs": []}]
    for index, (kind, count) in enumerate(ranges):
        if kind == "decoder":
            nodes.append({"op": "_arange", "name": "ssd3_multiperclassdecoder0__arange0",
                          "attrs": {"start": str(count), "step": "1.0", "stop": "None"}, "inputs": []})
        else:
            nodes.append({"op": "_arange", "name": "yolov30_yolooutputv3%d__arange0" % index,
                          "attrs": {"start": "0", "step": "1.0", "stop": str(count)}, "inputs": []})
    return json.dumps({"nodes": nodes, "heads": [[0, 0, 0]]}).encode()


@pytest.mark.parametrize("ranges, count", [
    ((("decoder", 5),), 5),
    ((("yolo", 2), ("yolo", 2), ("yolo", 2)), 2),
    ((), None),  # no class-id operator this reader knows: nothing to check
])
def test_the_number_of_classes_a_network_predicts_is_read_from_its_graph(tmp_path, ranges, count):
    path = tmp_path / model_dir.SYMBOL_FILE
    path.write_bytes(class_ids_graph(*ranges))
    assert model_dir.predicted_classes(str(path)) == count


@pytest.mark.parametrize("classes, ranges, words", [
    (b'["a", "b"]', (("decoder", 5),), "classes.json lists 2 classes but the network in model-symbol.json predicts 5."),
    (b'["a"]', (("yolo", 3),) * 3, "classes.json lists 1 class but the network in model-symbol.json predicts 3."),
    (b'["a", "b"]', (("yolo", 2), ("yolo", 3)), "the network in model-symbol.json decodes 2 and 3 classes"),
])
def test_a_class_list_of_another_length_than_the_network_is_a_model_error(tmp_path, classes, ranges, words):
    directory = write_export(tmp_path / "m", classes)
    with open(os.path.join(directory, model_dir.SYMBOL_FILE), "wb") as handle:
        handle.write(class_ids_graph(*ranges))
    with pytest.raises(ModelError) as err:
        model_dir.read_export(directory)
    assert words in str(err.value) and "Fix: " in str(err.value)
    with pytest.raises(ModelError):  # what fine-tuning reads: the same check
        model_dir.read_model_classes(directory)
    os.remove(os.path.join(directory, model_dir.SYMBOL_FILE))  # params and classes.json only: not known
    assert model_dir.read_model_classes(directory) == json.loads(classes)


@pytest.mark.parametrize("start", ["nan", "inf", "-inf", "five", "1e400"])
def test_an_unreadable_class_id_range_is_a_model_error(tmp_path, start):
    """model-symbol.json comes from the model channel: odd numbers in it end as ModelError."""
    graph = json.loads(class_ids_graph(("decoder", 5)))
    graph["nodes"][-1]["attrs"]["start"] = start
    path = tmp_path / model_dir.SYMBOL_FILE
    path.write_text(json.dumps(graph))
    with pytest.raises(ModelError, match="has an unreadable range"):
        model_dir.predicted_classes(str(path))
