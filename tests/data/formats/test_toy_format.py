"""A data format defined outside the package trains through the ordinary job once it is
registered: the proof that a new format is one module (what it declares, recognise and
read_labelled on the LabelledFormat base) and nothing else."""

import csv
import json
import logging
import os
import shutil
from xml.etree import ElementTree as ET

import pytest
from conftest import TINY
from detector_training.data import formats
from detector_training.data.formats import LabelledFormat
from detector_training.data.labelled import Box, LabelledImage, LabelledSet
from detector_training.data.generated.synthetic_voc import generate
from detector_training.main import job_main

LABELS = "boxes.csv"  # file,xmin,ymin,xmax,ymax,class per line; images beside it


class ToyCSV(LabelledFormat):
    """One CSV of boxes in the channel, beside the images."""

    name = "toycsv"
    title = "toy CSV boxes"
    channels = ("train", "validation")
    preset = dict(epochs=1, lr=0.02, lr_decay_epoch=(1,), lr_warmup=-1, wd=5e-4,
                  lr_base_batch_size=2, train_splits=("train",), val_splits=("validation",))

    def recognise(self, channel):
        return LABELS if LABELS in channel.names() else None

    def read_labelled(self, data_root, split, config):
        folder = self.channel_path(data_root, split)
        if folder is None:
            return None
        images = {}
        with open(os.path.join(folder, LABELS)) as handle:
            for number, row in enumerate(csv.reader(handle), 1):
                path = os.path.join(folder, row[0])
                image = images.setdefault(path, LabelledImage(path, size=(int(row[6]), int(row[7]))))
                image.boxes.append(Box(*map(float, row[1:5]), label=row[5],
                                       where="%s line %d" % (LABELS, number)))
        return LabelledSet(images=list(images.values()), layout="toy CSV in '%s'" % split)


def voc_to_csv(devkit, split, channel):
    """The generated VOC split's images and boxes, laid out as the toy format."""
    os.makedirs(channel)
    year = os.path.join(devkit, "VOC2007")
    rows = []
    for image_id in open(os.path.join(year, "ImageSets", "Main", split + ".txt")).read().split():
        tree = ET.parse(os.path.join(year, "Annotations", image_id + ".xml"))
        shutil.copy(os.path.join(year, "JPEGImages", image_id + ".jpg"), channel)
        size = tree.find("size")
        for obj in tree.iter("object"):
            box = obj.find("bndbox")
            rows.append([image_id + ".jpg"] + [box.find(k).text for k in ("xmin", "ymin", "xmax", "ymax")]
                        + [obj.find("name").text, size.find("width").text, size.find("height").text])
    with open(os.path.join(channel, LABELS), "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return len(rows)


@pytest.fixture
def toy_registered():
    formats.register(ToyCSV)
    yield ToyCSV
    formats.unregister(ToyCSV.name)


@pytest.fixture
def restored_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def toy_job(tmp_path, hyperparameters):
    base = tmp_path / "job"
    devkit = generate(str(tmp_path / "voc"), train_2007=6, test_2007=2, train_2012=0, seed=3)
    voc_to_csv(devkit, "trainval", str(base / "input" / "data" / "train"))
    voc_to_csv(devkit, "test", str(base / "input" / "data" / "validation"))
    (base / "input" / "config").mkdir(parents=True)
    (base / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    return str(base)


def test_a_registered_toy_format_is_recognised_and_trains_through_the_ordinary_job(
        tmp_path, toy_registered, restored_logging, capsys):
    hyperparameters = {k: v for k, v in TINY.items()
                       if k not in ("dataset", "train_splits", "epochs", "lr", "lr_decay_epoch")}
    base = toy_job(tmp_path, dict(hyperparameters, batch_size="2", log_interval="1"))
    assert job_main(base, install_signals=False) == 0, \
        open(os.path.join(base, "output", "failure")).read()
    out = capsys.readouterr().out
    assert "dataset=toycsv recognised in channel 'train': %s" % LABELS in out
    assert "data: toycsv training: toy CSV in 'train', 6 images" in out
    assert "data: toycsv validation: toy CSV in 'validation', 2 images" in out
    assert "finished: rank=0 steps=3 epochs=0..0" in out  # epochs=1: the format's preset
    model = os.path.join(base, "model")
    assert json.load(open(os.path.join(model, "config.json")))["dataset"] == "toycsv"
    assert 0.0 <= json.load(open(os.path.join(model, "validation.json")))["mAP"] <= 1.0
    report = open(os.path.join(model, "data_report.md")).read()  # the job's data check
    assert "## Training: toy CSV in 'train'\n\n6 images" in report
    assert "## Validation: toy CSV in 'validation'\n\n2 images" in report
    assert os.path.isfile(os.path.join(model, "data_report.png"))


def test_without_registration_the_toy_data_is_not_recognised(tmp_path, restored_logging):
    base = toy_job(tmp_path, {"network": "faster_rcnn_resnet18_v1b_voc"})
    assert job_main(base, install_signals=False) == 1
    failure = open(os.path.join(base, "output", "failure")).read()
    assert "no data format recognised in the channels" in failure
    assert LABELS in failure  # what the channel holds is listed
