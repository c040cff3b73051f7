import itertools
import random

import pytest

from detector_training.data.datasets import (EqualStepsBatchSampler, build_datasets,
                                  split_sorted_bucket_sampler_class, steps_per_epoch)
from detector_training.job.config import from_hyperparameters
from detector_training.errors import DataError
from detector_training.data.synthetic_voc import generate


def rank_batches(n, world, batch, epoch=0, seed=3):
    steps = steps_per_epoch(n, world, batch)
    keys = [random.Random(i).uniform(0.5, 2.0) for i in range(n)]
    out = []
    for rank in range(world):
        sampler = EqualStepsBatchSampler(keys, batch, world, rank, steps, seed=seed)
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return steps, out


def test_gluoncv_sampler_alone_gives_unequal_counts():
    """Why the wrapper exists: GluonCV's own sampler leaves some ranks with fewer batches."""
    cls = split_sorted_bucket_sampler_class()
    counts = [len(list(cls([1.0] * 10, 1, num_parts=8, part_index=r, shuffle=True))) for r in range(8)]
    assert len(set(counts)) > 1


@pytest.mark.parametrize("n, world, batch", [
    (10, 4, 1), (20, 8, 1), (7, 2, 1), (5, 4, 1), (2, 4, 1), (10, 8, 1), (33, 4, 2), (7, 2, 3),
    (1, 8, 1), (100, 3, 4),
])
def test_every_rank_runs_the_same_number_of_nonempty_batches(n, world, batch):
    for epoch in (0, 1, 5):
        steps, per_rank = rank_batches(n, world, batch, epoch)
        assert all(len(batches) == steps for batches in per_rank)
        assert all(0 < len(b) <= batch for batches in per_rank for b in batches)
        assert all(0 <= i < n for batches in per_rank for b in batches for i in b)


@pytest.mark.parametrize("n, world, batch", [(10, 4, 1), (20, 8, 1), (7, 2, 1), (64, 4, 2)])
def test_an_epoch_covers_every_sample(n, world, batch):
    _, per_rank = rank_batches(n, world, batch)
    seen = {i for batches in per_rank for b in batches for i in b}
    assert seen == set(range(n))


def test_shards_are_disjoint_when_the_split_is_even():
    _, per_rank = rank_batches(16, 4, 1)
    shards = [set(itertools.chain.from_iterable(b)) for b in per_rank]
    for a, b in itertools.combinations(shards, 2):
        assert not a & b


def test_order_depends_on_epoch_and_is_reproducible():
    _, first = rank_batches(40, 2, 2, epoch=0)
    _, again = rank_batches(40, 2, 2, epoch=0)
    _, other = rank_batches(40, 2, 2, epoch=1)
    assert first == again
    assert first != other


def test_steps_per_epoch_formula():
    assert steps_per_epoch(10, 4, 1) == 3
    assert steps_per_epoch(7, 2, 1) == 4
    assert steps_per_epoch(20, 8, 1) == 3
    assert steps_per_epoch(8, 2, 4) == 1
    with pytest.raises(DataError):
        steps_per_epoch(0, 2, 1)


def test_unknown_class_in_annotations_is_a_clear_error(tmp_path):
    generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0, seed=2)
    config = from_hyperparameters({"dataset": "custom", "classes": "cat,dog",
                                   "train_splits": "2007_trainval"})
    with pytest.raises(DataError) as err:
        build_datasets(config, str(tmp_path))
    assert "no training image has an object of the classes cat, dog" in str(err.value)


def test_images_without_configured_classes_are_left_out(tmp_path):
    generate(str(tmp_path), train_2007=30, test_2007=10, train_2012=0, seed=4)
    full = build_datasets(from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval"}),
                          str(tmp_path))
    only = build_datasets(from_hyperparameters({"dataset": "custom", "classes": "circle",
                                                "train_splits": "2007_trainval"}), str(tmp_path))
    assert only.classes == ("circle",)
    assert 0 < len(only.train) < len(full.train) == 30
    assert len(only.aspect_ratios) == len(only.train)
    for i in range(len(only.train)):
        _, label = only.train[i]
        assert len(label) and (label[:, 4] == 0).all()


def test_missing_split_file_is_a_clear_error(tmp_path):
    generate(str(tmp_path), train_2007=4, test_2007=2, train_2012=0, seed=2)
    config = from_hyperparameters({"dataset": "custom", "train_splits": "2007_trainval,2012_trainval"})
    with pytest.raises(DataError) as err:
        build_datasets(config, str(tmp_path))
    assert "VOC2012" in str(err.value)


# --- close_loader: a loader's worker processes end when it is closed --------------------------

CLOSE_PROBE = """
import json, logging, sys, time
import mxnet as mx
from detector_training.data.datasets import close_loader
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
