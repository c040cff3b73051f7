"""The Mask R-CNN family's pieces: instance data (polygons and RLE), COCO box and mask AP from
every rank's encoded results, its configuration, and what a from-scratch network needs (BatchNorm
that learns, ROIAlign's skipped RoIs as zeros, fewer sampled RoIs, masks for at most 100
detections)."""

import json

import mxnet as mx
import numpy as np
import pycocotools.mask as cocomask
import pytest
from detector_training import families
from detector_training.data.readers.coco_format import annotation_file
from detector_training.data.formats import build_datasets
from detector_training.data.generated.synthetic_coco import TRAIN_SPLIT, VAL_SPLIT, generate
from detector_training.errors import ConfigError, DataError
from detector_training.families.mask_rcnn import MaskRCNN, score_instances
from detector_training.job.config import from_hyperparameters

NETWORK = "mask_rcnn_fpn_resnet18_v1b_coco"


@pytest.fixture
def coco_root(tmp_path):
    return generate(str(tmp_path / "coco"), n_train=6, n_val=4, seed=1)


def config(**hps):
    return from_hyperparameters(dict({"network": NETWORK, "dataset": "coco"}, **hps))


def instances(root, **hps):
    return families.get(NETWORK).read_datasets(config(**hps), root)


def edit_json(root, split, change):
    path = annotation_file(root, split)
    document = json.load(open(path))
    change(document)
    json.dump(document, open(path, "w"))
    return path


def iou(a, b):
    return np.logical_and(a, b).sum() / float(np.logical_or(a, b).sum())


# --- data ---------------------------------------------------------------------------------------

def test_training_objects_carry_their_masks_from_polygons_and_from_rle(coco_root):
    from gluoncv.data.transforms.mask import to_mask

    datasets = instances(coco_root)
    reader = datasets.train.base
    coco = reader.coco
    document = json.load(open(annotation_file(coco_root, TRAIN_SPLIT)))
    kinds = {a["image_id"]: type(a["segmentation"]).__name__ for a in document["annotations"]}
    assert set(kinds.values()) == {"list", "dict"}  # the generator writes both
    for index in range(len(datasets.train)):
        image, label, segms = datasets.train[index]
        image_id, width, height = reader.images[index]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
        assert len(segms) == len(label) == len(anns) and image.shape[:2] == (height, width)
        for polys, ann in zip(segms, anns):
            assert polys and all(p.ndim == 2 and p.shape[1] == 2 and len(p) >= 3 for p in polys)
            # What the training transform rasterises is the annotated mask (RLE traced to its
            # outline loses a fraction of the boundary pixels at most).
            assert iou(to_mask(polys, (width, height)), coco.annToMask(ann)) > 0.9, kinds[image_id]


def uncompressed_rle(mask):
    """COCO's uncompressed RLE (as labelling tools write it): column-major run lengths, zeros
    first."""
    runs, current, run = [], 0, 0
    for value in mask.flatten(order="F"):
        if value != current:
            runs.append(run)
            current, run = value, 0
        run += 1
    return {"size": list(mask.shape), "counts": runs + [run]}


def test_uncompressed_rle_is_read_and_crowd_objects_train_no_mask(coco_root):
    def change(document):
        first, crowd = document["annotations"][0], document["annotations"][-1]
        image = next(i for i in document["images"] if i["id"] == first["image_id"])
        mask = np.zeros((image["height"], image["width"]), dtype=np.uint8)
        x, y, w, h = first["bbox"]
        mask[y:y + h, x:x + w] = 1
        first["segmentation"] = uncompressed_rle(mask)
        crowd["iscrowd"] = 1
        change.first, change.crowd = first, crowd

    edit_json(coco_root, TRAIN_SPLIT, change)
    datasets = instances(coco_root)
    reader = datasets.train.base
    by_image = {image_id: i for i, (image_id, _, _) in enumerate(reader.images)}
    _image, label, segms = datasets.train[by_image[change.first["image_id"]]]
    x, y, w, h = change.first["bbox"]
    ring = segms[[tuple(row[:4]) for row in label].index((x, y, x + w, y + h))][0]
    # The rectangle's outline, through its border pixels' centres.
    assert ring.min(axis=0).tolist() == [x + 0.5, y + 0.5]
    assert ring.max(axis=0).tolist() == [x + w - 0.5, y + h - 0.5]
    crowd = change.crowd
    others = [a for a in reader.coco.loadAnns(reader.coco.getAnnIds(imgIds=crowd["image_id"]))
              if a["id"] != crowd["id"]]
    if others:
        assert len(reader._labels[by_image[crowd["image_id"]]]) == len(others)
    else:  # its only object was the crowd: nothing to train on that image
        assert crowd["image_id"] not in by_image
    assert crowd["id"] in reader.coco.anns  # still in the ground truth the evaluation reads


@pytest.mark.parametrize("segmentation, words", [
    (None, ["annotation 3 has no usable 'segmentation'", "faster_rcnn_*"]),
    ([], ["annotation 3 has no usable 'segmentation'"]),
    ([[1, 2, 3]], ["annotation 3 has no usable 'segmentation'"]),
    ({"size": [5, 5], "counts": "abc"}, ["annotation 3 has an RLE mask of size [5, 5]",
                                         "at the size of their images"]),
])
def test_an_object_without_a_usable_mask_is_a_data_error_naming_it(coco_root, segmentation, words):
    def change(document):
        ann = document["annotations"][2]  # id 3
        if segmentation is None:
            del ann["segmentation"]
        else:
            ann["segmentation"] = segmentation

    path = edit_json(coco_root, VAL_SPLIT, change)  # validation: the evaluation reads every mask
    with pytest.raises(DataError) as err:
        instances(coco_root)
    assert path in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_the_box_reader_still_reads_data_without_masks(coco_root):
    edit_json(coco_root, TRAIN_SPLIT, lambda d: [a.pop("segmentation") for a in d["annotations"]])
    assert len(build_datasets(from_hyperparameters({"dataset": "coco"}), coco_root).train) == 6


# --- scoring ------------------------------------------------------------------------------------

def ground_truth_results(datasets, mask_of=None):
    """Each validation image's objects as COCO results (score 1), per dataset index."""
    reader = datasets.val.base
    coco = reader.coco
    results = []
    for index, (image_id, _w, _h) in enumerate(reader.images):
        entries = []
        for ann in coco.loadAnns(coco.getAnnIds(imgIds=image_id)):
            rle = cocomask.encode(np.asfortranarray((mask_of or coco.annToMask)(ann)))
            entries.append({"image_id": image_id, "category_id": ann["category_id"],
                            "bbox": list(ann["bbox"]), "score": 1.0,
                            "segmentation": {"size": rle["size"],
                                             "counts": rle["counts"].decode("ascii")}})
        results.append((index, entries))
    return results


def test_perfect_results_score_one_for_boxes_and_masks(coco_root):
    datasets = instances(coco_root)
    scores = score_instances(datasets, [ground_truth_results(datasets)])
    assert scores["mAP"] == scores["AP50"] == scores["mask_mAP"] == scores["mask_AP50"] == 1.0
    assert set(scores["per_class"].values()) == set(scores["mask_per_class"].values()) == {1.0}


def test_every_rank_scores_the_same_whatever_the_order_of_the_gathered_shards(coco_root):
    """Each rank's entries name their images: shards in any order, or one rank holding all,
    score the same (here each true detection has a false twin of the same score)."""
    datasets = instances(coco_root)
    results = []
    for index, entries in ground_truth_results(datasets):
        twins = [dict(e, score=0.5) for e in entries]
        results.append((index, twins + [dict(e, bbox=[e["bbox"][0] + e["bbox"][2], e["bbox"][1],
                                                       e["bbox"][2], e["bbox"][3]]) for e in twins]))
    in_order = score_instances(datasets, [results])
    assert 0.0 < in_order["mAP"] < 1.0 and 0.0 < in_order["mask_mAP"] < 1.0  # the twins count
    assert score_instances(datasets, [results[1::2], results[0::2]]) == in_order
    assert score_instances(datasets, [results[::-1][:2], [], results[::-1][2:]]) == in_order


def test_masks_are_scored_apart_from_their_boxes(coco_root):
    datasets = instances(coco_root)
    coco = datasets.val.base.coco

    def box_as_mask(ann):  # a right box, but the whole box as the mask
        mask = np.zeros_like(coco.annToMask(ann))
        x, y, w, h = [int(round(v)) for v in ann["bbox"]]
        mask[y:y + h, x:x + w] = 1
        return mask

    scores = score_instances(datasets, [ground_truth_results(datasets, box_as_mask)])
    assert scores["mAP"] == 1.0 and scores["mask_per_class"]["square"] == 1.0
    # A circle fills pi/4 of its box: matched at IoU 0.50..0.75, not from 0.80 on: 6 of 10.
    assert scores["mask_per_class"]["circle"] == pytest.approx(0.6) and scores["mask_mAP"] < 0.8


def test_no_results_at_all_score_zero():
    class Val:  # what score_instances reads of the validation data
        base = type("Reader", (), {"coco": None})

    datasets = type("Datasets", (), {"val": Val, "classes": ("a", "b")})
    scores = score_instances(datasets, [[(0, [])], [(1, [])]])
    assert scores == {"mAP": 0.0, "AP50": 0.0, "per_class": {"a": 0.0, "b": 0.0}, "mask_mAP": 0.0,
                      "mask_AP50": 0.0, "mask_per_class": {"a": 0.0, "b": 0.0}}


# --- configuration ------------------------------------------------------------------------------

def test_the_preset_is_gluoncvs_train_mask_rcnn():
    c = config()
    assert (c.batch_size, c.epochs, c.lr_decay_epoch, c.lr_warmup, c.wd, c.no_wd) == (
        8, 26, (17, 23), 1000, 1e-4, True)
    assert c.effective_lr(8) / c.global_batch(8) == pytest.approx(0.00125)  # per image
    assert config(no_wd="false", batch_size="16").effective_lr(8) == pytest.approx(0.02)
    assert config(no_wd="false").no_wd is False
    assert from_hyperparameters({"dataset": "coco"}).no_wd is False  # Faster R-CNN: unchanged


@pytest.mark.parametrize("hps, words", [
    ({"dataset": "voc"}, ["network=%s trains on dataset=coco only, not dataset=voc" % NETWORK]),
    ({"dataset": "custom"}, ["not dataset=custom"]),
    ({"dataset": "coco", "mixup": "true", "epochs": "30"}, ["mixup=true applies to faster_rcnn and yolo3 networks only, not to %s" % NETWORK]),
    ({"dataset": "coco", "final_fit": "true"}, ["final_fit=true applies to faster_rcnn and yolo3"]),
])
def test_what_a_mask_network_cannot_train_on_is_refused(hps, words):
    with pytest.raises(ConfigError) as err:
        from_hyperparameters(dict({"network": NETWORK}, **hps))
    for word in words:
        assert word in str(err.value)


def test_every_listed_mask_network_is_a_gluoncv_model_zoo_name():
    from gluoncv.model_zoo.model_zoo import get_model_list

    assert set(MaskRCNN.networks) <= set(get_model_list())
    assert families.get(NETWORK).name == "mask_rcnn"


# --- the network from scratch --------------------------------------------------------------------

def batchnorm_global_stats(net):
    """use_global_stats of every BatchNorm: Gluon layers and the FPN's symbol."""
    flags = [b._kwargs["use_global_stats"] for b in _blocks(net) if isinstance(b, mx.gluon.nn.BatchNorm)]
    features = net.features(mx.sym.var("data"))
    graph = json.loads(mx.sym.Group(list(features) if isinstance(features, (list, tuple))
                                    else [features]).tojson())
    flags += [n["attrs"].get("use_global_stats") == "True" for n in graph["nodes"] if n["op"] == "BatchNorm"]
    return flags


def _blocks(block):
    yield block
    for child in block._children.values():
        yield from _blocks(child)


@pytest.mark.parametrize("network", ["mask_rcnn_fpn_resnet18_v1b_coco", "mask_rcnn_resnet18_v1b_coco"])
def test_batchnorm_learns_its_statistics_from_scratch_and_stays_frozen_on_imagenet_weights(
        tmp_path, network):
    from conftest import make_backbone_file

    scratch = families.build_network(config(network=network), ("a",), 1, False, None, mx.cpu())
    flags = batchnorm_global_stats(scratch)
    assert len(flags) >= 20 and not any(flags)
    make_backbone_file(str(tmp_path))
    weighted = families.build_network(config(network=network), ("a",), 1, True, str(tmp_path), mx.cpu())
    assert all(batchnorm_global_stats(weighted))  # GluonCV's frozen BatchNorm, as it builds it


def test_rois_that_roialign_skips_pool_to_zeros_on_cpu():
    """GluonCV's FPN pooling gives the RoIs of other levels batch index -1; MXNet's CPU ROIAlign
    left their output as the memory was (1e30 and NaN were seen)."""
    from detector_training.core.networks import zero_skipped_rois

    zero_skipped_rois()
    data = mx.nd.ones((2, 4, 8, 8))
    rois = mx.nd.array([[-1, 1, 1, 5, 5], [0, 1, 1, 5, 5], [1, 1, 1, 5, 5], [-1, -1, -1, -1, -1]])
    block = mx.gluon.nn.HybridLambda(lambda F, x, r: F.contrib.ROIAlign(x, r, (2, 2), 1.0, sample_ratio=2))
    block.hybridize()
    for _ in range(5):
        garbage = mx.nd.full((200000,), float("nan"))  # memory the pool hands out next
        del garbage
        for out in (mx.nd.contrib.ROIAlign(data, rois, (2, 2), 1.0, sample_ratio=2), block(data, rois)):
            flat = out.reshape((4, -1)).asnumpy()
            assert (flat[[0, 3]] == 0).all() and (flat[[1, 2]] == 1).all()


def test_fewer_sampled_rois_and_masks_for_at_most_100_detections(coco_root):
    family = families.get(NETWORK)
    c = config(rcnn_num_samples="64", short="96", max_size="144")
    datasets = family.read_datasets(c, coco_root)
    net = family.build_network(c, datasets.classes, 2, False, None, mx.cpu())
    assert net._num_sample == 64 and net.sampler._num_sample == 64
    assert net.sampler._max_pos == 16  # GluonCV's pos_ratio 0.25 of them
    fitted = family.fit_to_data(net, c, datasets)
    assert net._rcnn_max_dets == min(100, fitted["rpn_post_nms"][1])
    family.set_proposal_counts(net, 200, 60)  # fewer test proposals than detections
    assert net._rcnn_max_dets == 60 and net._rpn_test_post_nms == 60


def test_predict_draws_each_mask_in_its_class_colour_under_the_boxes(tmp_path):
    from detector_training.predict import MASK_OPACITY, colour_for, draw
    from PIL import Image

    image = str(tmp_path / "grey.png")
    Image.new("RGB", (80, 60), (100, 100, 100)).save(image)
    mask = np.zeros((60, 80), dtype=np.uint8)
    mask[20:40, 10:50] = 1
    rle = cocomask.encode(np.asfortranarray(mask))
    detection = {"class": "circle", "score": 0.9, "box": [10, 20, 49, 39],
                 "mask": {"size": [60, 80], "counts": rle["counts"].decode("ascii")}}
    assert draw(image, [detection], str(tmp_path / "out.png")) == 1
    pixels = np.asarray(Image.open(str(tmp_path / "out.png")), dtype=np.float32)
    blended = (1 - MASK_OPACITY) * 100 + MASK_OPACITY * np.array(colour_for("circle"))
    assert np.abs(pixels[30, 25] - blended).max() <= 1  # inside the mask, off the outline
    assert (pixels[50, 70] == 100).all()  # outside: the image as it was
    assert (pixels[30, 10] == colour_for("circle")).all()  # the box outline over the mask


def test_a_few_class_mask_predictor_starts_every_mask_near_one_half():
    """GluonCV's initialiser scales the mask predictor by its fan-out (the class count): with 3
    classes its weights had std 0.76 and the mask loss of a from-scratch job diverged."""
    family = families.get(NETWORK)
    net = family.build_network(config(), ("a", "b", "c"), 1, False, None, mx.cpu())
    family.set_proposal_counts(net, 300, 50)
    with mx.autograd.predict_mode():
        _ids, _scores, _boxes, masks = net(mx.nd.random.uniform(shape=(1, 3, 96, 96)))
    assert net.mask.mask.weight.data().asnumpy().std() == pytest.approx(0.001, rel=0.2)
    assert 0.4 < masks.min().asscalar() and masks.max().asscalar() < 0.6
