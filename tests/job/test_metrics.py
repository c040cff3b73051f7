"""SageMaker metric definitions (job/metrics.py) match the log lines of every family."""

import re

import pytest
from detector_training import families
from detector_training.job.metrics import (
    METRIC_DEFINITIONS,
    TRAIN_METRICS,
    VALIDATION_SCORES,
    definitions_for,
)


def test_metric_definitions_name_every_familys_losses_metrics_and_scores():
    for family in families.all_families():
        assert TRAIN_METRICS[family.name] == family.log_names
        assert VALIDATION_SCORES[family.name] == family.score_names
        names = {d["Name"] for d in definitions_for(family.name)}
        assert {"validation:" + n for n in family.score_names} <= names
        line = "validation: epoch=3 images=24 time=1.0s " + " ".join(
            "%s=0.%d" % (name, i + 1) for i, name in enumerate(family.score_names))
        for i, name in enumerate(family.score_names):
            regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "validation:" + name)
            assert float(re.search(regex, line).group(1)) == pytest.approx(float("0.%d" % (i + 1)))
        line = "[Epoch 3] summary: time=1.0s speed=2.0 samples/s data_wait=1.0% lr=0.001 " + \
            " ".join("%s=0.%d" % (name, i + 1) for i, name in enumerate(family.log_names))
        for i, name in enumerate(family.log_names):
            regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "train:" + name)
            assert float(re.search(regex, line).group(1)) == pytest.approx(float("0.%d" % (i + 1)))

