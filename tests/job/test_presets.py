"""Presets are what a data format and a family declare: every format names its data style, the
families key their presets by style, so each (family, format) pair a family trains gets that
family's preset, a format registered later too."""

import pytest

from detector_training import families
from detector_training.data import formats
from detector_training.data.formats.data_format import DATA_STYLES
from detector_training.job import config as cfg

# Faster R-CNN declares no preset of its own (GluonCV's defaults are the formats' presets), so
# its pairs have nothing to check here.
PAIRS = [(family, fmt) for family in families.all_families() for fmt in formats.all_formats()
         if family.accepts(fmt) and family.presets]


def test_every_format_declares_a_known_style_and_every_family_keys_presets_by_style():
    assert {fmt.style for fmt in formats.all_formats()} <= set(DATA_STYLES)
    for family in families.all_families():
        assert set(family.presets) <= set(DATA_STYLES), family.name


@pytest.mark.parametrize("family, fmt", PAIRS, ids=["%s-%s" % (f.name, d.name) for f, d in PAIRS])
def test_each_family_trains_each_format_with_its_preset_for_that_style(family, fmt):
    assert fmt.style in family.presets, "%s has no preset for %s (%s-style data)" % (
        family.name, fmt.name, fmt.style)
    config = cfg.TrainConfig(network=family.networks[0], dataset=fmt.name)
    for name, value in family.presets[fmt.style].items():
        assert getattr(config, name) == value, (name, getattr(config, name), value)


def test_a_format_registered_later_gets_each_family_s_preset_for_its_style():
    class Later(formats.LabelledFormat):
        name = "later_format_for_the_test"
        style = "voc"

    formats.register(Later)
    try:
        config = cfg.TrainConfig(network="ssd_512_mobilenet1.0_voc", dataset=Later.name)
        assert config.epochs == 240 and config.lr_base_batch_size == 32  # train_ssd.py's
        config = cfg.TrainConfig(network="yolo3_mobilenet0.25_voc", dataset=Later.name)
        assert config.epochs == 200 and config.lr_warmup == 1000  # train_yolo3.py's
    finally:
        formats.unregister(Later.name)


def test_the_log_says_which_preset_set_each_value():
    config = cfg.from_hyperparameters({"network": "yolo3_mobilenet0.25_voc", "dataset": "yolo",
                                       "epochs": "3"})
    assert config.sources["epochs"] == "the job's hyperparameters"
    assert config.sources["lr_warmup"] == "the yolo3 family's preset for voc-style data"
    assert config.sources["train_splits"] == "dataset=yolo's preset"
    assert "mixup" not in config.sources  # at its field default
