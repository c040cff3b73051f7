"""Generated COCO-format instance data (data/generated/synthetic_coco.py): each mask covers the shape drawn."""

import json

import numpy as np
import pytest
from detector_training.data.readers.coco_format import annotation_file
from detector_training.data.generated.synthetic_coco import TRAIN_SPLIT, generate
from pycocotools.coco import COCO


@pytest.mark.parametrize("style,names", [("shapes", ["circle", "square", "triangle"]),
                                         ("other", ["ellipse", "cross", "diamond"])])
def test_each_generated_style_masks_the_shape_it_draws(tmp_path, style, names):
    """The learning benchmark's two COCO-format datasets: the style's shapes as categories, and
    each mask on the pixels of its drawn object (one flat colour inside the mask, away from JPEG
    edges), within its box."""
    from PIL import Image
    from scipy.ndimage import binary_erosion

    root = generate(str(tmp_path / style), n_train=6, n_val=2, seed=2, style=style)
    document = json.load(open(annotation_file(root, TRAIN_SPLIT)))
    assert [c["name"] for c in document["categories"]] == names
    files = {i["id"]: i for i in document["images"]}
    coco = COCO(annotation_file(root, TRAIN_SPLIT))  # pycocotools reads the masks back
    checked = 0
    for ann in document["annotations"]:
        image = files[ann["image_id"]]
        pixels = np.asarray(Image.open("%s/train2017/%s" % (root, image["file_name"])), dtype=float)
        mask = coco.annToMask(coco.loadAnns(ann["id"])[0]).astype(bool)
        x, y, w, h = ann["bbox"]
        assert mask.sum() > 0.3 * w * h and not mask[:, :int(x)].any() and not mask[:int(y)].any()
        assert not mask[:, int(x + w) + 1:].any() and not mask[int(y + h) + 1:].any()
        inner = binary_erosion(mask, iterations=2)
        if inner.sum() >= 20:
            assert pixels[inner].std(axis=0).max() < 12, (style, ann["id"])
            checked += 1
    assert checked >= 5
