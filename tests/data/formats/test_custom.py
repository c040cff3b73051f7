"""dataset=custom on the labelling tools' Pascal VOC exports, laid out as each tool writes them:
recognised in the channel, split into training and validation as the export (or the validation
channel) says, and read into the samples the families train on, grey and 16-bit photos included."""

import os

import numpy as np
import pytest
from PIL import Image

import exports
from detector_training.data import formats
from detector_training.data.formats import build_datasets
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters


def _config(**extra):
    return from_hyperparameters(dict({"dataset": "custom"}, **extra))


def _channels(tmp_path):
    return tmp_path / "input" / "data"


@pytest.mark.parametrize("lay_out, layout", [
    (lambda d: exports.labelimg_beside(d), "labelImg, XML beside each image"),
    (lambda d: exports.labelimg_separate(d), "labelImg, XML in a separate save folder"),
    (lambda d: exports.cvat_voc(os.path.join(d, "task_1")), "CVAT Pascal VOC 1.1 in task_1"),
    (lambda d: exports.roboflow_voc(d), "Roboflow Pascal VOC"),
])
def test_each_export_in_the_train_channel_is_recognised_as_custom(tmp_path, lay_out, layout):
    lay_out(str(_channels(tmp_path) / "train"))
    assert formats.recognise(str(_channels(tmp_path))) == ("custom", "train", layout)


def test_cvat_subsets_train_and_validate_with_the_labelmap_classes(tmp_path):
    exports.cvat_voc(str(_channels(tmp_path) / "train"), subsets=(("Train", 5), ("Validation", 3)),
                     labels=("square", "circle"))
    datasets = build_datasets(_config(), str(_channels(tmp_path)))
    assert datasets.classes == ("square", "circle")
    assert (len(datasets.train), len(datasets.val)) == (5, 3)
    image, label = datasets.train[1]  # the grey photo
    assert image.shape[2] == 3 and len(label) and set(label[:, 4]) <= {0, 1}


def test_roboflow_valid_validates_and_test_is_not_used(tmp_path, caplog):
    made = exports.roboflow_voc(str(_channels(tmp_path) / "train"))
    with caplog.at_level("INFO", "detector_training"):
        datasets = build_datasets(_config(), str(_channels(tmp_path)))
    assert (len(datasets.train), len(datasets.val)) == (6, 3)
    assert "split test of the export not used" in caplog.text
    photo = made["train"][0]
    _, label = datasets.train[0]
    expected = sorted((x0, y0, x1, y1) for _, x0, y0, x1, y1 in photo.objects)
    assert sorted(map(tuple, label[:, :4].tolist())) == expected


def test_a_validation_channel_validates_else_a_seeded_share_is_carved(tmp_path):
    exports.labelimg_beside(str(_channels(tmp_path) / "train"), count=10)
    carved = build_datasets(_config(), str(_channels(tmp_path)))
    assert (len(carved.train), len(carved.val)) == (9, 1)
    exports.labelimg_separate(str(_channels(tmp_path) / "validation"), count=4, seed=5)
    datasets = build_datasets(_config(), str(_channels(tmp_path)))
    assert (len(datasets.train), len(datasets.val)) == (10, 4)


def test_every_photo_mode_is_read_as_three_8_bit_channels(tmp_path):
    made = exports.labelimg_beside(str(_channels(tmp_path) / "train"), count=4, grey=())
    folder = _channels(tmp_path) / "train" / "photos"
    modes = {0: "L", 1: "P", 2: "CMYK", 3: "I;16"}
    for n, mode in modes.items():
        photo = made[n]
        if mode == "I;16":
            grey = np.asarray(photo.image.convert("L")).astype("uint16") * 257
            image = Image.fromarray(grey)
        else:
            image = photo.image.convert(mode)
        if mode in ("P", "I;16"):  # PNG only; the XML still names the .jpg: found by its stem
            image.save(folder / (photo.stem + ".png"))
            os.remove(folder / photo.name)
        else:
            image.save(folder / photo.name)
    datasets = build_datasets(_config(val_fraction="0.25"), str(_channels(tmp_path)))
    samples = [datasets.train[i] for i in range(len(datasets.train))]
    samples += [datasets.val[i] for i in range(len(datasets.val))]
    for image, label in samples:
        assert image.shape[2] == 3 and image.dtype == np.uint8 and len(label)


def test_classes_not_asked_for_are_dropped_and_the_asked_spelling_is_kept(tmp_path, caplog):
    exports.cvat_voc(str(_channels(tmp_path) / "train"), subsets=(("default", 6),))
    with caplog.at_level("INFO", "detector_training"):
        datasets = build_datasets(_config(classes="Circle"), str(_channels(tmp_path)))
    assert datasets.classes == ("Circle",)
    assert "object of a class not trained (square)" in caplog.text


def test_a_broken_annotation_stops_the_read_naming_it(tmp_path):
    made = exports.labelimg_beside(str(_channels(tmp_path) / "train"), count=3)
    path = _channels(tmp_path) / "train" / "photos" / (made[2].stem + ".xml")
    path.write_text(path.read_text().replace("<xmin>", "<xmin>left", 1))
    with pytest.raises(DataError, match=r"%s.xml line \d+: <xmin> of object" % made[2].stem):
        build_datasets(_config(), str(_channels(tmp_path)))


def test_an_export_without_a_training_split_says_what_it_has(tmp_path):
    exports.cvat_voc(str(_channels(tmp_path) / "train"), subsets=(("Test", 2), ("Validation", 2)))
    with pytest.raises(DataError, match="has no training split: its splits are Test, Validation"):
        build_datasets(_config(), str(_channels(tmp_path)))


def test_custom_generates_the_sample_vocdevkit_that_it_then_recognises(tmp_path):
    from detector_training.data import formats
    from detector_training.data.formats.data_format import Channel

    fmt = formats.get("custom")
    fmt.generate(str(tmp_path), n_train=3, n_test=2)
    channel = tmp_path / "voc"
    assert (channel / "VOCdevkit" / "VOC2007" / "Annotations").is_dir()
    assert fmt.recognise(Channel("voc", str(channel))) == "VOCdevkit/VOC2007"


def test_an_object_ticked_difficult_in_labelimg_is_kept_and_no_metric_counts_it(tmp_path):
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

    made = exports.labelimg_beside(str(_channels(tmp_path) / "train"), count=6)
    photo = next(photo for photo in made if len(photo.objects) > 1)
    path = _channels(tmp_path) / "train" / "photos" / (photo.stem + ".xml")
    path.write_text(path.read_text().replace("<difficult>0</difficult>", "<difficult>1</difficult>", 1))
    datasets = build_datasets(_config(val_fraction="0.5", seed="0"), str(_channels(tmp_path)))
    labels = {}
    for split in (datasets.train, datasets.val):
        for i in range(len(split)):
            label = split[i][1]
            labels[tuple(map(tuple, label[:, :4].tolist()))] = label
    ticked = [label for label in labels.values() if (label[:, 5] == 1).any()]
    assert len(ticked) == 1 and (ticked[0][:, 5] == 1).sum() == 1
    assert set(np.concatenate([label[:, 5] for label in labels.values()]).tolist()) == {0.0, 1.0}
    # the VOC metric ignores it: finding only the other objects scores a full AP
    label, found = ticked[0], ticked[0][ticked[0][:, 5] == 0]
    metric = VOC07MApMetric(iou_thresh=0.5, class_names=datasets.classes)
    metric.update(found[None, :, :4], found[None, :, 4:5], np.ones((1, len(found), 1)),
                  label[None, :, :4], label[None, :, 4:5], label[None, :, 5:6])
    assert metric.get()[1][-1] == pytest.approx(1.0)
