"""The built-in Object Detection algorithm's hyperparameters, as its users send them, in this
image's configuration."""

import pytest

from detector_training import families
from detector_training.errors import ConfigError
from detector_training.families.base import DetectorFamily
from detector_training.job import builtin_algorithm
from detector_training.job import config as cfg

# The SageMaker example notebook's hyperparameters (object_detection_recordio_format), as the SDK
# sends them: every value a string.
NOTEBOOK = {"base_network": "resnet-50", "use_pretrained_model": "1", "num_classes": "20",
            "mini_batch_size": "32", "epochs": "1", "learning_rate": "0.001",
            "lr_scheduler_step": "3,6", "lr_scheduler_factor": "0.1", "optimizer": "sgd",
            "momentum": "0.9", "weight_decay": "0.0005", "overlap_threshold": "0.5",
            "nms_threshold": "0.45", "image_shape": "512", "label_width": "350",
            "num_training_samples": "16551"}
SSD_NAMES = tuple("%s_%s" % (n, d) for n in ("ssd_300_vgg16_atrous", "ssd_512_vgg16_atrous",
                                             "ssd_512_resnet50_v1") for d in ("voc", "coco", "custom"))


class SSDNames(DetectorFamily):
    """Stands for the SSD family's networks while it is not registered (names only)."""
    name = "ssd_names_for_the_test"
    networks = SSD_NAMES


@pytest.fixture
def ssd_networks():
    """The SSD networks' names registered: by the SSD family when the image has it, else by a
    stand-in that only the configuration reads."""
    if set(SSD_NAMES) <= set(families.network_names()):
        yield
        return
    families.register(SSDNames)
    yield
    families.unregister(SSDNames.name)


def test_the_notebooks_hyperparameters_with_a_network_mean_the_same_here():
    config = cfg.from_hyperparameters(dict(NOTEBOOK, network="faster_rcnn_resnet50_v1b_voc"))
    assert config.network == "faster_rcnn_resnet50_v1b_voc"  # base_network resnet-50 describes it
    assert config.batch_size == 32 and config.epochs == 1
    # learning_rate is the rate of mini_batch_size as it is: no linear scaling
    assert config.lr == pytest.approx(0.001) and config.lr_base_batch_size == 32
    assert config.effective_lr(4) == pytest.approx(0.001)
    assert config.lr_decay_epoch == (3, 6) and config.lr_decay == pytest.approx(0.1)
    assert config.wd == pytest.approx(0.0005) and config.momentum == pytest.approx(0.9)
    assert config.optimizer == "sgd" and config.pretrained_base is True
    assert config.short == (512,)
    assert config.nms_threshold == pytest.approx(0.45) and config.overlap_threshold == pytest.approx(0.5)
    assert config.num_classes == 20


def test_the_translation_keeps_only_this_images_names_so_config_json_replays():
    ours, notes, problems, _defaulted = builtin_algorithm.translate(dict(NOTEBOOK, network="yolo3_darknet53_voc",
                                                             base_network="vgg-16"))
    assert not set(ours) & set(builtin_algorithm.NAMES)
    assert "learning_rate=0.001 -> lr" in notes
    assert any(n.startswith("label_width=350 (noted:") for n in notes)
    assert problems == ["base_network=vgg-16 does not describe network=yolo3_darknet53_voc (whose "
                        "backbone is in its name); base_network chooses the built-in algorithm's SSD "
                        "when network is not set: drop base_network, or set it to this network's "
                        "backbone"]


@pytest.mark.parametrize("base, shape, expected", [
    ("vgg-16", 300, "ssd_300_vgg16_atrous_custom"),
    ("vgg-16", 512, "ssd_512_vgg16_atrous_custom"),
    ("vgg-16", 600, "ssd_512_vgg16_atrous_custom"),
    ("resnet-50", 300, "ssd_512_resnet50_v1_custom"),
])
def test_base_network_and_image_shape_choose_the_ssd_the_algorithm_runs(base, shape, expected):
    assert builtin_algorithm.ssd_network(base, shape) == expected
    assert expected in families.get(expected).class_list_networks  # built for the job's classes


@pytest.mark.parametrize("dataset", ["voc", "coco", "custom", "builtin", "yolo"])
def test_the_algorithm_s_ssd_takes_the_job_s_class_list_whatever_the_data_format(ssd_networks, dataset):
    config = cfg.from_hyperparameters({"base_network": "vgg-16", "dataset": dataset})
    assert config.network == "ssd_300_vgg16_atrous_custom"


def test_without_network_the_notebooks_hyperparameters_select_its_ssd(ssd_networks):
    config = cfg.from_hyperparameters(NOTEBOOK)
    assert config.network == "ssd_512_resnet50_v1_custom"
    defaults = cfg.from_hyperparameters({"num_classes": "20", "num_training_samples": "100"})
    assert defaults.network == "ssd_300_vgg16_atrous_custom"  # vgg-16 at 300, the algorithm's defaults
    custom = cfg.from_hyperparameters({"base_network": "vgg-16", "image_shape": "512",
                                       "dataset": "custom"})
    assert custom.network == "ssd_512_vgg16_atrous_custom"


def test_a_selected_network_the_image_lacks_is_an_error_naming_base_network(monkeypatch):
    registered = families.network_names()
    monkeypatch.setattr(families, "network_names",
                        lambda: tuple(n for n in registered if not n.startswith("ssd_")))
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"base_network": "vgg-16"})
    assert "base_network=vgg-16 with image_shape=300 selects ssd_300_vgg16_atrous_custom, which this " \
           "image does not train; set network" in str(err.value)


def test_a_built_in_name_and_ours_for_the_same_setting_are_refused_together():
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"network": "faster_rcnn_resnet50_v1b_voc", "learning_rate": "0.01",
                                  "lr": "0.02", "weight_decay": "1e-4", "wd": "1e-4"})
    text = str(err.value)
    assert "learning_rate (the built-in algorithm's name for lr) and lr are both set; keep one" in text
    assert "weight_decay (the built-in algorithm's name for wd) and wd are both set; keep one" in text


@pytest.mark.parametrize("name, value, expected", [
    ("base_network", "resnet-101", "base_network=resnet-101: expected one of: vgg-16, resnet-50"),
    ("use_pretrained_model", "2", "use_pretrained_model=2: expected a boolean"),
    ("lr_scheduler_step", "ten", "lr_scheduler_step=ten: expected a list of integers"),
    ("mini_batch_size", "0", "mini_batch_size=0: expected an integer >= 1"),
    ("learning_rate", "0", "learning_rate=0: expected a number in (0, 10]"),
])
def test_bad_built_in_values_are_named_by_their_built_in_name(name, value, expected):
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"network": "faster_rcnn_resnet50_v1b_voc", name: value})
    assert expected in str(err.value)


def test_learning_rate_without_a_batch_applies_to_the_built_in_default_batch():
    config = cfg.from_hyperparameters({"network": "faster_rcnn_resnet50_v1b_voc",
                                       "learning_rate": "0.004"})
    assert config.lr == pytest.approx(0.004)
    assert config.batch_size == 32 and config.lr_base_batch_size == 32  # mini_batch_size's default
    assert config.sources["batch_size"] == builtin_algorithm.DEFAULT_SOURCE
    assert config.sources["lr"] == "the job's hyperparameters"


@pytest.mark.parametrize("dataset", ["builtin", "custom"])
def test_a_job_with_only_the_required_hyperparameters_gets_the_built_in_defaults(ssd_networks, dataset):
    """The built-in algorithm's two required hyperparameters and nothing else: what it would have
    run (its hyperparameters page: 30 epochs, mini_batch_size 32, learning_rate 0.001 as it is at
    that batch, no step decay, wd 0.0005, nms 0.45, vgg-16 at 300), not the presets underneath."""
    config = cfg.from_hyperparameters({"num_classes": "3", "num_training_samples": "120",
                                       "dataset": dataset})
    assert config.network.startswith("ssd_300_vgg16_atrous_")
    assert config.epochs == 30 and config.batch_size == 32
    assert config.lr == pytest.approx(0.001) and config.lr_base_batch_size == 32
    assert config.effective_lr(8) == pytest.approx(0.001)  # the global batch is 32 on any world
    assert config.lr_decay_epoch == () and config.lr_decay == pytest.approx(0.1)
    assert config.wd == pytest.approx(0.0005) and config.momentum == pytest.approx(0.9)
    assert config.nms_threshold == pytest.approx(0.45) and config.overlap_threshold == pytest.approx(0.5)
    assert config.pretrained_base is True and config.early_stopping is False
    for name in ("epochs", "batch_size", "lr", "lr_base_batch_size", "lr_decay_epoch", "wd"):
        assert config.sources[name] == builtin_algorithm.DEFAULT_SOURCE, name
    assert config.sources["num_classes"] == "the job's hyperparameters"


def test_the_job_s_own_values_win_over_the_built_in_defaults(ssd_networks):
    config = cfg.from_hyperparameters({"num_classes": "3", "num_training_samples": "120",
                                       "dataset": "builtin", "epochs": "4", "mini_batch_size": "8", "lr_scheduler_step": "2,3"})
    assert config.epochs == 4 and config.batch_size == 8 and config.lr_decay_epoch == (2, 3)
    assert config.lr == pytest.approx(0.001) and config.lr_base_batch_size == 8
    assert config.sources["epochs"] == config.sources["batch_size"] == "the job's hyperparameters"
    assert config.sources["lr"] == builtin_algorithm.DEFAULT_SOURCE


def test_a_job_in_this_image_s_names_keeps_the_presets():
    config = cfg.from_hyperparameters({"dataset": "custom", "network": "faster_rcnn_resnet50_v1b_voc"})
    assert config.epochs == 20 and config.lr_base_batch_size == 4  # dataset=custom's preset
    assert config.sources["epochs"] == "dataset=custom's preset"


def test_num_classes_must_agree_with_the_classes_named():
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"dataset": "custom", "classes": "cat,dog", "num_classes": "3"})
    assert "num_classes=3 but classes names 2 (cat,dog)" in str(err.value)
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"num_classes": "3", "network": "faster_rcnn_resnet50_v1b_voc"})
    assert "num_classes=3: dataset=voc has its 20 classes" in str(err.value)


def test_overlap_threshold_applies_to_the_voc_metric_only():
    assert cfg.from_hyperparameters({"overlap_threshold": "0.7"}).overlap_threshold == pytest.approx(0.7)
    with pytest.raises(ConfigError) as err:
        cfg.from_hyperparameters({"dataset": "coco", "overlap_threshold": "0.7"})
    assert "overlap_threshold=0.7: dataset=coco is scored by COCO's mAP, which averages IoU 0.50:0.95" \
        in str(err.value)


def test_the_built_in_names_are_valid_names_for_the_key_check():
    for name in builtin_algorithm.NAMES:
        assert cfg.closest_key(name) == name
