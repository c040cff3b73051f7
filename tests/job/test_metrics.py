"""SageMaker metric definitions (job/metrics.py), generated from the family registry, match the
log lines the engine's hooks write for every family."""

import logging
import re
from types import SimpleNamespace

import pytest
from detector_training import families
from detector_training.core.engine import MetricSums, StepTimes
from detector_training.core.hooks import MetricLogHook, ValidationHook
from detector_training.job.metrics import METRIC_DEFINITIONS, definitions_for


def engine_lines(family, caplog):
    """The summary and validation lines of one epoch, written by the engine's own hooks for a
    family whose i-th logged name averages 0.i and whose i-th score is 0.i, and whose two steps
    took 0.3 s of forward/backward and 0.05 s of update each."""
    sums = MetricSums()
    engine = SimpleNamespace(
        config=SimpleNamespace(val_interval=1, epochs=5), world=SimpleNamespace(is_main=True, size=1),
        dist=SimpleNamespace(allreduce_sum=list), trainer=SimpleNamespace(learning_rate=0.001),
        sums=sums, log_names=family.log_names, loss_names=family.loss_names, steps=2,
        per_rank_batch=1, epoch=3, epoch_first_iteration=0, last_epoch=True, history=[],
        best_map=float("-inf"), scalars={},
        times=StepTimes(forward_backward=0.6, update=0.1, steps=2))
    log_hook = MetricLogHook()
    log_hook.before_epoch(engine)
    for i, name in enumerate(family.log_names):
        sums.add_step({name: (0.1 * (i + 1), 1.0)})
    scores = {name: 0.1 * (i + 1) for i, name in enumerate(family.score_names)}
    validation = ValidationHook(lambda: dict(scores, per_class={}, images=24),
                                lambda engine: None, scores=family.score_names,
                                objective=family.objective)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        caplog.clear()
        log_hook.after_epoch(engine)
        validation.after_epoch(engine)
    return caplog.text


@pytest.mark.parametrize("name", [f.name for f in families.all_families()])
def test_every_definition_of_a_family_reads_its_value_from_the_engines_log_lines(name, caplog):
    family = families.get_by_name(name)
    text = "[1,0]<stdout>:" + engine_lines(family, caplog)  # as mpirun tags rank 0's lines
    definitions = {d["Name"]: d["Regex"] for d in definitions_for(name)}
    expected = dict({"train:%s" % n: 0.1 * (i + 1) for i, n in enumerate(family.log_names)},
                    **{"validation:%s" % n: 0.1 * (i + 1) for i, n in enumerate(family.score_names)},
                    **{"train:lr": 0.001, "train:data_wait_pct": 0.0, "train:step_data_s": 0.0,
                       "train:step_forward_backward_s": 0.3, "train:step_update_s": 0.05,
                       "train:progress": 80.0})  # epoch 3 of 5 done: 4/5
    assert set(expected) | {"train:speed", "train:throughput"} == set(definitions)
    for metric, value in expected.items():
        match = re.search(definitions[metric], text)
        assert match, (metric, text)
        assert float(match.group(1)) == pytest.approx(value, abs=1e-4), metric
    assert float(re.search(definitions["train:speed"], text).group(1)) > 0
    assert re.search(definitions["train:throughput"], text).group(1) == \
        re.search(definitions["train:speed"], text).group(1)


def test_the_definitions_sent_with_a_job_cover_every_registered_family():
    names = {d["Name"] for d in METRIC_DEFINITIONS}
    for family in families.all_families():
        assert {d["Name"] for d in definitions_for(family.name)} <= names


def test_the_built_in_algorithms_metric_names_are_defined_for_every_family():
    # A tuning job written for the built-in Object Detection algorithm reads these names; its
    # train:cross_entropy and train:smooth_l1 are the SSD family's losses.
    for name in [f.name for f in families.all_families()]:
        defined = {d["Name"] for d in definitions_for(name)}
        assert {"validation:mAP", "train:throughput", "train:progress"} <= defined, name
