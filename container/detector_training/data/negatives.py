"""Images without boxes (negatives), in every format and family: the label such an image
carries, the log line that counts them, and the wrapper that keeps its placeholder away from the
families' target generators.
"""

import logging

import numpy as np


def negative_label(columns=5):
    """The label of an image without boxes (a negative): the one placeholder row GluonCV's COCO
    reader gives such an image (``skip_empty=False``), which its metrics and padding ignore."""
    return np.full((1, columns), -1.0, dtype="float32")


def is_negative(label):
    """Whether a label has no box (only placeholder rows, or none)."""
    return label is None or len(label) == 0 or bool((np.asarray(label)[:, 4] < 0).all())


def log_empty(what, empty, total, skip_empty):
    """Say how many images have no box, and what became of them."""
    if empty:
        logging.getLogger("detector_training").info(
            "%s: %d of %d images have no box of the trained classes: %s", what, empty, total,
            "left out (skip_empty=true)" if skip_empty else "kept as negatives")


class KeepNegatives:
    """A family's training transform for data that holds negatives. GluonCV's transforms move a
    placeholder row like a box (a flip or an expansion makes it a valid-looking box of no size),
    and its target generators then match anchors to it. So the placeholder never reaches them
    beside real boxes (mixup joins both), and a negative's targets are cleared after the
    transform by ``clear(outputs)``: nothing to find in that image."""

    def __init__(self, transform, clear):
        self._transform = transform
        self._clear = clear

    def __call__(self, src, label, *rest):
        real = np.asarray(label)[:, 4] >= 0
        if real.any():
            if not real.all():  # a mixup of a negative with a positive
                rest = tuple([part[i] for i in np.flatnonzero(real)] for part in rest)
                label = label[real]
            return self._transform(src, label, *rest)
        outputs = self._transform(src, label, *rest)
        self._clear(outputs)
        return outputs
