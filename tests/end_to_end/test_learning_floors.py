"""Learning floors: each family's CI-sized recipe (benchmarks/learning.py FLOORS), run as one whole
job through the job's real entry (``detector-train-job``) on generated data whose classes differ
in shape and colour (the ``colours`` style), must learn: held-out box AP50 (Mask R-CNN: also mask
AP50) and, where the recipe learns every class, the worst class's AP at or above its floor, and
its last epoch's training loss below its first. Each floor is about half the worst of 3 seeds and
above what the same recipe reaches with its training labels broken on purpose: two classes
swapped (YOLOv3, which does not learn its classes in this budget: every box moved by half its
size) (benchmarks/README.md, "Learning floors"). The job is deterministic for a seed on one machine
(each sample's augmentation has its own draw), so CI's seed scores the same every run there; on
another machine (another CPU) it scores like another seed, which the floors leave room for."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import learning  # noqa: E402 (after the path)


@pytest.mark.parametrize("family", sorted(learning.FLOORS))
def test_each_family_learns_past_its_floor(tmp_path, family):
    run = learning.run_floor(str(tmp_path / "job"), family)
    for score, floor in learning.FLOORS[family]["floors"].items():
        assert run[score] >= floor, (score, run)
    assert run["last_loss"] < run["first_loss"], run
