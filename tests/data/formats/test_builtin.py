"""dataset=builtin: the built-in Object Detection algorithm's inputs recognised from its channels
(image format, RecordIO files, RecordIO in Pipe mode, apart from an augmented manifest), read into
the Datasets the families train on (records by offset, not files), both layouts at once refused."""

import os
from types import SimpleNamespace

import pytest

import builtin_exports as bx
import ground_truth as gt
from detector_training.data import formats
from detector_training.data.formats.data_format import LabelledDetection
from detector_training.data.readers.builtin_recordio import RecordDetection
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters
from detector_training.core.evaluation import VOC07

PIPE = {"TrainingInputMode": "Pipe", "ContentType": "application/x-recordio",
        "RecordWrapperType": "None", "S3DistributionType": "FullyReplicated"}


def test_registered():
    assert "builtin" in formats.names() and formats.get("builtin").metric is VOC07


def test_the_image_format_is_recognised_from_its_annotation_channel(tmp_path):
    bx.builtin_json_channels(str(tmp_path), n_train=2, n_val=1)
    assert formats.recognise(str(tmp_path)) == (
        "builtin", "train_annotation", "image format, 2 annotation JSON file(s)")


def test_recordio_files_are_recognised_in_train(tmp_path):
    bx.builtin_recordio_channels(str(tmp_path / "data"), str(tmp_path / "im2rec"), 2, 1)
    assert formats.recognise(str(tmp_path / "data")) == ("builtin", "train", "RecordIO, 1 .rec file(s)")


def test_pipe_mode_recordio_is_builtin_and_a_wrapped_channel_a_manifest(tmp_path):
    os.makedirs(tmp_path / "data")
    assert formats.recognise(str(tmp_path / "data"), {"train": PIPE}) == (
        "builtin", "train", "RecordIO in Pipe mode (application/x-recordio)")
    assert formats.recognise(str(tmp_path / "data"), {"train": gt.PIPE_CHANNEL})[0] == "manifest"


def config(**hyperparameters):
    return from_hyperparameters(dict({"dataset": "builtin"}, **hyperparameters))


def test_the_image_format_reads_into_datasets_with_its_class_names(tmp_path):
    bx.builtin_json_channels(str(tmp_path), n_train=5, n_val=2, categories={0: "dog", 1: "cat"})
    datasets = formats.get("builtin").read(config(), str(tmp_path))
    assert datasets.classes == ("dog", "cat")
    assert (len(datasets.train), len(datasets.val)) == (5, 2)
    assert isinstance(datasets.train.base, LabelledDetection)
    image, label = datasets.train[0]
    assert image.shape == (48, 64, 3) and label.tolist() == [[16, 12, 33, 25, 0, 0]]
    assert datasets.aspect_ratios == [64 / 48.0] * 5


def test_recordio_reads_records_by_offset_named_by_classes(tmp_path):
    bx.builtin_recordio_channels(str(tmp_path / "data"), str(tmp_path / "im2rec"), 4, 0)
    datasets = formats.get("builtin").read(config(classes="dog,cat"), str(tmp_path / "data"))
    assert datasets.classes == ("dog", "cat") and isinstance(datasets.train.base, RecordDetection)
    assert len(datasets.train) + len(datasets.val) == 4  # no validation channel: a carved split
    image, label = datasets.train[0]
    assert image.shape == (48, 64, 3) and label.shape[1] == 6


def test_both_layouts_at_once_are_refused(tmp_path):
    bx.builtin_json_channels(str(tmp_path), n_train=2, n_val=0)
    bx.builtin_recordio_split(str(tmp_path / "im2rec"), str(tmp_path / "train"), "more",
                              bx.sample_objects(2))
    with pytest.raises(DataError, match=r"both of the built-in algorithm's layouts: the image "
                                        r"format \(train_annotation\) and RecordIO \(train: 1 .rec"):
        formats.get("builtin").read(config(), str(tmp_path))


def test_the_data_root_in_pipe_mode_is_the_hosts_copy(tmp_path):
    rec = bx.builtin_recordio_split(str(tmp_path / "im2rec"), str(tmp_path / "s3"), "train",
                                    bx.sample_objects(3))
    channels = tmp_path / "input" / "data"
    os.makedirs(channels)
    writer = gt.FifoWriter(str(channels / "train_0"), open(rec, "rb").read())
    env = SimpleNamespace(paths=SimpleNamespace(channels_dir=str(channels)),
                          input_data_config={"train": PIPE}, work_dir=str(tmp_path / "work"),
                          environ={"DETECTOR_LAUNCH_ID": "test"})
    root = formats.get("builtin").data_root(config(), env, SimpleNamespace(is_local_main=True))
    writer.join()
    assert root == str(tmp_path / "work" / "recordio")
    assert open(os.path.join(root, "train", "train.rec"), "rb").read() == open(rec, "rb").read()
