import pytest

from detector_training.core.config import from_hyperparameters
from detector_training.core.solver import lr_at


def test_step_decay_at_epoch_boundaries():
    c = from_hyperparameters({"lr_decay_epoch": "14,20", "lr_decay": "0.1"})
    assert lr_at(c, 1.0, 0, 0) == pytest.approx(1.0)
    assert lr_at(c, 1.0, 13, 10_000) == pytest.approx(1.0)
    assert lr_at(c, 1.0, 14, 10_001) == pytest.approx(0.1)   # 15th epoch (0-based 14) is decayed
    assert lr_at(c, 1.0, 19, 10_002) == pytest.approx(0.1)
    assert lr_at(c, 1.0, 20, 10_003) == pytest.approx(0.01)


def test_linear_warmup_from_factor_to_base():
    c = from_hyperparameters({"lr_warmup": "100", "lr_warmup_factor": "0.25", "lr_decay_epoch": "5"})
    assert lr_at(c, 2.0, 0, 0) == pytest.approx(0.5)          # base * factor
    assert lr_at(c, 2.0, 0, 50) == pytest.approx(2.0 * (0.25 * 0.5 + 0.5))
    assert lr_at(c, 2.0, 0, 99) == pytest.approx(2.0 * (0.25 * 0.01 + 0.99))
    assert lr_at(c, 2.0, 0, 100) == pytest.approx(2.0)        # warm-up over
    assert lr_at(c, 2.0, 1, 100) == pytest.approx(2.0)


def test_warmup_spanning_a_decay_boundary_multiplies_both():
    c = from_hyperparameters({"lr_warmup": "10", "lr_warmup_factor": "0.5", "lr_decay_epoch": "1"})
    assert lr_at(c, 1.0, 1, 5) == pytest.approx(0.1 * (0.5 * 0.5 + 0.5))


def test_no_warmup_when_minus_one_or_zero():
    for warm in ("-1", "0"):
        c = from_hyperparameters({"lr_warmup": warm})
        assert lr_at(c, 1.0, 0, 0) == pytest.approx(1.0)


def test_warmup_is_counted_in_iterations_across_epochs_as_gluoncvs_mask_rcnn_script():
    # train_mask_rcnn.py warms up over i + epoch * len(train_data) <= lr_warmup: 1000 iterations
    # are more than one epoch of a small dataset, so epoch 2 may still be warming up.
    c = from_hyperparameters({"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco"})
    assert c.lr_warmup == 1000
    assert lr_at(c, 1.0, 2, 500) == pytest.approx(c.lr_warmup_factor * 0.5 + 0.5)
    assert lr_at(c, 1.0, 3, 1000) == pytest.approx(1.0)
