"""Data formats: one module per format says how it is recognised in the channels, which channels
it reads, its preset and data style, its own configuration rules, how it reads training and
validation data and class names, which metric scores it and whether its classes are fixed (see
data_format.py for the seam).

The registry maps each format's name (the ``dataset`` hyperparameter) to it; this module also
recognises a job's format from its channels and stages an evaluation job's data. The built-in
formats are registered here; ``register(cls)`` adds one defined anywhere else, after which the job's
configuration accepts its name and the ordinary job trains on it. Importing this package needs
neither MXNet nor GluonCV.
"""

import dataclasses
import logging
import os
import tempfile

from detector_training.data.common import final_fit
from detector_training.data.formats.builtin import Builtin
from detector_training.data.formats.coco import COCO
from detector_training.data.formats.custom import CustomVOC
from detector_training.data.formats.data_format import (FORMAT_OPTIONS, VALIDATION_CHANNEL, Channel,
                                                        DataFormat, LabelledFormat)
from detector_training.data.formats.ground_truth import GroundTruthManifest
from detector_training.data.formats.voc import VOC
from detector_training.data.formats.yolo import Yolo
from detector_training.errors import DataError
from detector_training.registry import Registry

__all__ = ["FORMAT_OPTIONS", "Channel", "DataFormat", "LabelledFormat", "register", "unregister",
           "get", "names", "all_formats", "recognise", "build_datasets", "EVALUATION_CHANNELS",
           "evaluation_channel", "stage_evaluation_data", "recognise_evaluation_data"]

LOG = logging.getLogger("detector_training")
DEFAULT = "voc"  # the dataset of a job that names none and has no data channel (fetched)
NOT_DATA = ("pretrained", "model", "config")  # channels that never hold training data
# An evaluation job's data: the first of these channels it has.
EVALUATION_CHANNELS = ("test", VALIDATION_CHANNEL)

_REGISTRY = Registry(DataFormat, "data format")
register, unregister, names, get = _REGISTRY.register, _REGISTRY.unregister, _REGISTRY.names, _REGISTRY.get
all_formats = _REGISTRY.instances

for _builtin in (VOC, CustomVOC, COCO, GroundTruthManifest, Yolo, Builtin):
    register(_builtin)


def job_channels(channels_dir, input_data_config):
    """The job's channels that may hold data: every folder under ``channels_dir`` and every
    Pipe-mode channel of ``input_data_config`` (its data comes through FIFOs), without the
    weights, model and config channels. Sorted by name."""
    found = set(input_data_config or {})
    try:
        found.update(n for n in os.listdir(channels_dir)
                     if os.path.isdir(os.path.join(channels_dir, n)))
    except OSError:
        pass
    return [Channel(n, os.path.join(channels_dir, n), dict((input_data_config or {}).get(n) or {}))
            for n in sorted(found) if n not in NOT_DATA]


def recognise(channels_dir, input_data_config=None):
    """The format of the job's data, from its channels' contents: ``(name, channel, where)``.

    Each format looks in the channels it reads. One format found (in one channel or several) is
    the answer; two in one channel, two different ones in different channels, or none in a job
    that has data channels is a DataError listing what each channel holds. A job without data
    channels gets ``DEFAULT`` (voc: the tars are fetched from data_s3_uri or the mirrors)."""
    channels = job_channels(channels_dir, input_data_config)
    if not channels:
        return DEFAULT, None, "no data channel: the VOC tars are fetched"
    return recognised(channels)


def recognised(channels):
    """``(name, channel, where)`` of the one format the channels (:class:`Channel`) hold."""
    found = []  # (format name, channel name, where)
    for channel in channels:
        here = [(fmt.name, channel.name, where) for fmt in all_formats()
                if channel.name in fmt.channels for where in [fmt.recognise(channel)] if where]
        if len(here) > 1:
            raise DataError("channel '%s' holds data of %d formats: %s (its top level: %s)."
                            % (channel.name, len(here), "; ".join(
                                "%s (%s)" % (name, where) for name, _, where in here),
                               shown_names(channel)),
                            "keep one format in the channel, or name it with the 'dataset' "
                            "hyperparameter (one of %s)." % ", ".join(names()))
        found.extend(here)
    kinds = sorted({name for name, _, _ in found})
    if not kinds:
        raise DataError("no data format recognised in the channels: %s."
                        % "; ".join("'%s' holds %s" % (c.name, shown_names(c)) for c in channels),
                        "lay the data out as one of the formats in docs/data.md (%s), or name "
                        "it with the 'dataset' hyperparameter." % ", ".join(names()))
    if len(kinds) > 1:
        raise DataError("the channels hold data of different formats: %s."
                        % "; ".join("'%s': %s (%s)" % (c, n, w) for n, c, w in found),
                        "give every channel data of one format, or name it with the 'dataset' "
                        "hyperparameter.")
    name, channel, where = found[0]
    return name, channel, where


def shown_names(channel, limit=12):
    """A channel's top-level names for a message (the first ``limit``, then how many more)."""
    if channel.pipe and not os.path.isdir(channel.path):
        return "a Pipe-mode stream (%s)" % (channel.config.get("ContentType") or "no content type")
    entries = channel.names()
    if not entries:
        return "nothing"
    more = " and %d more" % (len(entries) - limit) if len(entries) > limit else ""
    return ", ".join(entries[:limit]) + more


def build_datasets(config, data_root, instances=False, fmt=None):
    """Training and validation datasets of the configured format (``config.dataset``); with
    ``val_fraction`` the validation images are carved from the training ones, with ``final_fit``
    the training set is training plus validation images (shared by every family).
    ``instances``: each object's mask too (a family that segments asks for them). The result
    carries the format's metric. ``fmt``: the job's instance of the format (None: a new one)."""
    fmt = fmt or get(config.dataset)
    datasets = fmt.read(config, data_root, instances)
    if config.val_fraction > 0:
        datasets = fmt.carve(datasets, config.val_fraction, config.seed)
    if config.final_fit:
        datasets = final_fit(datasets)
    return dataclasses.replace(datasets, metric=fmt.metric)


# --- an evaluation job's data: the test channel, read as a training job reads its validation ---

def evaluation_channel(channels_dir):
    """(name, folder) of an evaluation job's data channel: ``test``, else ``validation``; a
    DataError when the job has neither."""
    for name in EVALUATION_CHANNELS:
        path = os.path.join(channels_dir, name)
        if os.path.isdir(path):
            return name, path
    raise DataError("an evaluation job (mode=evaluate) has no data: neither a 'test' nor a "
                    "'validation' channel under %s." % channels_dir,
                    "give the job a 'test' channel holding labelled images in any format a "
                    "training job accepts (docs/data.md).")


def stage_evaluation_data(channels_dir, scratch):
    """A channels folder under ``scratch`` (returned) in which the evaluation data channel stands
    as ``train`` and as ``validation`` (links): every format then recognises and reads it as it
    reads a training job's data, and its validation split is the data to score."""
    _name, path = evaluation_channel(channels_dir)
    staged = tempfile.mkdtemp(prefix="evaluation-channels-", dir=scratch)
    for name in ("train", VALIDATION_CHANNEL):
        os.symlink(os.path.realpath(path), os.path.join(staged, name))
    return staged


def recognise_evaluation_data(channels_dir):
    """``recognise`` for an evaluation job: the format of the data in its test (else
    validation) channel, seen as the job sees it once staged (stage_evaluation_data): the
    training and the validation channel."""
    name, path = evaluation_channel(channels_dir)
    fmt, _channel, where = recognised([Channel(n, path) for n in ("train", VALIDATION_CHANNEL)])
    return fmt, name, where
