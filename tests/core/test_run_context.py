"""What a run has (core/run_context.py): one frozen value; its world is its distributed adapter's,
its network the fitted network's."""

import dataclasses
from types import SimpleNamespace

import pytest

from detector_training.core.distributed import SingleProcess, World
from detector_training.core.run_context import RunContext


def a_run(dist):
    return RunContext(config=None, env=None, dist=dist, stop=None, family=None, ctx=None,
                      datasets=None, network=SimpleNamespace(net="the network"), loaders=None,
                      per_rank_batch=2, base_lr=0.01, effective={}, checkpoints=None,
                      validator=None)


def test_the_world_is_the_distributed_adapters_and_the_net_the_fitted_networks():
    dist = SingleProcess()
    dist.world = World(rank=1, size=2)
    run = a_run(dist)
    assert run.world is dist.world and not run.world.is_main
    assert run.net == "the network"


def test_a_run_context_cannot_be_changed_once_built():
    run = a_run(SingleProcess())
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.base_lr = 0.1  # pylint: disable=assigning-non-slot  (the point of the test)
