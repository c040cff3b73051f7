import pytest

from detector_training.job.config import from_hyperparameters
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


def test_poly_and_cosine_run_over_the_post_warmup_iterations_of_this_rank():
    # 10 epochs of 20 per-rank steps: 200 iterations, 20 of them warm-up, 180 after.
    poly = from_hyperparameters({"lr_mode": "poly", "epochs": "10", "lr_warmup": "20",
                                 "lr_warmup_factor": "0.5"})
    assert poly.lr_poly_power == 2.0  # GluonCV's YOLOv3 script
    assert lr_at(poly, 1.0, 0, 0, 20) == pytest.approx(0.5)  # warm-up towards the base rate
    assert lr_at(poly, 1.0, 1, 20, 20) == pytest.approx(1.0)
    assert lr_at(poly, 1.0, 5, 110, 20) == pytest.approx(0.25)  # half way: (1 - 0.5) ** 2
    assert lr_at(poly, 1.0, 9, 200, 20) == pytest.approx(0.0)
    cosine = from_hyperparameters({"lr_mode": "cosine", "epochs": "10", "lr_warmup": "20"})
    assert lr_at(cosine, 2.0, 1, 20, 20) == pytest.approx(2.0)
    assert lr_at(cosine, 2.0, 5, 110, 20) == pytest.approx(1.0)
    assert lr_at(cosine, 2.0, 9, 200, 20) == pytest.approx(0.0, abs=1e-12)
    # The schedule counts this rank's steps: with twice the ranks there are half the steps per
    # epoch, and the same step count reaches twice as far through the job.
    assert lr_at(cosine, 2.0, 5, 110, 10) == pytest.approx(0.0, abs=1e-12)


def test_step_mode_ignores_lr_decay_epoch_only_in_poly_and_cosine():
    c = from_hyperparameters({"lr_mode": "cosine", "epochs": "4", "lr_decay_epoch": "1",
                              "lr_warmup": "0"})
    assert lr_at(c, 1.0, 2, 0, 10) == pytest.approx(1.0)  # no step decay in cosine mode
    with pytest.raises(ValueError):
        lr_at(c, 1.0, 0, 0)


# --- the optimizer and frozen layers -------------------------------------------------------------

def small_net():
    import mxnet as mx

    net = mx.gluon.nn.HybridSequential(prefix="small_")
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(3, in_units=2, prefix="stem_"), mx.gluon.nn.Dense(1, in_units=3, prefix="head_"))
    net.initialize(mx.init.Constant(0.5))
    return net


def one_step(config, net):
    """One real update of ``net`` through make_trainer (a single process); the trainer."""
    import mxnet as mx
    from mxnet import autograd

    from detector_training.core.distributed import SingleProcess
    from detector_training.core.solver import make_trainer

    trainer = make_trainer(config, net, SingleProcess(), 0.1)
    with autograd.record():
        loss = (net(mx.nd.array([[1.0, 2.0]])) - 10.0) ** 2
    loss.backward()
    trainer.step(1)
    return trainer


@pytest.mark.parametrize("name, mxnet_class", [("sgd", "SGD"), ("adam", "Adam"), ("rmsprop", "RMSProp"),
                                               ("adadelta", "AdaDelta")])
def test_each_optimizer_is_mxnets_of_that_name_and_updates_the_weights(name, mxnet_class):
    config = from_hyperparameters({"optimizer": name, "dataset": "custom", "momentum": "0.8"})
    net = small_net()
    trainer = one_step(config, net)
    assert type(trainer._optimizer).__name__ == mxnet_class
    if name == "sgd":
        assert trainer._optimizer.momentum == pytest.approx(0.8)
    assert (net[1].weight.data().asnumpy() != 0.5).all()


def test_sgd_is_the_default_and_only_sgd_takes_momentum():
    from detector_training.core.solver import optimizer_params

    assert from_hyperparameters({}).optimizer == "sgd"
    sgd = optimizer_params(from_hyperparameters({"momentum": "0.7"}), 0.1)
    adam = optimizer_params(from_hyperparameters({"optimizer": "adam", "momentum": "0.7"}), 0.1)
    assert sgd["momentum"] == pytest.approx(0.7) and "momentum" not in adam
    assert adam["learning_rate"] == pytest.approx(0.1) and adam["wd"] == pytest.approx(5e-4)


def test_freeze_layer_pattern_leaves_the_layers_it_finds_untrained():
    net = small_net()
    one_step(from_hyperparameters({"freeze_layer_pattern": "^small_stem_"}), net)
    assert (net[0].weight.data().asnumpy() == 0.5).all() and net[0].weight.grad_req == "null"
    assert (net[1].weight.data().asnumpy() != 0.5).all()


def test_a_freeze_layer_pattern_that_finds_nothing_names_the_networks_parameters():
    from detector_training.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        one_step(from_hyperparameters({"freeze_layer_pattern": "^conv1_"}), small_net())
    assert "freeze_layer_pattern=^conv1_ finds none of the network's 4 parameters (e.g. small_stem_weight" \
        in str(err.value)


def test_a_freeze_layer_pattern_must_be_a_regular_expression():
    from detector_training.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        from_hyperparameters({"freeze_layer_pattern": "(conv1_"})
    assert "freeze_layer_pattern=(conv1_: expected a regular expression (missing )" in str(err.value)
