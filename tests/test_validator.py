"""validator.Validator: the one object that scores a network on validation data, for training's
validation hook and for mode=evaluate (which reach it with a network and the data)."""

import ast
import os
from types import SimpleNamespace

from detector_training import validator as validator_module
from detector_training.core.distributed import SingleProcess
from detector_training.validator import Validator

from test_layout import ROOT, module_names, source_path


class Net:
    def __init__(self):
        self.hybridized = []

    def hybridize(self, static_alloc=False):
        self.hybridized.append(static_alloc)

    def collect_params(self):
        return {"running_mean": "the statistics"}


class Broadcasts(SingleProcess):
    def __init__(self):
        super().__init__()
        self.sent = []

    def broadcast_parameters(self, params):
        self.sent.append(params)


def a_validator(disable_hybridization=False):
    config = SimpleNamespace(disable_hybridization=disable_hybridization, static_alloc=True)
    datasets = SimpleNamespace(val=list(range(5)))
    return Validator("the family", config, datasets, "the loader", [0, 2, 4], Broadcasts(), "ctx")


def test_score_hybridizes_for_inference_then_scores_every_ranks_detections(monkeypatch):
    calls = []
    monkeypatch.setattr(validator_module, "validate", lambda *args: calls.append(args) or {"mAP": 0.25})
    validator, net = a_validator(), Net()
    assert (validator.images, validator.shard) == (5, 3)
    assert validator.score(net) == {"mAP": 0.25}
    family, scored, loader, indices, ctx, dist, config, datasets, scratch, stop_agreed = calls[0]
    assert (family, scored, loader, indices, ctx) == ("the family", net, "the loader", [0, 2, 4], "ctx")
    assert stop_agreed is None  # no stop given: validation is never asked to stop
    assert net.hybridized == [True] and os.path.isdir(scratch)
    # the main rank's parameters (batch-norm statistics too) before any rank detects
    assert dist.sent == [{"running_mean": "the statistics"}] and dist is validator.dist
    validator.close()
    assert not os.path.exists(scratch)
    unhybridized = a_validator(disable_hybridization=True)
    unhybridized.score(net)
    assert net.hybridized == [True]
    unhybridized.close()


def calls_in(module):
    tree = ast.parse(open(source_path(module)).read())
    return {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            for node in ast.walk(tree) if isinstance(node, ast.Call)}


def imports_of_validate(module):
    tree = ast.parse(open(source_path(module)).read())
    return any(isinstance(node, ast.ImportFrom) and node.module == "detector_training.core.evaluation"
               and any(alias.name == "validate" for alias in node.names) for node in ast.walk(tree))


def test_training_and_evaluation_score_through_the_validator_and_nothing_else_scores():
    assert os.path.isdir(ROOT)
    for module in ("detector_training.main", "detector_training.evaluate"):
        assert "Validator" in calls_in(module), module
    assert {m for m in module_names() if imports_of_validate(m)} == {"detector_training.validator"}
