"""RPN recall at validation in the two R-CNN families (families/faster_rcnn.py, mask_rcnn.py):
each validation image's counts cover exactly its ground-truth objects, in the pixels its proposals
are in, and the score is the recalled share over every rank's images."""

import mxnet as mx
import numpy as np
import pytest

from detector_training import families
from detector_training.core import proposal_recall
from detector_training.core.distributed import SingleProcess
from detector_training.data.generated.synthetic_coco import generate as generate_coco
from detector_training.data.generated.synthetic_voc import generate as generate_voc
from detector_training.job.config import from_hyperparameters

CASES = {
    "faster_rcnn": {"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom",
                    "train_splits": "2007_trainval"},
    "mask_rcnn": {"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco",
                  "train_splits": "instances_train2017", "rcnn_num_samples": "16"},
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    voc = str(tmp_path_factory.mktemp("voc"))
    generate_voc(voc, train_2007=2, test_2007=3, train_2012=0, seed=5)
    return {"faster_rcnn": voc,
            "mask_rcnn": generate_coco(str(tmp_path_factory.mktemp("coco")), n_train=2, n_val=3, seed=5)}


def ground_truth_in_input_pixels(name, loader, indices, reader):
    """Each validation image's objects, in the pixels of the image the network sees, from the
    loader's labels (Faster R-CNN) or the reader's labels times the resize factor (Mask R-CNN)."""
    boxes, positions = [], iter(indices)
    for batch in loader:
        for x, second, *_ in zip(*batch):
            if name == "faster_rcnn":
                label = second.asnumpy()[0]
                boxes.append(label[(label[:, 4] >= 0) & (label[:, 5] < 1), :4])
            else:
                label = np.asarray(reader._labels[next(positions)])  # pylint: disable=protected-access
                label = label[label[:, 4] >= 0]  # an empty image has only the placeholder row
                boxes.append(label[:, :4] * float(second.reshape((-1,))[2].asscalar()))
    return boxes


@pytest.mark.parametrize("name", sorted(CASES))
def test_recall_counts_every_ground_truth_object_once_and_scores_the_share(name, roots, monkeypatch,
                                                                         tmp_path):
    config = from_hyperparameters(dict({"pretrained_base": "false", "num_workers": "0", "short": "96",
                                        "max_size": "128"}, **CASES[name]))
    family, ctx, world = families.get(config.network), mx.cpu(), SingleProcess().world
    datasets = family.read_datasets(config, roots[name])
    net = family.build_network(config, datasets.classes, 1, False, None, ctx)
    family.fit_to_data(net, config, datasets)
    family.materialize(net, family.train_loader(config, net, datasets, world, 1, 1, 0).first_batch(), ctx)
    net.hybridize()
    loader, indices = family.val_loader(config, net, datasets, world, 0)
    truth = ground_truth_in_input_pixels(name, loader, indices, getattr(datasets.val, "base", None))
    objects = sum(len(boxes) for boxes in truth)
    assert objects > 0

    detected = family.detect(net, loader, indices, ctx, datasets)  # the network's own proposals
    assert len(detected) == len(indices)
    assert sum(total for _, (_, total) in detected) == objects
    hits = sum(h for _, (h, _) in detected)
    assert family.evaluate(config, datasets, [detected], str(tmp_path))["rpn_recall"] == pytest.approx(
        hits / objects)

    # An RPN that proposes each object exactly recalls them all; one that proposes nothing, none.
    for proposals, expected in ((truth, 1.0), ([np.zeros((0, 4))] * len(truth), 0.0)):
        given = iter(proposals)
        monkeypatch.setattr(proposal_recall, "rpn_proposals",
                            lambda net_, x, given=given: mx.nd.array(next(given).reshape(1, -1, 4)))
        scored = family.evaluate(config, datasets, [family.detect(net, loader, indices, ctx, datasets)],
                                 str(tmp_path))
        assert scored["rpn_recall"] == expected
