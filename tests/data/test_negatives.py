"""What every format and family shares about images without boxes: the placeholder label and
the transform wrapper that keeps it from the target generators."""

import numpy as np

from detector_training.data.negatives import KeepNegatives, is_negative, negative_label


def test_a_negative_is_a_label_of_placeholder_rows_or_none():
    assert is_negative(negative_label()) and is_negative(np.zeros((0, 6))) and is_negative(None)
    assert not is_negative(np.array([[1, 2, 3, 4, 0], [-1, -1, -1, -1, -1]]))


def test_beside_real_boxes_a_negatives_placeholder_never_reaches_the_transform():
    """Mixup joins a negative's placeholder row to another image's boxes."""
    seen, cleared = [], []
    transform = KeepNegatives(lambda img, label, segm: seen.append((label.tolist(), segm)) or [img],
                              cleared.append)
    label = np.array([[1, 2, 3, 4, 0], [-1, -1, -1, -1, -1], [5, 6, 7, 8, 1]], dtype="float32")
    transform("image", label, ["a", "placeholder", "b"])
    assert seen == [([[1, 2, 3, 4, 0], [5, 6, 7, 8, 1]], ["a", "b"])] and cleared == []
    transform("image", label[1:2], ["placeholder"])  # a negative alone: transformed, then cleared
    assert seen[-1] == ([[-1, -1, -1, -1, -1]], ["placeholder"]) and cleared == [["image"]]
