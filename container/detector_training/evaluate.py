"""Evaluation without training (``mode=evaluate``): a trained model scored on labelled data.

The model is the ``model`` channel's (a model directory, or the ``model.tar.gz`` a training job
wrote, extracted under core/model_dir.py's archive policy); the data is the ``test`` channel's,
else ``validation``'s, in any data format a training job reads (data/formats), read as a training
job reads its validation split. The network is rebuilt by its family from the model's
``config.json`` and loaded with ``model.params`` (what the export was made from), and scored as
training validates, by the same validator (validator.py): each rank detects its shard, the
detections of every rank are scored together, so the mAP is the one a training job reports for
the same model and data. The main rank writes ``evaluation.json`` and the evaluation report (the
pictures and tables of core/eval_report.py) into the model directory (``/opt/ml/model``, which
SageMaker uploads).

Classes: the data's class names must be the model's or a subset of them (scored with a warning:
the model's other classes have no labelled object); anything else is a DataError naming both
lists.
"""

import dataclasses
import json
import logging
import os
import shutil
import tempfile

from detector_training import families, inference
from detector_training.core import archive
from detector_training.core.evaluation import Interrupted
from detector_training.core.files import write_json
from detector_training.core.model_dir import (BEST_PARAMS, EXPORT_FILES, FINAL_PARAMS,
                                              extract_model, read_export, shallowest_with)
from detector_training.core.networks import load_parameters
from detector_training.data import formats
from detector_training.errors import DataError, ModelError, StopError
from detector_training.job.config import FIELDS, validate as check_config_rules
from detector_training.job.sm_env import JobPaths
from detector_training.validator import Validator

LOG = logging.getLogger("detector_training")

EVALUATION_FILE = "evaluation.json"
MODEL_CHANNEL = "model"
PARAMS = (FINAL_PARAMS, BEST_PARAMS)  # the exported (final) model first
# What the model decides about the network and its test images; the job's hyperparameters
# decide the rest (the data format and its options, overlap_threshold, workers).
MODEL_KEYS = ("network", "short", "max_size", "rcnn_num_samples", "nms_threshold")
MODEL_FIX = "put a model.tar.gz (or the model directory) a training job wrote into the 'model' channel."


@dataclasses.dataclass(frozen=True)
class EvaluatedModel:
    directory: str  # the model's files (extracted from its archive where it was one)
    params: str
    classes: list
    config: dict


def model_files(channel, scratch):
    """The model in the 'model' channel: its directory, or the first ``*.tar.gz``/``*.tar`` in
    it, extracted (only the files evaluation reads) under ``scratch``."""
    if channel is None:
        raise DataError("an evaluation job (mode=evaluate) has no 'model' channel.", MODEL_FIX)
    names = EXPORT_FILES + PARAMS
    directory = _model_dir_in(channel)
    if directory is None:
        archives = sorted(n for n in os.listdir(channel) if n.endswith((".tar.gz", ".tgz", ".tar"))
                          and os.path.isfile(os.path.join(channel, n)))
        for name in archives:
            try:
                extracted = extract_model(os.path.join(channel, name), scratch, names)
            except archive.ArchiveError as exc:
                raise DataError("cannot use %s from the 'model' channel: %s." % (name, exc.reason),
                                MODEL_FIX) from None
            directory = _model_dir_in(extracted, walk=True)
            if directory:
                break
    if directory is None:
        raise DataError("the 'model' channel %s holds no model (%s with %s), nor a model.tar.gz "
                        "holding one." % (channel, " or ".join(PARAMS), ", ".join(EXPORT_FILES)),
                        MODEL_FIX)
    try:
        export = read_export(directory)
    except ModelError as exc:
        raise DataError("the 'model' channel's model: %s" % exc.cause, MODEL_FIX) from None
    params = next(os.path.join(directory, n) for n in PARAMS if os.path.isfile(os.path.join(directory, n)))
    return EvaluatedModel(directory, params, list(export.classes), export.config)


def _model_dir_in(root, walk=False):
    if walk:
        found = shallowest_with(root, PARAMS)
        return found[0] if found else None
    return root if any(os.path.isfile(os.path.join(root, n)) for n in PARAMS) else None


def evaluation_config(config, model):
    """The job's typed configuration with the model's network and test sizes (MODEL_KEYS, read
    from its config.json by each field's own parser), its class list, and every image of the
    data scored (no split carved, no image left out), checked again as a whole."""
    values = {}
    for key in MODEL_KEYS:
        if model.config.get(key) is not None:
            values[key] = _model_value(key, model.config[key])
    if inference.square_input(model.config) and model.config.get("test_short") is not None:
        # its validation size (short lists a multi-scale YOLOv3's training sizes)
        values["short"] = _model_value("short", model.config["test_short"])
    values.update(val_fraction=0.0, final_fit=False, skip_empty=False,
                  num_classes=None)  # the model's classes are the list
    if takes_class_list(config):  # label rows then index the model's classes
        values["classes"] = tuple(model.classes)
    # Formats read a training split too: let it be the data to score (a VOCdevkit's or a COCO
    # tree's validation split; the staged channel for the others), so nothing else is needed.
    values["train_splits"] = config.val_splits
    evaluated = dataclasses.replace(config, **values)
    check_config_rules(evaluated)
    return evaluated


def _model_value(key, value):
    """A model's config.json value, typed by the hyperparameter's parser (config.json is bytes
    from the model channel: a bad value is a DataError naming the field)."""
    try:
        return FIELDS[key].metadata["parse"](value)
    except ValueError as exc:
        raise DataError("the 'model' channel's config.json has %s=%s: expected %s."
                        % (key, json.dumps(value)[:60], exc), MODEL_FIX) from None


def takes_class_list(config):
    """Whether the data format takes a class list (the ``classes`` hyperparameter): not one whose
    classes are fixed by the format (``DataFormat.fixed_classes``: voc)."""
    return not formats.get(config.dataset).fixed_classes


def check_fixed_classes(data_classes, model_classes):
    """A format with its own fixed class list (voc): its label rows index that list, so the
    model's must be the same, in the same order."""
    if list(data_classes) != list(model_classes):
        raise DataError("the test data's classes (%s) do not match the model's (%s)."
                        % (", ".join(data_classes), ", ".join(model_classes)),
                        "score a model trained on this dataset, or give the data in a format "
                        "that names its classes (custom, coco, yolo) with the 'dataset' "
                        "hyperparameter.")


def check_classes(data_classes, model_classes):
    """The data's classes against the model's: a DataError naming both lists unless the data's
    are the model's or a subset (then a warning)."""
    data_classes, model_classes = list(data_classes), list(model_classes)
    unknown = [c for c in data_classes if c not in model_classes]
    if unknown:
        raise DataError("the test data's classes (%s) do not match the model's (%s): %s %s not "
                        "among the model's." % (", ".join(data_classes), ", ".join(model_classes),
                                                ", ".join(unknown), "is" if len(unknown) == 1 else "are"),
                        "score the model on data labelled with its classes (all of them or "
                        "some): %s." % ", ".join(model_classes))
    missing = [c for c in model_classes if c not in data_classes]
    if missing:
        LOG.warning("evaluation: the test data has %d of the model's %d classes; %s %s no labelled "
                    "object and no AP", len(data_classes), len(model_classes), ", ".join(missing),
                    "has" if len(missing) == 1 else "have")
    return missing


@dataclasses.dataclass(frozen=True)
class StagedPaths(JobPaths):
    """The job's paths with its channels folder replaced by the staged one
    (formats.stage_evaluation_data)."""

    channels: str = ""

    @property
    def channels_dir(self):
        return self.channels

    def channel(self, name):
        return os.path.join(self.channels, name)


def staged_env(env, channels):
    """The job as its data format sees it: the test data as its training and validation channels
    (File mode)."""
    return dataclasses.replace(env, paths=StagedPaths(env.paths.base, channels), input_data_config={})


def data_classes(fmt, config, root):
    """The class names the test data labels (read by the job's format instance ``fmt`` without a
    class list, once: the datasets are then selected from the same read), None for a format
    whose class list is fixed (voc), named by the model's (``names_by_classes``) or checked by its
    own reader (coco)."""
    if not isinstance(fmt, formats.LabelledFormat) or fmt.names_by_classes:
        return None
    labelled = fmt.read_once(root, formats.VALIDATION_CHANNEL, dataclasses.replace(config, classes=()))
    return labelled.class_names() if labelled is not None else None


def evaluation_data(config, env, world, model, family, scratch):
    """(the datasets to score, the model's classes the data has no object of): the test channel
    staged once under ``scratch``, read once by the job's one instance of its format, its classes
    checked against the model's."""
    staged = staged_env(env, formats.stage_evaluation_data(env.paths.channels_dir, scratch))
    fmt = formats.get(config.dataset)
    root = fmt.data_root(config, staged, world)
    found = data_classes(fmt, config, root)
    missing = check_classes(found, model.classes) if found is not None else []
    datasets = family.read_datasets(config, root, data_format=fmt)
    if found is None and not takes_class_list(config):
        check_fixed_classes(datasets.classes, model.classes)
    return datasets, missing


def run_evaluation(config, env, dist, ctx, stop=None):
    """Score the model channel's model on the test data on every rank; the main rank writes
    evaluation.json and the report. Returns the scores (the same on every rank). ``stop`` (this
    rank's ``requested()``, job/stop.py) ends the scoring at the next image once any rank was
    asked to stop (StopError, nothing written), and the report at once (evaluation.json kept)."""
    world = dist.world
    scratch = tempfile.mkdtemp(prefix="detector-evaluate-rank%d-" % world.rank)
    try:
        model = model_files(env.channel_dir(MODEL_CHANNEL), scratch)
        config = evaluation_config(config, model)
        family = families.get(config.network)
        family.check_config(config)
        datasets, missing = evaluation_data(config, env, world, model, family, scratch)
        if world.is_main:
            LOG.info("evaluation: model %s (%s, classes %s) on %d image(s) of dataset=%s",
                     model.params, config.network, ",".join(model.classes), len(datasets.val),
                     config.dataset)
        net = family.build_network(config, model.classes, 1, False, None, ctx)
        family.fit_to_data(net, config, datasets)  # the proposal caps of these images
        reason = load_parameters(net, model.params, ctx, ignore_extra=True)  # training-only encoders
        if reason:
            raise DataError("cannot load %s from the 'model' channel into %s: %s." % (
                os.path.basename(model.params), config.network, reason), MODEL_FIX)
        loader, indices = family.val_loader(config, net, datasets, world, 0)
        validator = Validator(family, config, datasets, loader, indices, dist, ctx, stop)  # training's
        try:
            LOG.info("evaluation: rank=%d detects %d of the %d image(s)", world.rank,
                     validator.shard, validator.images)
            try:
                result = validator.score(net)
            except Interrupted as exc:
                raise StopError("the evaluation was stopped before it scored all %d image(s) (%s); nothing was "
                                "written." % (validator.images, exc),
                                "run the evaluation again (mode=evaluate) to score the model.") from None
            if world.is_main:
                write_evaluation(env.paths.model_dir, result, model, config, missing, validator)
        finally:
            validator.close()
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_evaluation(out_dir, result, model, config, missing, validator):
    """evaluation.json (the scores as validation.json has them, with what was scored), then the
    validator's report of the exported model, run as serve runs it (a convenience: a failure is
    logged)."""
    os.makedirs(out_dir, exist_ok=True)
    evaluation = dict(result, classes=list(model.classes), dataset=config.dataset,
                      network=config.network, model=os.path.basename(model.params),
                      classes_without_data=missing)
    write_json(os.path.join(out_dir, EVALUATION_FILE), evaluation)
    LOG.info("evaluation: mAP %.4f on %d image(s) (%s); %s", result["mAP"], result["images"],
             ", ".join("%s %.4f" % item for item in result["per_class"].items()),
             os.path.join(out_dir, EVALUATION_FILE))
    try:
        validator.report(model.directory, out_dir)
        LOG.info("evaluation: pictures and tables in %s", out_dir)
    except Exception as exc:  # pylint: disable=broad-except
        LOG.warning("evaluation: report not written (%s: %s)", type(exc).__name__, exc)
    return evaluation
