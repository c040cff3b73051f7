"""The format registry and recognition: each built-in format is found from its channel's contents
(as the job lays it out), two formats in one channel or none is a DataError listing what the
channels hold, and a job that names no dataset gets the recognised one."""

import json
import logging
import os

import pytest

import ground_truth as gt
from detector_training.data import formats
from detector_training.data.formats import DataFormat
from detector_training.data.generated.synthetic_coco import generate as generate_coco
from detector_training.data.generated.synthetic_voc import generate as generate_voc
from detector_training.errors import DataError
from detector_training.job.config_file import load_config
from detector_training.job.sm_env import Environment
from detector_training.core.evaluation import COCO, VOC07


def channels(tmp_path):
    path = tmp_path / "input" / "data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_built_in_formats_are_registered_in_order():
    assert formats.names() == ("voc", "custom", "coco", "manifest", "yolo", "builtin")
    assert formats.get("coco").metric is COCO and formats.get("custom").metric is VOC07
    assert [f.name for f in formats.all_formats() if f.masks] == ["coco"]


def test_register_refuses_a_nameless_class_and_a_taken_name():
    with pytest.raises(ValueError, match="not a named DataFormat"):
        formats.register(type("Nameless", (DataFormat,), {}))
    with pytest.raises(ValueError, match="not a named DataFormat"):
        formats.register(int)
    with pytest.raises(ValueError, match="a data format named coco is registered already"):
        formats.register(type("OtherCOCO", (DataFormat,), {"name": "coco"}))
    assert formats.get("coco").title == "COCO-format JSON"


def test_an_extracted_vocdevkit_is_custom(tmp_path):
    data = channels(tmp_path)
    generate_voc(str(data / "train"), 2, 1, 0)
    assert formats.recognise(str(data)) == ("custom", "train", os.path.join("VOCdevkit", "VOC2007"))


def test_the_official_voc_tars_are_voc(tmp_path):
    data = channels(tmp_path)
    (data / "voc").mkdir()
    (data / "voc" / "VOCtrainval_06-Nov-2007.tar").write_bytes(b"")
    name, channel, where = formats.recognise(str(data))
    assert (name, channel) == ("voc", "voc") and "VOCtrainval_06-Nov-2007.tar" in where


def test_coco_json_is_coco_also_one_folder_down(tmp_path):
    data = channels(tmp_path)
    generate_coco(str(data / "coco" / "export"), 2, 1)
    name, channel, where = formats.recognise(str(data))
    assert (name, channel) == ("coco", "coco")
    assert where.startswith(os.path.join("export", "annotations", "instances_"))


def test_a_manifest_file_or_a_pipe_mode_record_channel_is_manifest(tmp_path):
    data = channels(tmp_path)
    (data / "train").mkdir()
    (data / "train" / "output.manifest").write_text("")
    (data / "images").mkdir()  # the images channel is no format's: not looked at
    assert formats.recognise(str(data), {"train": gt.FILE_CHANNEL}) == (
        "manifest", "train", "output.manifest")
    pipe = channels(tmp_path / "pipe")  # in Pipe mode the channel is FIFOs, no folder
    assert formats.recognise(str(pipe), {"train": gt.PIPE_CHANNEL})[:2] == ("manifest", "train")


def test_without_data_channels_the_job_is_voc_fetched(tmp_path):
    data = channels(tmp_path)
    (data / "pretrained").mkdir()
    assert formats.recognise(str(data))[0] == "voc"
    assert formats.recognise(str(tmp_path / "absent"))[0] == "voc"


def test_two_formats_in_one_channel_are_an_error_listing_both(tmp_path):
    data = channels(tmp_path)
    generate_voc(str(data / "train"), 2, 1, 0)
    (data / "train" / "output.manifest").write_text("")
    with pytest.raises(DataError) as err:
        formats.recognise(str(data))
    text = str(err.value)
    assert "channel 'train' holds data of 2 formats: custom (VOCdevkit" in text
    assert "manifest (output.manifest)" in text
    assert "its top level: VOCdevkit, output.manifest" in text
    assert "'dataset' hyperparameter" in text


def test_different_formats_in_different_channels_are_an_error(tmp_path):
    data = channels(tmp_path)
    generate_voc(str(data / "train"), 2, 1, 0)
    (data / "validation").mkdir()
    (data / "validation" / "output.manifest").write_text("")
    with pytest.raises(DataError, match="the channels hold data of different formats: "
                                        "'train': custom .*'validation': manifest"):
        formats.recognise(str(data))


def test_no_format_is_an_error_listing_what_each_channel_holds(tmp_path):
    data = channels(tmp_path)
    (data / "train" / "images").mkdir(parents=True)
    for i in range(14):
        (data / "train" / ("photo%02d.jpg" % i)).write_bytes(b"")
    with pytest.raises(DataError) as err:
        formats.recognise(str(data))
    text = str(err.value)
    assert "no data format recognised in the channels: 'train' holds images, photo00.jpg" in text
    assert "and 3 more" in text
    assert "docs/data.md" in err.value.fix


def write_job(tmp_path, hyperparameters):
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    return Environment.read(str(tmp_path), environ={})


def test_a_job_without_dataset_takes_the_recognised_format_and_says_so(tmp_path, caplog):
    generate_coco(str(channels(tmp_path) / "train"), 2, 1)
    env = write_job(tmp_path, {"network": "faster_rcnn_resnet18_v1b_voc"})
    with caplog.at_level(logging.INFO, logger="detector_training"):
        config = load_config(env)
    assert config.dataset == "coco" and config.epochs == 26  # COCO's preset
    assert "data: dataset=coco recognised in channel 'train': annotations/instances_" in caplog.text


def test_a_named_dataset_is_not_second_guessed(tmp_path):
    generate_coco(str(channels(tmp_path) / "train"), 2, 1)
    (channels(tmp_path) / "train" / "output.manifest").write_text("")  # two formats: not looked at
    assert load_config(write_job(tmp_path, {"dataset": "custom"})).dataset == "custom"
