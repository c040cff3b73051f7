"""The LabelledFormat base: a reader's LabelledSet becomes the Datasets the families train on
(classes in the asked order, label rows, boxes of other classes dropped and counted, negatives per
skip_empty, aspect ratios from the sizes, validation from its channel or carved), all logged."""

import logging
import os

import numpy as np
import pytest
from PIL import Image

from detector_training.data.formats import LabelledFormat, build_datasets, register, unregister
from detector_training.data.formats.data_format import Channel
from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters
from detector_training.core.evaluation import VOC07

SETS = {}  # split -> LabelledSet, what the test format's reader returns


class Given(LabelledFormat):
    """Returns the LabelledSets the test put in SETS."""

    name = "given"
    title = "given sets"
    channels = ("train", "validation")

    def read_labelled(self, data_root, split, config):
        return SETS.get(split)


@pytest.fixture(autouse=True)
def given():
    register(Given)
    SETS.clear()
    yield
    unregister(Given.name)


def image(tmp_path, name, size, boxes=(), mode="RGB"):
    path = str(tmp_path / name)
    Image.fromarray(np.full((size[1], size[0], 3), 120, dtype="uint8")).convert(mode).save(path)
    return LabelledImage(path, [Box(*b[:4], label=b[4], where="%s object %d" % (name, i))
                                for i, b in enumerate(boxes)], size=size, where=name + ".txt")


def config(**hps):
    return from_hyperparameters(dict({"dataset": "given", "network": "faster_rcnn_resnet18_v1b_voc"},
                                     **hps))


def test_classes_in_the_asked_order_others_dropped_and_counted(tmp_path, caplog):
    drops = Drops()
    drops.add("box with no area", "b.jpg.txt line 2")
    adjusted = Drops()
    adjusted.add("box partly outside its image (clipped)", "a.jpg.txt line 3")
    SETS["train"] = LabelledSet([image(tmp_path, "a.jpg", (40, 20), [(1, 2, 10, 12, "dog"),
                                                                     (3, 4, 20, 18, "cat")]),
                                 image(tmp_path, "b.jpg", (30, 30), [(5, 5, 9, 9, "bird")])],
                                drops=drops, layout="the test's layout", adjusted=adjusted)
    SETS["validation"] = LabelledSet([image(tmp_path, "c.jpg", (20, 40), [(1, 1, 5, 5, "cat")])])
    with caplog.at_level(logging.INFO, logger="detector_training"):
        data = build_datasets(config(classes="cat,dog"), str(tmp_path))
    assert data.classes == ("cat", "dog") and data.metric is VOC07
    assert len(data.train) == 1 and len(data.val) == 1  # b.jpg has only a bird: left out
    picture, label = data.train[0]
    assert picture.shape == (20, 40, 3)
    assert label.tolist() == [[1, 2, 10, 12, 1, 0], [3, 4, 20, 18, 0, 0]]
    assert data.aspect_ratios == [2.0] and data.val_aspect_ratios == [0.5]
    assert "data: given training: the test's layout, 2 images, objects per class: cat 1, dog 1" \
        in caplog.text
    assert "object of a class not trained (bird): 1 (b.jpg object 0)" in caplog.text
    assert "box with no area: 1 (b.jpg.txt line 2)" in caplog.text
    assert ("data: given training: changed but kept: box partly outside its image (clipped): 1 "
            "(a.jpg.txt line 3)") in caplog.text
    assert "training: 1 of 2 images have no box of the trained classes: left out" in caplog.text


def test_without_classes_the_sets_class_names_and_negatives_kept(tmp_path):
    SETS["train"] = LabelledSet([image(tmp_path, "a.png", (32, 32), [(1, 2, 10, 12, "zebra")]),
                                 image(tmp_path, "grey.png", (32, 32), mode="L")],
                                classes=("zebra", "ant"))
    SETS["validation"] = LabelledSet([image(tmp_path, "c.png", (32, 32), [(1, 1, 5, 5, "ant")])])
    data = build_datasets(config(skip_empty="false"), str(tmp_path))
    assert data.classes == ("zebra", "ant")  # the declared order, not sorted
    assert len(data.train) == 2
    picture, label = data.train[1]
    assert picture.shape == (32, 32, 3) and label.tolist() == [[-1] * 6]  # a negative
    assert data.val[0][1].tolist() == [[1, 1, 5, 5, 1, 0]]


def test_without_validation_data_a_seeded_split_is_carved(tmp_path, caplog):
    SETS["train"] = LabelledSet([image(tmp_path, "%d.jpg" % i, (16, 16), [(1, 1, 8, 8, "a")])
                                 for i in range(10)])
    with caplog.at_level(logging.INFO, logger="detector_training"):
        data = build_datasets(config(), str(tmp_path))
    assert (len(data.train), len(data.val)) == (9, 1)
    assert "carved 1 of 10 training images" in caplog.text
    again = build_datasets(config(val_fraction="0.3"), str(tmp_path))
    assert (len(again.train), len(again.val)) == (7, 3)


def test_no_object_of_the_classes_and_no_training_data_are_errors(tmp_path):
    SETS["train"] = LabelledSet([image(tmp_path, "a.jpg", (16, 16), [(1, 1, 8, 8, "a")])],
                                layout="the test's layout")
    with pytest.raises(DataError, match="no training image of the test's layout has an object "
                                        "of the classes b"):
        build_datasets(config(classes="b"), str(tmp_path))
    SETS.clear()
    with pytest.raises(DataError, match="no training data for dataset=given"):
        build_datasets(config(), str(tmp_path))


def test_an_image_that_does_not_decode_is_named(tmp_path):
    broken = image(tmp_path, "broken.jpg", (16, 16), [(1, 1, 8, 8, "a")])
    open(broken.path, "wb").write(b"not an image")
    SETS["train"] = LabelledSet([broken, image(tmp_path, "b.jpg", (16, 16), [(1, 1, 8, 8, "a")])])
    SETS["validation"] = SETS["train"]
    data = build_datasets(config(), str(tmp_path))
    with pytest.raises(DataError, match="cannot read training/validation image image .*broken.jpg "
                                        "of broken.jpg.txt"):
        data.train[0]


def test_a_channel_lists_its_top_level_and_knows_pipe_mode(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.txt").write_text("")
    assert Channel("train", str(tmp_path)).names() == ["a.txt", "b"]
    assert Channel("train", str(tmp_path / "absent")).names() == []
    assert Channel("train", "", {"TrainingInputMode": "Pipe"}).pipe
    given_format = Given()
    (tmp_path / "train").mkdir()
    assert given_format.channel_path(str(tmp_path), "train") == os.path.join(str(tmp_path), "train")
    assert given_format.channel_path(str(tmp_path), "validation") is None


def test_an_export_is_looked_for_once_per_folder_and_its_absence_named(tmp_path):
    looked = []

    def find(folder):
        looked.append(folder)
        return None if folder.endswith("empty") else ("export of", folder)

    fmt = Given()
    assert fmt.export_in("/ch/train", find, "things", "fix") == ("export of", "/ch/train")
    assert fmt.export_in("/ch/train", find, "things", "fix") == ("export of", "/ch/train")
    assert looked == ["/ch/train"]
    with pytest.raises(DataError, match=r"channel folder /ch/empty holds no things\.") as caught:
        fmt.export_in("/ch/empty", find, "things", "put them there.")
    assert caught.value.fix == "put them there."
    assert Given().export_in("/ch/train", find, "things", "fix") and len(looked) == 3  # per format
