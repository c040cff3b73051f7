"""The labelled-images form: class order, object counts and the drop tally."""

import pytest

from detector_training.data import labelled
from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet
from detector_training.errors import DataError


def _image(path, *labels):
    return LabelledImage(path, [Box(0, 0, 10, 10, label, where="%s#%d" % (path, i))
                                for i, label in enumerate(labels)], size=(20, 20))


def test_declared_classes_keep_their_order_and_count_objects():
    labelled = LabelledSet([_image("a.jpg", "dog", "cat", "dog"), _image("b.jpg")],
                           classes=("dog", "cat", "bird"))
    assert labelled.class_names() == ("dog", "cat", "bird")
    assert dict(labelled.object_counts()) == {"dog": 2, "cat": 1, "bird": 0}


def test_without_declared_classes_the_names_found_are_sorted():
    labelled = LabelledSet([_image("a.jpg", "zebra", "ant"), _image("b.jpg", "moth")])
    assert labelled.class_names() == ("ant", "moth", "zebra")


def test_drops_count_by_reason_and_keep_a_few_places():
    drops = Drops()
    for i in range(8):
        drops.add("box with no area", "a.xml object %d" % i)
    drops.add("class not asked for", "b.xml object 1", count=3)
    other = Drops()
    other.add("box with no area", "c.xml object 0")
    drops.merge(other)
    assert dict(drops.counts()) == {"box with no area": 9, "class not asked for": 3}
    assert drops.total() == 12
    assert len(drops.examples("box with no area")) == 5
    assert drops.examples("class not asked for") == ["b.xml object 1"]
    assert not Drops() and drops


def _box(xmin, ymin, xmax, ymax, label="cat", where="a.xml line 3"):
    return Box(xmin, ymin, xmax, ymax, label, where=where)


def test_clean_clips_drops_and_counts_each_change():
    image = LabelledImage("a.jpg", [
        _box(-5, 10, 50, 40), _box(-0.5, 0, 99.5, 40, where="edge"), _box(120, 10, 150, 20),
        _box(10, 10, 10, 30), _box(30, 30, 20, 40), _box(5, 5, 20, 20, label="dog"),
        _box(5, 5, 20, 20, label="Cat"), _box(5, 5, 20, 20, label="Cat")], size=(100, 50))
    cleaned = labelled.select(labelled.clean(LabelledSet([image], classes=("cat", "dog"))), ("CAT",))
    boxes = [(b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in cleaned.images[0].boxes]
    assert boxes == [("CAT", 0.0, 10, 50, 40), ("CAT", 0.0, 0, 99.5, 40), ("dog", 5, 5, 20, 20),
                     ("CAT", 5, 5, 20, 20)]  # the other class stays: boxes_of leaves it out
    assert dict(cleaned.drops.counts()) == {labelled.OUTSIDE: 1, labelled.NO_AREA: 2,
                                            labelled.REPEATED_BOX: 1}
    # one pixel past the edge is VOC's 1-based corner read 0-based, not worth reporting
    assert dict(cleaned.adjusted.counts()) == {labelled.CLIPPED: 1}
    assert cleaned.class_names() == ("CAT",)


def test_clean_keeps_a_file_referenced_twice_once_and_keeps_negatives():
    first = LabelledImage("data/a.jpg", [_box(1, 1, 5, 5)], (10, 10), "a.xml")
    again = LabelledImage("data/./a.jpg", [_box(2, 2, 6, 6)], (10, 10), "a copy.xml")
    empty = LabelledImage("data/b.jpg", [_box(1, 1, 5, 5, label="dog")], (10, 10), "b.xml")
    drops = Drops()
    drops.add("listed image without an annotation file", "c.xml")
    cleaned = labelled.clean(LabelledSet([first, again, empty], drops=drops, layout="x"))
    assert [i.path for i in cleaned.images] == ["data/a.jpg", "data/b.jpg"]
    assert cleaned.images[0].boxes[0].xmin == 1
    assert labelled.boxes_of(cleaned.images[1], ("cat",), Drops()) == []  # a negative
    assert cleaned.drops.examples(labelled.REPEATED_IMAGE) == ["a copy.xml"]
    assert cleaned.drops.counts()["listed image without an annotation file"] == 1
    assert cleaned.layout == "x"


def test_clean_without_classes_or_size_keeps_every_box_with_area():
    image = LabelledImage("a.jpg", [_box(-5, -5, 500, 500), _box(3, 3, 3, 9)])
    cleaned = labelled.clean(LabelledSet([image], classes=("cat",)))
    assert len(cleaned.images[0].boxes) == 1 and cleaned.classes == ("cat",)
    assert labelled.clean(cleaned).drops.counts() == cleaned.drops.counts()  # idempotent


def test_class_ids_merged_from_every_place_conflicts_name_both():
    found = [("a.json", {0: "dog"}), ("b.json", {2: "cat", 0: "dog"})]
    assert labelled.merge_class_ids(found, "class_id", "class_ids", "one name", "one id") == {
        0: "dog", 2: "cat"}
    with pytest.raises(DataError, match=r"class_id 0 is 'dog' in a.json but 'puppy' in c.json") \
            as caught:
        labelled.merge_class_ids(found + [("c.json", {0: "puppy"})], "class_id", "class_ids",
                                 "one name", "one id")
    assert caught.value.fix == "one name"
    with pytest.raises(DataError, match=r"class 'dog' has the ids 0 \(a.json\) and 3 \(c.json\)") \
            as caught:
        labelled.merge_class_ids(found + [("c.json", {3: "dog"})], "class id", "ids", "one name",
                                 "one id")
    assert caught.value.fix == "one id"
