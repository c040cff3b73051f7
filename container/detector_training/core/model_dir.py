"""The model directory (``/opt/ml/model``, tarred by SageMaker into ``model.tar.gz``): its layout
and limits, written here and read here.

Written by the main rank, each file atomically (the export's two files too), a full disk a
DiskFullError naming the file:

* while training: ``model-best.params`` and ``validation-best.json`` at each new best mAP;
* after a completed run: ``model.params`` (final; after early stopping the best, with
  ``stopped.json`` saying why it stopped), ``classes.json``, ``config.json`` (effective
  configuration), ``history.json`` (per epoch), ``validation.json`` (last validation), the
  deployable ``model-symbol.json`` + ``model-0000.params`` (the family's export), and the report
  (``training_curves.png``, ``per_class_ap.md``/``.csv``).

Read by inference and evaluation (``read_export``: the export, its classes and configuration) and
by fine-tuning (``START_PARAMS`` and ``read_model_classes``), from a directory or from a
``model.tar.gz`` extracted under ``MODEL_LIMITS`` (``extract_model``). A model may come from a
user, so what is read is capped and shape-checked, and every problem is a
:class:`~detector_training.errors.ModelError`. ``read_model_classes`` is the one place that reads
``classes.json`` for a model: it refuses a list whose length is not the number of classes the
exported network beside it predicts (``predicted_classes``), so that no consumer answers class
ids past the end of the list (or never answers the list's last names).
"""

import json
import logging
import os
import posixpath
import re
from dataclasses import dataclass

from detector_training.core import archive
from detector_training.core.files import (atomic_save, atomic_save_prefix, json_preview, read_json, sweep_temporaries,
                                         write_json)
from detector_training.errors import DiskFullError, ModelError

LOG = logging.getLogger("detector_training")

FINAL_PARAMS = "model.params"
BEST_PARAMS = "model-best.params"
CLASSES_FILE = "classes.json"
CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
VALIDATION_FILE = "validation.json"
VALIDATION_BEST_FILE = "validation-best.json"
STOPPED_FILE = "stopped.json"  # why early stopping ended the run (only then)
EXPORT_PREFIX = "model"  # the family's export: model-symbol.json + model-0000.params
SYMBOL_FILE = EXPORT_PREFIX + "-symbol.json"
EXPORT_PARAMS = EXPORT_PREFIX + "-0000.params"

EXPORT_FILES = (SYMBOL_FILE, EXPORT_PARAMS, CLASSES_FILE, CONFIG_FILE)  # what inference reads
ONNX_FILE = "model.onnx"  # the ONNX export (onnx_export.py), beside the MXNet one
ONNX_JSON = "onnx.json"  # how to feed model.onnx and read its outputs (docs/onnx.md)
ONNX_FILES = (ONNX_FILE, ONNX_JSON)
START_PARAMS = (BEST_PARAMS, FINAL_PARAMS)  # what fine-tuning starts from, in order of preference

# What a model archive may hold: regular files and directories, bounded; the small JSON files
# are read whole, so they are capped well below anything a real model writes.
FILE_CAPS = {CLASSES_FILE: 1 << 20, CONFIG_FILE: 1 << 20, SYMBOL_FILE: 64 << 20, ONNX_JSON: 1 << 20}
MODEL_LIMITS = archive.Limits(max_members=100_000, max_bytes=16 << 30, file_caps=FILE_CAPS)

FIX = "use the model directory (or its model.tar.gz) that a training job wrote."
ONNX_FIX = "export the model again with this image's detector-export-onnx (it rewrites both ONNX files)."


class ModelDirectory:
    """Writes the files of a job's model directory."""

    def __init__(self, path):
        self.path = path
        self.best_validation = None  # what save_best last wrote

    def _file(self, name):
        return os.path.join(self.path, name)

    def save_best(self, net, validation):
        os.makedirs(self.path, exist_ok=True)
        atomic_save(self._file(BEST_PARAMS), net.save_parameters)
        write_json(self._file(VALIDATION_BEST_FILE), validation)
        self.best_validation = validation

    def load_best(self, net, ctx):
        """Put ``model-best.params`` into ``net``; the validation it scored (None when no best
        was saved)."""
        if not os.path.isfile(self._file(BEST_PARAMS)):
            return None
        net.load_parameters(self._file(BEST_PARAMS), ctx=ctx)
        if self.best_validation is None:  # saved before a resume, by this job: its own file,
            # which holds NaN for a class without objects (json's reading, not parse_json's)
            with open(self._file(VALIDATION_BEST_FILE), encoding="utf-8") as handle:
                self.best_validation = json.load(handle)
        return self.best_validation

    def write_final(self, *, family, config, net, classes, effective_config, history, validation,
                    fitted, stopped=None):
        os.makedirs(self.path, exist_ok=True)
        sweep_temporaries(self.path)  # a killed earlier write's, which SageMaker would upload
        atomic_save(self._file(FINAL_PARAMS), net.save_parameters)
        write_json(self._file(CLASSES_FILE), list(classes))
        write_json(self._file(CONFIG_FILE), effective_config)
        write_json(self._file(HISTORY_FILE), history)
        if validation is not None:
            write_json(self._file(VALIDATION_FILE), validation)
        if stopped is not None:
            write_json(self._file(STOPPED_FILE), stopped)
        atomic_save_prefix(self._file(EXPORT_PREFIX),
                           lambda prefix: family.export(config, classes, self._file(FINAL_PARAMS), prefix, fitted))
        from detector_training.core.report import write_report

        try:
            write_report(self.path, history, validation, list(classes), family.loss_names,
                         family.report_columns)
        except DiskFullError:  # not the report's fault: the job's outputs no longer fit
            raise
        except Exception as exc:  # the report is a convenience: it must never fail a trained job
            LOG.warning("report: not written (%s: %s)", type(exc).__name__, exc)
        LOG.info("model: written to %s", self.path)


@dataclass(frozen=True)
class ExportedModel:
    """A model directory's export, with its classes and effective configuration (read, checked)."""

    directory: str
    classes: list
    config: dict

    @property
    def symbol_file(self):
        return os.path.join(self.directory, SYMBOL_FILE)

    @property
    def params_file(self):
        return os.path.join(self.directory, EXPORT_PARAMS)


def missing_files(directory, names=EXPORT_FILES):
    """Which of ``names`` are not regular files in ``directory``."""
    return [name for name in names if not os.path.isfile(os.path.join(directory, name))]


def has_onnx(directory):
    """Whether ``directory`` holds an ONNX export (both ONNX_FILES, regular files)."""
    return not missing_files(directory, ONNX_FILES)


def read_onnx_description(directory):
    """``onnx.json`` of ``directory`` (an object: its fields are checked by the reader that runs
    ``model.onnx``, inference.py); ModelError when it is missing, too large or not a JSON object."""
    if not has_onnx(directory):
        raise ModelError("the model has no ONNX export (%s)." % " + ".join(ONNX_FILES),
                         "train with export_onnx=true, or run detector-export-onnx on the model.")
    description = _read_json(os.path.join(directory, ONNX_JSON))
    if not isinstance(description, dict):
        raise ModelError("%s is not an object." % ONNX_JSON, ONNX_FIX)
    return description


def read_export(directory):
    """The export in ``directory`` with its classes and configuration; ModelError when a file is
    missing, too large, not JSON or not of its shape."""
    missing = missing_files(directory)
    if missing:
        raise ModelError("the model lacks %s." % ", ".join(missing), FIX)
    config = _read_json(os.path.join(directory, CONFIG_FILE))
    if not isinstance(config, dict):
        raise ModelError("%s is not an object." % CONFIG_FILE, FIX)
    return ExportedModel(directory, read_model_classes(directory), config)


# GluonCV's detectors make their class ids with one ``arange`` over the classes they predict, in
# the block that decodes them: MultiPerClassDecoder (Faster R-CNN, Mask R-CNN, SSD:
# ``arange(num_class)``, serialised as start=N, stop=None) and each YOLOOutputV3 (YOLOv3:
# ``arange(0, N)``). The exported graph names each operator after its block, so these are found
# by name whatever prefix the network had; a count the graph does not hold is not guessed.
_CLASS_ID_RANGE = re.compile(r"(?:^|_)(?:multiperclassdecoder|yolooutputv3)\d*__arange\d*$")
CLASSES_FIX = ("use the classes.json that the training job wrote with this network (one name per "
               "class the network predicts, in the order of its outputs), or retrain the model "
               "with the class list you want.")


def read_symbol(symbol_file):
    """An exported network's graph (``<prefix>-symbol.json``, from a model: bytes from outside)
    under the JSON policy, capped by FILE_CAPS; ModelError otherwise."""
    return read_json(symbol_file, FILE_CAPS[SYMBOL_FILE], error=ModelError, fix=FIX)


def predicted_classes(symbol_file):
    """How many classes the exported network in ``symbol_file`` predicts (read from its graph, see
    _CLASS_ID_RANGE), or None when its graph has no class-id operator this reader knows (then
    nothing is checked). ModelError for a file that is not JSON, or a graph whose decoders
    disagree."""
    graph = read_symbol(symbol_file)
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    counts = set()
    for node in nodes if isinstance(nodes, list) else ():  # not a graph: MXNet's loader says so
        if not isinstance(node, dict) or node.get("op") != "_arange" \
                or not _CLASS_ID_RANGE.search(str(node.get("name", ""))):
            continue
        attrs = node.get("attrs") if isinstance(node.get("attrs"), dict) else {}
        try:
            start, stop = float(attrs.get("start", 0)), attrs.get("stop", "None")
            count = int(start if stop in (None, "None") else float(stop) - start)  # NaN, inf: refused
        except (TypeError, ValueError, OverflowError):
            raise ModelError("%s: operator %s has an unreadable range (%s)." % (
                SYMBOL_FILE, node.get("name"), json_preview(attrs)), FIX) from None
        counts.add(count)
    if len(counts) > 1:
        raise ModelError("the network in %s decodes %s classes in different places." % (
            SYMBOL_FILE, " and ".join(str(c) for c in sorted(counts))), FIX)
    return counts.pop() if counts else None


def check_class_count(classes, predicted, network=SYMBOL_FILE):
    """ModelError unless ``classes`` has the ``predicted`` number of names (None: not known)."""
    if predicted is not None and len(classes) != predicted:
        raise ModelError("%s lists %d class%s but the network in %s predicts %d." % (
            CLASSES_FILE, len(classes), "" if len(classes) == 1 else "es", network, predicted),
            CLASSES_FIX)


def read_model_classes(directory):
    """The class names in ``directory``'s classes.json (``read_classes``), checked against the
    exported network beside it when there is one (``predicted_classes``): what every reader of a
    model (serve, detector-predict, evaluation, fine-tuning) takes its class list from."""
    classes = read_classes(os.path.join(directory, CLASSES_FILE))
    symbol = os.path.join(directory, SYMBOL_FILE)
    if os.path.isfile(symbol):
        check_class_count(classes, predicted_classes(symbol))
    return classes


def read_classes(path):
    """The class names in a ``classes.json``: a non-empty list of strings (an error names the
    entry that is not one)."""
    classes = _read_json(path)
    if not isinstance(classes, list) or not classes:
        raise ModelError("%s is not a list of class names." % os.path.basename(path), FIX)
    for index, name in enumerate(classes):
        if not isinstance(name, str):
            raise ModelError("%s: entry %d is %s; class names are strings." % (
                os.path.basename(path), index, json_preview(name)), FIX)
    return classes


def _read_json(path):
    """A model's JSON file through the one reader of untrusted JSON, capped by FILE_CAPS."""
    return read_json(path, FILE_CAPS[os.path.basename(path)], error=ModelError, fix=FIX)


def extract_model(path, parent, names):
    """Extract the members of the model archive ``path`` whose base name is in ``names`` into a new
    directory under ``parent`` (returned), under MODEL_LIMITS and core/archive.py's member policy
    (the whole archive is refused when any member is unsafe). Raises archive.ArchiveError or
    OSError."""
    def wanted(member):
        return member.isfile() and posixpath.basename(member.name) in names

    with open(path, "rb") as handle:
        return archive.extract(handle, parent, limits=MODEL_LIMITS, select=wanted).path


def shallowest_with(root, names):
    """(directory, name): the shallowest directory under ``root`` holding one of ``names`` (a
    tarball may hold a folder), and the first of ``names`` it holds; None when none does."""
    found = []
    for directory, _dirs, files in os.walk(root):
        name = next((n for n in names if n in files), None)
        if name:
            found.append((os.path.relpath(directory, root).count(os.sep) if directory != root else -1,
                          directory, name))
    if not found:
        return None
    _depth, directory, name = min(found)
    return directory, name
