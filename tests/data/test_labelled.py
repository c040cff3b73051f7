"""The labelled-images form: class order, object counts and the drop tally."""

from detector_training.data.labelled import Box, Drops, LabelledImage, LabelledSet


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
