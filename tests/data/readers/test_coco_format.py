"""COCO-format data with its own categories: the reader, class subsets, bad input, and the COCO
metric's results read correctly (strings, percent, a summary first)."""

import json
import os

import numpy as np
import pytest

from detector_training.job.config import from_hyperparameters
from detector_training.data.formats import build_datasets
from detector_training.errors import DataError
from detector_training.core.evaluation import coco_result, combine, make_metric
from detector_training.data.generated.synthetic_coco import TRAIN_SPLIT, VAL_SPLIT, generate


@pytest.fixture
def coco_root(tmp_path):
    return generate(str(tmp_path / "coco"), n_train=6, n_val=4, seed=1)


def config(**hps):
    return from_hyperparameters(dict({"dataset": "coco"}, **hps))


def ground_truth_as_predictions(val, drop_class=None):
    results = []
    for index in range(len(val)):
        _img, label = val[index]
        label = label[(label[:, 4] >= 0) & (label[:, 4] != (-9 if drop_class is None else drop_class))]
        results.append((index, label[None, :, :4], label[None, :, 4:5],
                        np.ones((1, len(label), 1)), None, None, None))
    return results


def test_own_categories_come_from_the_training_json(coco_root, tmp_path):
    datasets = build_datasets(config(), coco_root)
    assert datasets.classes == ("circle", "square", "triangle")  # ids 1, 3, 5: not COCO's 80
    assert len(datasets.train) == 6
    assert len(datasets.val) == 4  # every validation image, the one without objects too
    assert datasets.val.base.contiguous_id_to_json == {0: 1, 1: 3, 2: 5}
    assert len(datasets.val_aspect_ratios) == 4 and len(datasets.aspect_ratios) == 6
    # Training entries have file_name only (found under train2017/); validation ones coco_url.
    assert all("/train2017/" in p for p in datasets.train.base._items)
    image, label = datasets.train[0]
    assert image.shape[2] == 3 and label.shape[1] == 5 and set(label[:, 4]) <= {0, 1, 2}


def test_gluoncvs_own_reader_refuses_such_a_file(coco_root):
    """Why coco_format.py exists: GluonCV's COCODetection takes only COCO's 80 names."""
    from gluoncv.data import COCODetection

    with pytest.raises(ValueError, match="Incompatible category names"):
        COCODetection(root=coco_root, splits=[TRAIN_SPLIT])


def test_classes_pick_a_subset_scored_alone(coco_root):
    datasets = build_datasets(config(classes="Triangle,circle"), coco_root)
    assert datasets.classes == ("circle", "triangle")  # in the JSON's id order
    assert datasets.val.base.contiguous_id_to_json == {0: 1, 1: 5}
    for index in range(len(datasets.train)):
        assert set(datasets.train[index][1][:, 4]) <= {0, 1}
    metric = make_metric(datasets, os.path.join(coco_root, "v"))
    result = combine(metric, [ground_truth_as_predictions(datasets.val)], coco=True)
    assert result == {"mAP": 1.0, "AP50": 1.0, "per_class": {"circle": 1.0, "triangle": 1.0}}


def test_coco_metric_results_are_fractions_with_ap50_from_all_ranks(coco_root):
    datasets = build_datasets(config(), coco_root)
    metric = make_metric(datasets, os.path.join(coco_root, "v"))
    predictions = ground_truth_as_predictions(datasets.val, drop_class=2)  # no triangle found
    shards = [predictions[1::2], predictions[0::2]]  # as two ranks return them, out of order
    result = combine(metric, shards, coco=True)
    assert result["per_class"]["circle"] == 1.0 and result["per_class"]["triangle"] == 0.0
    assert 0.0 < result["mAP"] < 1.0 and 0.0 < result["AP50"] < 1.0
    metric.reset()
    empty = [(i, np.zeros((1, 0, 4)), np.zeros((1, 0, 1)), np.zeros((1, 0, 1)), None, None, None)
             for i in range(len(datasets.val))]
    assert combine(metric, [empty], coco=True) == {
        "mAP": 0.0, "AP50": 0.0, "per_class": {"circle": 0.0, "square": 0.0, "triangle": 0.0}}


SUMMARY = "\n".join([
    " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.412",
    " Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ] = 0.637",
    " Average Precision  (AP) @[ IoU=0.75      | area=   all | maxDets=100 ] = 0.450",
    " Average Recall     (AR) @[ IoU=0.50:0.95 | area= large | maxDets=100 ] = -1.000"])


def test_coco_result_reads_strings_in_percent_after_the_summary():
    names = ["~~~~ Summary metrics ~~~~\n", "cat", "traffic light",
             "~~~~ MeanAP @ IoU=[0.50,0.95] ~~~~\n"]
    result = coco_result(names, [SUMMARY, "40.0", "42.5", "41.2"], ("cat", "traffic light"))
    assert result == {"mAP": pytest.approx(0.412), "AP50": pytest.approx(0.637),
                      "per_class": {"cat": pytest.approx(0.40), "traffic light": pytest.approx(0.425)}}
    # GluonCV's answer when pycocotools has nothing to score, and a NaN headline.
    assert coco_result(["mAP"], ["0.0"], ("cat",)) == {"mAP": 0.0, "AP50": 0.0, "per_class": {"cat": 0.0}}
    assert coco_result(names, [SUMMARY.replace("0.637", "-1.000"), "nan", "nan", "nan"],
                       ("cat", "traffic light"))["mAP"] == 0.0


def rewrite(root, split, change):
    path = os.path.join(root, "annotations", split + ".json")
    document = json.load(open(path))
    change(document)
    with open(path, "w") as handle:
        json.dump(document, handle)


@pytest.mark.parametrize("change, hps, words", [
    (lambda d: d["images"][1].update(file_name="gone.jpg"), {}, ["1 image(s)", "gone.jpg", "train2017/"]),
    (lambda d: d.pop("categories"), {}, ["no 'categories' list"]),
    (lambda d: d["annotations"][0].pop("bbox"), {}, ["lacks bbox"]),
    (lambda d: d["images"][0].pop("file_name"), {}, ["neither file_name nor coco_url"]),
    (lambda d: d["categories"].append({"id": 9, "name": "circle"}), {}, ["several categories circle"]),
    (lambda d: None, {"classes": "hexagon"}, ["hexagon", "it has: circle, square, triangle"]),
])
def test_bad_coco_data_is_a_data_error_with_cause_and_fix(coco_root, change, hps, words):
    rewrite(coco_root, TRAIN_SPLIT, change)
    with pytest.raises(DataError) as err:
        build_datasets(config(**hps), coco_root)
    text = str(err.value)
    assert text.startswith("DataError:") and "Fix:" in text
    for word in words:
        assert word in text, text


def test_exports_without_area_or_iscrowd_are_read(coco_root):
    def strip(document):
        for ann in document["annotations"]:
            ann.pop("area"), ann.pop("iscrowd")

    rewrite(coco_root, TRAIN_SPLIT, strip)
    rewrite(coco_root, VAL_SPLIT, strip)
    datasets = build_datasets(config(), coco_root)
    metric = make_metric(datasets, os.path.join(coco_root, "v"))
    assert combine(metric, [ground_truth_as_predictions(datasets.val)], coco=True)["mAP"] == 1.0


def test_missing_annotations_and_invalid_json(coco_root, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no annotations/instances_train2017.json"):
        build_datasets(config(), str(empty))
    with open(os.path.join(coco_root, "annotations", VAL_SPLIT + ".json"), "w") as handle:
        handle.write("{broken")
    with pytest.raises(DataError, match="is not valid JSON"):
        build_datasets(config(), coco_root)


def test_data_one_folder_down_in_the_channel_is_found(coco_root, tmp_path):
    channel = tmp_path / "channel"
    channel.mkdir()
    os.rename(coco_root, str(channel / "mydata"))
    assert build_datasets(config(), str(channel)).classes == ("circle", "square", "triangle")


def test_an_annotation_file_named_by_path_stays_inside_the_channels(tmp_path):
    from detector_training.data.readers.coco_format import named_annotation_file

    channels = tmp_path / "data"
    (channels / "coco" / "labels").mkdir(parents=True)
    (channels / "coco" / "labels" / "instances_val2017.json").write_text("{}")
    (tmp_path / "outside.json").write_text("{}")
    images, split, path = named_annotation_file(str(channels), "val", "coco/labels/instances_val2017.json", "")
    assert (images, split) == (str(channels / "coco" / "labels"), "instances_val2017")
    assert path == str(channels / "coco" / "labels" / "instances_val2017.json")
    assert named_annotation_file(str(channels), "val", "coco/labels/instances_val2017.json",
                                 "coco/pictures")[0] == str(channels / "coco" / "pictures")
    for annotation, images, expected in (("../outside.json", "", "val_annotation_file=../outside.json lies outside"),
                                         ("coco/labels/instances_val2017.json", "/tmp", "val_image_dir=/tmp lies outside"),
                                         ("coco/labels/missing.json", "", "no such file in the job's channels")):
        with pytest.raises(DataError, match=expected):
            named_annotation_file(str(channels), "val", annotation, images)


DEEP = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize("change, words", [
    (lambda d: None, None),  # the generated document itself is valid
    (lambda d: d["annotations"][0].update(bbox=[1, 2, 3]), "annotations[0].bbox is [1, 2, 3]; it must be four numbers"),
    (lambda d: d["annotations"][0].update(bbox=["1", 2, 3, 4]), "annotations[0].bbox is [\"1\", 2, 3, 4]"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, 3, True]), "annotations[0].bbox"),
    (lambda d: d["categories"][1].update(id=str(d["categories"][1]["id"])), "categories[1].id is \"3\"; it must be a "
                                                                            "number or a string, of the same type"),
    (lambda d: d["categories"][0].update(name=7), "categories[0].name is 7; it must be a string"),
    (lambda d: d["images"][0].update(width="640"), "images[0].width is \"640\"; it must be a positive number"),
    (lambda d: d["images"][1].update(id=str(d["images"][1]["id"])), "images[1].id"),
    ("NaN", "NaN, which JSON does not allow"),
    ("1e999", "a number too large for a float"),
    ("DEEP", "nested more than 64 levels deep"),
])
def test_annotations_that_lie_are_refused_naming_the_file_and_the_field(coco_root, change, words):
    from detector_training.data.readers.coco_format import annotation_file, read_document

    path = annotation_file(coco_root, TRAIN_SPLIT)
    document = json.load(open(path))
    if callable(change):
        change(document)
        text = json.dumps(document)
    else:  # written into the first box as the raw text a broken exporter would leave
        text = json.dumps(dict(document, annotations=[dict(document["annotations"][0], bbox=[0, 0, 1, 1])]
                               + document["annotations"][1:]))
        text = text.replace("[0, 0, 1, 1]", "[0, 0, 1, %s]" % (DEEP if change == "DEEP" else change), 1)
    with open(path, "w") as handle:
        handle.write(text)
    if words is None:
        assert read_document(path)["annotations"]
        return
    with pytest.raises(DataError) as caught:
        read_document(path)
    assert path in caught.value.cause and words in caught.value.cause


def test_val_fraction_carves_coco_validation_by_image_id_and_the_metric_scores_that_part(coco_root):
    """val_fraction on COCO data: a seeded share of the training file's images, by id, instead of
    the validation file; the metric's ground truth is the carved part, so the ground truth given
    back as predictions scores 1."""
    whole = build_datasets(config(), coco_root)
    carved = build_datasets(config(val_fraction="0.5"), coco_root)
    assert len(carved.val) == 3 and len(carved.train) == len(whole.train) - 3
    train_files = set(carved.train.base._items)
    val_files = set(carved.val.base._items)
    assert not train_files & val_files and val_files <= set(whole.train.base._items)
    assert len(carved.val.base._coco[0].getImgIds()) == 3  # the metric's ground truth
    metric = make_metric(carved, os.path.join(coco_root, "carved"))
    assert combine(metric, [ground_truth_as_predictions(carved.val)], coco=True)["mAP"] == 1.0
    again = build_datasets(config(val_fraction="0.5"), coco_root)  # seeded: the same split
    assert set(again.val.base._items) == val_files
