"""The built-in Object Detection algorithm's image format, laid out as its channels send it: class
names from categories or ids, images found by ``file``, quirks counted, broken files named."""

import json
import os

import pytest

import builtin_exports as bx
from detector_training.data import labelled
from detector_training.data.readers import builtin_json
from detector_training.errors import DataError


def test_recognised_from_the_four_channels(tmp_path):
    assert builtin_json.recognise(str(tmp_path)) == {}
    bx.builtin_json_channels(str(tmp_path), n_train=2, n_val=1)
    found = builtin_json.recognise(str(tmp_path))
    assert sorted(found) == ["train", "validation"]
    assert found["train"] == (str(tmp_path / "train"), str(tmp_path / "train_annotation"))


def test_both_splits_read_with_class_names_from_categories(tmp_path):
    bx.builtin_json_channels(str(tmp_path), n_train=4, n_val=2, categories={0: "dog", 3: "bone"},
                             size=(64, 48))
    # sparse ids: 0 and 3 named, 1 used by the samples -> rewrite the samples with ids 0 and 3
    for path in builtin_json.annotation_files(str(tmp_path / "train_annotation")) + \
            builtin_json.annotation_files(str(tmp_path / "validation_annotation")):
        document = json.load(open(path))
        for box in document["annotations"]:
            box["class_id"] = 3 if box["class_id"] == 1 else 0
        json.dump(document, open(path, "w"))
    sets = builtin_json.read_splits(str(tmp_path))
    train = sets["train"]
    assert train.classes == ("dog", "bone")
    assert len(train.images) == 4 and len(sets["validation"].images) == 2
    first = train.images[0]
    assert first.path == str(tmp_path / "train" / "sample_image" / "img_000.jpg")
    assert first.size == (64, 48)
    assert [(b.xmin, b.ymin, b.xmax, b.ymax, b.label) for b in first.boxes] == [(16, 12, 33, 25, "dog")]
    assert first.where == os.path.join("train_annotation", "img_000.json")
    assert train.object_counts() == {"dog": 2, "bone": 3}
    assert not train.drops
    assert "built-in" in train.layout


def test_without_categories_the_ids_are_the_names_or_the_classes_hyperparameter(tmp_path):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(3), categories=None)
    assert builtin_json.read_splits(str(tmp_path))["train"].classes == ("0", "1")
    named = builtin_json.read_splits(str(tmp_path), id_names=("dog", "cat", "bird"))["train"]
    assert named.classes == ("dog", "cat", "bird")
    assert {b.label for image in named.images for b in image.boxes} == {"dog", "cat"}
    with pytest.raises(DataError, match=r"class_id 1, beyond the 1 classes named by 'classes'"):
        builtin_json.read_splits(str(tmp_path), id_names=("dog",))


def test_one_id_with_two_names_names_both_files(tmp_path):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(2), categories={0: "dog", 1: "cat"})
    path = tmp_path / "train_annotation" / "img_001.json"
    document = json.load(open(path))
    document["categories"][1]["name"] = "kitten"
    json.dump(document, open(path, "w"))
    with pytest.raises(DataError, match=r"class_id 1 is 'cat' in train_annotation/img_000.json "
                                        r"but 'kitten' in train_annotation/img_001.json"):
        builtin_json.read_splits(str(tmp_path))


def test_image_found_by_name_and_by_the_json_stem(tmp_path):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(3), {0: "dog", 1: "cat"},
                          folder="")
    # the user uploaded the images under another folder than 'file' says, and one without 'file'
    os.makedirs(tmp_path / "train" / "moved")
    for name in ("img_000.jpg", "img_001.jpg"):
        os.rename(tmp_path / "train" / name, tmp_path / "train" / "moved" / name)
    path = tmp_path / "train_annotation" / "img_001.json"
    document = json.load(open(path))
    del document["file"]
    json.dump(document, open(path, "w"))
    images = builtin_json.read_splits(str(tmp_path))["train"].images
    assert [os.path.relpath(i.path, str(tmp_path / "train")) for i in images] == [
        "moved/img_000.jpg", "moved/img_001.jpg", "img_002.jpg"]


def test_quirks_are_clipped_dropped_and_counted(tmp_path):
    items = [("a", (64, 48), [(0, -4.5, 10, 20, 10), (0, 60, 40, 10, 20), (1, 10, 10, 0, 5),
                              (1, 70, 10, 5, 5)]),
             ("b", (64, 48), [(0, 1, 1, 5, 5)]), ("c", (64, 48), [])]
    bx.builtin_json_split(str(tmp_path), "train", items, {0: "dog", 1: "cat"})
    os.remove(tmp_path / "train" / "sample_image" / "b.jpg")
    # a second annotation of a's image, and an image_size that is wrong (the header wins)
    twice = json.load(open(tmp_path / "train_annotation" / "a.json"))
    twice["image_size"] = [{"width": 640, "height": 480, "depth": 3}]
    bx.write_json(str(tmp_path / "train_annotation" / "z.json"), twice)
    train = builtin_json.read_splits(str(tmp_path))["train"]
    assert [os.path.basename(i.path) for i in train.images] == ["a.jpg", "c.jpg"]
    assert [(b.xmin, b.ymin, b.xmax, b.ymax) for b in train.images[0].boxes] == [
        (0.0, 10.0, 15.5, 20.0), (60.0, 40.0, 64.0, 48.0)]
    assert train.images[1].boxes == []  # a negative
    assert train.drops.counts() == {
        builtin_json.NO_IMAGE: 1, labelled.REPEATED_IMAGE: 1, labelled.NO_AREA: 1,
        labelled.OUTSIDE: 1}
    assert train.adjusted.counts() == {labelled.CLIPPED: 2}
    assert train.drops.examples(labelled.NO_AREA) == ["train_annotation/a.json annotations[2]"]
    assert train.drops.examples(labelled.OUTSIDE) == ["train_annotation/a.json annotations[3]"]
    assert train.drops.examples(labelled.REPEATED_IMAGE) == ["train_annotation/z.json"]
    assert train.drops.examples(builtin_json.NO_IMAGE) == [
        "train_annotation/b.json (file sample_image/b.jpg)"]


@pytest.mark.parametrize("text, message", [
    ('{"file": "x.jpg", "annotations": [', r"train_annotation/bad.json is not valid JSON"),
    ('[1, 2]', r"train_annotation/bad.json is not a JSON object"),
    ('{"file": "x.jpg"}', r"train_annotation/bad.json has no annotations list"),
    ('{"annotations": [{"class_id": 0, "left": "ten", "top": 1, "width": 2, "height": 2}]}',
     r"train_annotation/bad.json: annotations\[0\].left is \"ten\", not a number"),
    ('{"annotations": [{"class_id": -1, "left": 1, "top": 1, "width": 2, "height": 2}]}',
     r"annotations\[0\].class_id is -1, not an integer >= 0"),
    ('{"annotations": [{"class_id": 0, "left": 1, "top": 1}]}', r"annotations\[0\] lacks width, height"),
    ('{"annotations": [], "categories": [{"id": 0, "name": "dog"}]}',
     r"categories\[0\] is .*not \{class_id, name\}"),
    ('{"annotations": [], "categories": {"0": "dog"}}', r"categories is .* not a list"),
])
def test_a_broken_file_is_named_with_the_field(tmp_path, text, message):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(1), {0: "dog", 1: "cat"})
    (tmp_path / "train_annotation" / "bad.json").write_text(text)
    with pytest.raises(DataError, match=message) as caught:
        builtin_json.read_splits(str(tmp_path))
    assert "image_size" in caught.value.fix or "JSON" in caught.value.fix


def test_a_huge_annotation_file_is_refused_before_parsing(tmp_path):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(1), {0: "dog", 1: "cat"})
    (tmp_path / "train_annotation" / "huge.json").write_text(" " * (builtin_json.ANNOTATION_CAP + 1))
    with pytest.raises(DataError, match=r"huge.json is larger than"):
        builtin_json.read_splits(str(tmp_path))


def test_no_train_channels_is_a_clear_error(tmp_path):
    bx.builtin_json_split(str(tmp_path), "validation", bx.sample_objects(1), {0: "dog"})
    with pytest.raises(DataError, match=r"needs the channels 'train' \(images\) and 'train_annotation'"):
        builtin_json.read_splits(str(tmp_path))


def test_an_image_whose_header_cannot_be_read_is_named_with_its_annotation(tmp_path):
    bx.builtin_json_split(str(tmp_path), "train", bx.sample_objects(2), {0: "dog", 1: "cat"})
    (tmp_path / "train" / "sample_image" / "img_001.jpg").write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(DataError, match=r"image .*sample_image/img_001.jpg \(of "
                                        r"train_annotation/img_001.json\) cannot be read"):
        builtin_json.read_splits(str(tmp_path))
