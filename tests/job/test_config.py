import json

import pytest

from detector_training.job import config as cfg
from detector_training.errors import ConfigError


def build(**hps):
    return cfg.from_hyperparameters(hps)


def test_defaults_follow_the_voc_preset():
    c = build()
    assert c.network == "faster_rcnn_resnet50_v1b_voc"
    assert c.epochs == 20
    assert c.lr == pytest.approx(0.001)
    assert c.lr_decay_epoch == (14, 20)
    assert c.wd == pytest.approx(5e-4)
    assert c.lr_warmup == -1 and c.warmup_iters == 0
    assert c.train_splits == ("2007_trainval", "2012_trainval")
    assert c.val_splits == ("2007_test",)


def test_coco_preset_and_user_value_precedence():
    c = build(dataset="coco", epochs="3")
    assert c.epochs == 3  # user beats preset
    assert c.lr == pytest.approx(0.01)
    assert c.lr_decay_epoch == (17, 23)
    assert c.lr_warmup == 1000
    assert c.wd == pytest.approx(1e-4)


@pytest.mark.parametrize("raw, expected", [
    ("true", True), ("True", True), ("\"True\"", True), ("1", True), ("yes", True), ("YES", True),
    ("false", False), ("False", False), ("\"False\"", False), ("0", False), ("no", False),
    (True, True), (False, False),
])
def test_booleans_never_use_string_truthiness(raw, expected):
    assert build(mixup=raw, no_mixup_epochs="0").mixup is expected


@pytest.mark.parametrize("raw, expected", [
    ("14,20", (14, 20)), ("[14, 20]", (14, 20)), ("\"14,20\"", (14, 20)), ("15", (15,)),
    ([3, 7], (3, 7)), ("\"[5]\"", (5,)),
])
def test_lists_from_json_or_commas(raw, expected):
    assert build(lr_decay_epoch=raw).lr_decay_epoch == expected


@pytest.mark.parametrize("raw, expected", [("0.01", 0.01), ("\"0.01\"", 0.01), (0.5, 0.5), ("1e-3", 0.001)])
def test_numbers_plain_or_json_quoted(raw, expected):
    assert build(lr=raw).lr == pytest.approx(expected)


def test_strings_json_quoted_or_plain():
    assert build(network="\"faster_rcnn_resnet101_v1d_voc\"").network == "faster_rcnn_resnet101_v1d_voc"
    assert build(network="faster_rcnn_resnet101_v1d_voc").network == "faster_rcnn_resnet101_v1d_voc"
    assert build(dataset="custom", classes="cat,dog").classes == ("cat", "dog")
    assert build(dataset="custom", classes="[\"cat\", \"dog\"]").classes == ("cat", "dog")


def test_sagemaker_keys_are_set_aside():
    c = build(sagemaker_program="x.py", sagemaker_region="\"us-east-1\"",
              _tuning_objective_metric="validation:mAP", epochs="2")
    assert c.epochs == 2


def test_unknown_key_names_the_closest_valid_key():
    with pytest.raises(ConfigError) as err:
        build(lrr="0.1", epoch="3")
    text = str(err.value)
    assert "unknown hyperparameter 'epoch'" in text and "did you mean 'epochs'" in text
    assert "unknown hyperparameter 'lrr' (did you mean 'lr'?)" in text


@pytest.mark.parametrize("key", ["start_epoch", "save_prefix", "horovod"])
def test_a_far_name_gets_no_suggestion(key):
    # 'start_epoch' is 0.61 like 'static_alloc' by difflib's ratio: not near enough to suggest.
    with pytest.raises(ConfigError) as err:
        build(**{key: "0"})
    assert "unknown hyperparameter '%s'." % key in str(err.value)


@pytest.mark.parametrize("key, value, expected", [
    ("epochs", "ten", "an integer"),
    ("epochs", "0", ">= 1"),
    ("lr", "-1", "(0, 10]"),
    ("lr", "nan", "finite"),
    ("mixup", "maybe", "a boolean"),
    ("network", "yolo3", "one of"),
    ("momentum", "1.5", "[0, 1)"),
    ("lr_decay_epoch", "a,b", "list of integers"),
    ("short", "16", ">= 32"),
])
def test_bad_values_name_key_value_and_expectation(key, value, expected):
    with pytest.raises(ConfigError) as err:
        build(**{key: value})
    text = str(err.value)
    assert "%s=%s" % (key, value) in text and expected in text


@pytest.mark.parametrize("hps, expected", [
    (dict(lr_decay_epoch="20,14"), "strictly increasing"),
    (dict(classes="a,b"), "only used with dataset=custom or coco"),
    (dict(dataset="coco", val_splits="a,b"), "COCO validation reads one annotation file"),
    (dict(dataset="custom", classes="a,a"), "duplicates"),
    (dict(mixup="true"), "never mixes"),
    (dict(train_splits="trainval"), "YEAR_NAME"),
])
def test_impossible_combinations(hps, expected):
    with pytest.raises(ConfigError) as err:
        build(**hps)
    assert expected in str(err.value)


def test_coco_takes_a_subset_of_classes():
    assert build(dataset="coco", classes="circle,square").classes == ("circle", "square")


@pytest.mark.parametrize("batch, world, per_rank", [(None, 4, 1), (8, 4, 2), (1, 1, 1), (6, 3, 2)])
def test_per_rank_batch(batch, world, per_rank):
    c = build(**({} if batch is None else {"batch_size": str(batch)}))
    assert c.per_rank_batch(world) == per_rank


@pytest.mark.parametrize("batch, world, nearest", [(6, 4, "4 or 8"), (2, 4, "set batch_size to 4."),
                                                   (9, 8, "8 or 16")])
def test_batch_that_does_not_divide_names_nearest_valid(batch, world, nearest):
    c = build(batch_size=str(batch))
    with pytest.raises(ConfigError) as err:
        c.per_rank_batch(world)
    assert nearest in str(err.value) and "GLOBAL" in str(err.value)


def test_learning_rate_scales_linearly_with_global_batch():
    c = build(lr="0.001")  # VOC: given for a global batch of 4
    assert c.effective_lr(4) == pytest.approx(0.001)
    assert c.effective_lr(8) == pytest.approx(0.002)
    assert c.effective_lr(1) == pytest.approx(0.00025)
    assert build(lr="0.001", batch_size="16").effective_lr(8) == pytest.approx(0.004)
    assert build(lr="0.001", lr_base_batch_size="1").effective_lr(2) == pytest.approx(0.002)


def test_resolved_is_json_and_complete():
    c = build(batch_size="4")
    values = c.resolved(2)
    json.dumps(values)
    assert values["per_rank_batch"] == 2 and values["effective_lr"] == pytest.approx(0.001)
    assert set(cfg.FIELDS) <= set(values)


def test_failure_text_is_short():
    with pytest.raises(ConfigError) as err:
        build(**{"bad_%d" % i: "x" * 200 for i in range(50)})
    assert len(err.value.failure_text()) <= 1000
    assert err.value.failure_text().startswith("ConfigError:")


def test_a_manifest_dataset_takes_the_custom_preset_and_its_own_fields():
    c = build(dataset="manifest", label_attribute="my-job", classes="dog,bone", skip_empty="false")
    assert (c.epochs, c.lr, c.lr_decay_epoch) == (20, pytest.approx(0.001), (14, 20))
    assert (c.label_attribute, c.classes, c.skip_empty) == ("my-job", ("dog", "bone"), False)
    assert build().skip_empty is True  # GluonCV's readers leave images without objects out
    assert build(dataset="manifest", network="yolo3_mobilenet0.25_custom").epochs == 200


def test_label_attribute_belongs_to_manifests_and_mask_rcnn_needs_masks():
    with pytest.raises(ConfigError, match="label_attribute is only used with dataset=manifest"):
        build(dataset="custom", label_attribute="my-job")
    with pytest.raises(ConfigError, match="needs every object's mask; a Ground Truth bounding-box "
                                          "manifest has boxes only"):
        build(dataset="manifest", network="mask_rcnn_fpn_resnet18_v1b_coco")
