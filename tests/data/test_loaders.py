"""Loaders: a rank's training shard runs the equal number of steps, its validation slice is every
size-th image."""

from types import SimpleNamespace

import numpy as np

from detector_training.data.common import Datasets, SubsetDataset
from detector_training.data.loaders import shard_loader, val_shard_loader


class Numbers:
    """A reader of ``n`` samples: (its index as an array, one label row)."""

    classes = ("one",)

    def __init__(self, n):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, idx):
        return np.full((2,), idx, dtype="float32"), np.array([[0, 0, 1, 1, 0]], dtype="float32")


def numbers(n):
    return SubsetDataset(Numbers(n), range(n), ["n%d" % i for i in range(n)])


def stack(samples):
    return np.stack([s[0] for s in samples])


def test_each_rank_gets_the_same_steps_and_together_every_sample():
    data = Datasets(train=numbers(7), val=numbers(5), classes=("one",), aspect_ratios=[1.0] * 7)
    config = SimpleNamespace(mixup=False, seed=1)
    seen, lengths = set(), []
    for rank in range(2):
        world = SimpleNamespace(rank=rank, size=2)
        train = shard_loader(config, data, world, 2, 2, lambda x, y: (x, y), stack, 0)
        train.sampler.set_epoch(0)
        batches = [b for b in train.loader]
        lengths.append(len(batches))
        seen.update(int(v) for b in batches for v in b[:, 0])
        assert train.first_batch().shape == (2, 2)
    assert lengths == [2, 2]
    assert seen == set(range(7))


def test_a_validation_slice_is_every_size_th_image():
    data = Datasets(train=numbers(3), val=numbers(5), classes=("one",), aspect_ratios=[1.0] * 3)
    loader, indices = val_shard_loader(data, SimpleNamespace(rank=1, size=2),
                                       lambda x, y: (x, y), stack, 0)
    assert indices == [1, 3]
    assert [int(b[0, 0]) for b in loader] == [1, 3]


# --- close_loader: a loader's worker processes end when it is closed --------------------------

CLOSE_PROBE = """
import json, logging, sys, time
import mxnet as mx
from detector_training.data.loaders import close_loader
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
STUCK = int(sys.argv[1])

class Items:  # item STUCK never comes back: a worker blocked for good
    def __len__(self):
        return 40
    def __getitem__(self, i):
        if i == STUCK:
            time.sleep(3600)
        return i

def as_list(samples):  # sent to the workers by name
    return list(samples)

loader = mx.gluon.data.DataLoader(Items(), batch_size=2, num_workers=4, batchify_fn=as_list)
batches = iter(loader)
first = [next(batches), next(batches)]  # the rest of the epoch is prefetched and left pending
workers = list(loader._worker_pool._pool)
started = time.time()
close_loader(loader, timeout_s=float(sys.argv[2]))
print(json.dumps({"first": first, "took": time.time() - started, "pool": loader._worker_pool is None,
                  "alive": [w.pid for w in workers if w.is_alive()]}), flush=True)
"""


def run_close_probe(stuck, timeout_s):
    """The probe's report; the probe process itself must exit (no pool left in its exit
    handlers)."""
    import json
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", CLOSE_PROBE, str(stuck), str(timeout_s)],
                            capture_output=True, text=True, timeout=300)  # only catches a hang
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads([l for l in result.stdout.splitlines() if l.startswith("{")][-1])
    return report, result.stdout


def test_close_loader_ends_its_workers_in_order_with_batches_still_pending():
    report, out = run_close_probe(stuck=-1, timeout_s=60)
    assert report["first"] == [[0, 1], [2, 3]]
    assert report["pool"] and report["alive"] == []
    assert "killing" not in out  # every worker left by itself


def test_close_loader_kills_a_worker_that_never_finishes_and_the_process_still_exits():
    report, out = run_close_probe(stuck=9, timeout_s=2)
    assert report["alive"] == []
    assert "worker process(es) still running 2 s after the loader was closed; killing them" in out
    assert report["took"] < 60  # the 3600 s item was not waited for


# --- each sample's random draws: its own, the same in every run -------------------------------

def drawn(x, y):
    """A train transform that draws from both global generators, as GluonCV's augmentations do
    (numpy's and Python's); slow enough that both loader workers take batches."""
    import random
    import time

    time.sleep(0.02)
    return np.array([x[0], np.random.randint(1 << 30), random.randrange(1 << 30)], dtype="float64"), y


def draws(workers, epoch=0, skip=0):
    data = Datasets(train=numbers(16), val=numbers(2), classes=("one",), aspect_ratios=[1.0] * 16)
    train = shard_loader(SimpleNamespace(mixup=False, seed=5), data, SimpleNamespace(rank=0, size=1),
                         2, 8, drawn, stack, workers)
    train.sampler.set_epoch(epoch, skip)
    return [tuple(row) for batch in train.loader for row in batch.tolist()]


def test_a_samples_augmentation_draws_are_its_own_and_the_same_whichever_worker_runs_it():
    """Forked loader workers start from one numpy generator state (Python reseeds its own at a
    fork) and take batches in whatever order they finish: without a draw per sample, two workers
    repeat each other's numpy draws and a run's draws depend on the scheduling."""
    first = draws(2)
    assert len(first) == 16
    assert len({row[1] for row in first}) == len({row[2] for row in first}) == 16  # none alike
    assert draws(2) == first == draws(0)  # any worker count, any scheduling: the same draws
    assert draws(2, epoch=1) != first  # a new epoch draws anew
    assert draws(2, skip=3) == first[6:]  # a resumed epoch draws what the stopped one drew
