"""The Faster R-CNN family (families/faster_rcnn.py): image sizes as GluonCV resizes them, anchor
counts, and RPN proposals fitted to small images."""


import mxnet as mx
import pytest
from detector_training import families
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_voc import generate
from detector_training.errors import ConfigError
from detector_training.families import build_network
from detector_training.families.faster_rcnn import fit_proposals_to_images
from detector_training.job.config import from_hyperparameters


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("voc"))
    generate(root, train_2007=2, test_2007=1, train_2012=0, seed=3)
    return root


@pytest.mark.parametrize("width, height, short, max_size", [
    (160, 120, 64, 96), (120, 160, 64, 96), (200, 120, 64, 96), (500, 375, 600, 1000),
    (1000, 100, 600, 1000), (333, 500, 96, 2000)])
def test_resized_shape_is_gluoncvs_resize_short_within(width, height, short, max_size):
    from detector_training.families.faster_rcnn import resized_shape
    from gluoncv.data.transforms.image import resize_short_within

    image = mx.nd.zeros((height, width, 3), dtype="uint8")
    assert resized_shape(width, height, short, max_size) == resize_short_within(image, short, max_size).shape[:2]


@pytest.mark.parametrize("network, shape", [("faster_rcnn_resnet18_v1b_voc", (64, 85)),
                                            ("faster_rcnn_fpn_resnet50_v1b_coco", (72, 100))])
def test_anchor_count_is_what_the_network_generates(network, shape):
    from detector_training.families.faster_rcnn import anchor_counter

    config = from_hyperparameters({"network": network, "dataset": "custom"})
    net = build_network(config, ("a",), 1, False, None, mx.cpu())
    anchors = [net.rpn.anchor_generator] if not isinstance(
        net.rpn.anchor_generator, mx.gluon.nn.HybridSequential) else list(net.rpn.anchor_generator)
    features = net.features(mx.nd.zeros((1, 3) + shape))
    features = features if isinstance(features, (list, tuple)) else [features]
    real = sum(g(f).shape[1] for g, f in zip(anchors, features))
    assert anchor_counter(net)(shape) == real


def test_default_network_at_short_96_caps_its_proposals_and_says_so(voc_root, caplog):
    config = from_hyperparameters({"dataset": "custom", "pretrained_base": "false",
                                   "train_splits": "2007_trainval", "short": "96"})
    datasets = build_datasets(config, voc_root)
    net = build_network(config, datasets.classes, 1, False, None, mx.cpu())
    with caplog.at_level("INFO"):
        train_post, test_post = families.get(config.network).fit_to_data(
            net, config, datasets)["rpn_post_nms"]
    assert 128 <= train_post < 2000 and test_post == 300
    assert net.rpn._train_post_nms == train_post and net._rpn_test_post_nms == test_post
    assert "rpn proposals: post-NMS proposals capped" in caplog.text
    assert "training 2000 -> %d" % train_post in caplog.text


def test_images_too_small_for_the_sampled_regions_stop_with_the_smallest_size_that_works(voc_root):
    config = from_hyperparameters({"network": "faster_rcnn_fpn_resnet50_v1b_coco", "dataset": "custom",
                                   "pretrained_base": "false", "train_splits": "2007_trainval",
                                   "short": "32", "max_size": "48"})
    datasets = build_datasets(config, voc_root)
    net = build_network(config, datasets.classes, 1, False, None, mx.cpu())
    with pytest.raises(ConfigError) as err:
        fit_proposals_to_images(net, config, datasets)
    text = str(err.value)
    assert "short=32 max_size=48 are too small" in text and "512 regions" in text
    assert "Fix: set short to at least" in text
    size = int(text.split("short to at least ")[1].split()[0])
    bigger = from_hyperparameters({"network": "faster_rcnn_fpn_resnet50_v1b_coco", "dataset": "custom",
                                   "pretrained_base": "false", "train_splits": "2007_trainval",
                                   "short": str(size), "max_size": str(max(48, size))})
    fit_proposals_to_images(net, bigger, datasets)  # the size it names works


def test_a_job_fitted_to_wide_images_at_a_tiny_size_exports(voc_root, tmp_path):
    """The export traces the graph on one image; with the proposals capped at the anchors of the
    job's (wider) smallest images, a 4:3 image of the same short side has fewer anchors than the
    network keeps, and MXNet failed ("Invalid end for end=120 as axis_size is 90")."""
    from detector_training.families.faster_rcnn import anchor_counter

    config = from_hyperparameters({"dataset": "custom", "pretrained_base": "false",
                                   "train_splits": "2007_trainval", "short": "32",
                                   "max_size": "64", "rcnn_num_samples": "16"})
    family = families.get(config.network)
    net = build_network(config, ("circle", "square", "triangle"), 1, False, None, mx.cpu())
    wide = anchor_counter(net)((32, 64))
    assert anchor_counter(net)((32, 42)) < wide  # the 4:3 image has fewer anchors
    family.set_proposal_counts(net, wide, wide)
    net(mx.nd.zeros((1, 3, 32, 64)))
    net.save_parameters(str(tmp_path / "model.params"))
    family.export(config, ("circle", "square", "triangle"), str(tmp_path / "model.params"),
                  str(tmp_path / "model"), {"rpn_post_nms": [wide, wide]})
    from detector_training.families.faster_rcnn import export_shape

    assert export_shape(net, 32, 64, wide) == (32, 64)
    exported = mx.gluon.SymbolBlock.imports(str(tmp_path / "model-symbol.json"), ["data"],
                                            str(tmp_path / "model-0000.params"))
    ids, scores, boxes = exported(mx.nd.zeros((1, 3, 32, 64)))
    assert ids.shape[:2] == scores.shape[:2] == boxes.shape[:2] and boxes.shape[2] == 4
