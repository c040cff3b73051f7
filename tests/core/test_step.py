"""The step base every family's step extends: the family writes its losses, the base records the
forward pass, does the backward (AMP's scaled loss when it has an AMP trainer) and gives the
engine its values. A one-weight network fitting ``w * x`` to ``2 * x``, in milliseconds."""

import mxnet as mx
import pytest

from detector_training.core.step import TrainingStep


class FitStep(TrainingStep):
    """Per-sample squared errors of ``w * x`` against ``2 * x``, and the inputs as the outputs."""

    def forward(self, batch):
        x = mx.nd.array(batch).reshape((-1, 1))
        return {"fit_loss": ((self.net(x) - 2 * x) ** 2).reshape((-1,))}, x


def tiny_net(weight=0.5):
    net = mx.gluon.nn.Dense(1, use_bias=False, in_units=1)
    net.initialize(mx.init.Constant(weight))
    return net


def expected_gradient(batch, weight=0.5):
    """d/dw of the sum over the batch of (w x - 2 x)^2: 2 (w - 2) sum(x^2)."""
    return 2 * (weight - 2) * sum(x * x for x in batch)


def test_the_base_records_the_forward_pass_and_backpropagates_the_sum_of_the_losses():
    net = tiny_net()
    values = FitStep(net, mx.cpu())([1.0, 2.0])
    assert net.weight.grad().asscalar() == pytest.approx(expected_gradient([1.0, 2.0]))
    # logged: the batch's mean loss, (1.5 * 1)^2 and (1.5 * 2)^2
    assert set(values) == {"fit_loss"}
    assert values["fit_loss"].asscalar() == pytest.approx((2.25 + 9.0) / 2)


def test_mix_ratio_weights_the_backward_pass_and_the_logged_losses_alike():
    net = tiny_net()
    step = FitStep(net, mx.cpu())
    step.mix_ratio = 0.5
    values = step([1.0, 2.0])
    assert net.weight.grad().asscalar() == pytest.approx(0.5 * expected_gradient([1.0, 2.0]))
    assert values["fit_loss"].asscalar() == pytest.approx(0.5 * (2.25 + 9.0) / 2)


def amp_trainer(net):
    """A Gluon trainer as amp.init_trainer leaves it (its loss scaler: 2 ** 16 at the start),
    without amp.init(), which would patch MXNet's operators for the whole test process."""
    from mxnet.contrib.amp.loss_scaler import LossScaler

    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    trainer._amp_loss_scaler = LossScaler()  # pylint: disable=protected-access
    trainer._amp_original_scale = trainer._scale  # pylint: disable=protected-access
    return trainer


def test_with_an_amp_trainer_the_backward_pass_takes_the_scaled_loss_and_the_update_unscales_it():
    net = tiny_net()
    trainer = amp_trainer(net)
    scale = trainer._amp_loss_scaler.loss_scale  # pylint: disable=protected-access
    values = FitStep(net, mx.cpu(), amp_trainer=trainer)([1.0, 2.0])
    assert net.weight.grad().asscalar() == pytest.approx(scale * expected_gradient([1.0, 2.0]))
    assert trainer._scale == pytest.approx(1.0 / scale)  # pylint: disable=protected-access
    assert values["fit_loss"].asscalar() == pytest.approx((2.25 + 9.0) / 2)  # logged unscaled
    trainer.step(2)
    assert net.weight.data().asscalar() == pytest.approx(0.5 - 0.1 * expected_gradient([1.0, 2.0]) / 2)


def test_a_family_may_say_what_backward_differentiates_and_what_is_logged():
    class Summed(FitStep):
        def total_loss(self, losses, outputs):
            return losses["fit_loss"].sum() * outputs.shape[0]

        def values(self, losses, outputs):
            return {"fit_loss": losses["fit_loss"].sum(), "inputs": (outputs.sum(), outputs.shape[0])}

    net = tiny_net()
    values = Summed(net, mx.cpu())([1.0, 2.0])
    assert net.weight.grad().asscalar() == pytest.approx(2 * expected_gradient([1.0, 2.0]))
    assert values["fit_loss"].asscalar() == pytest.approx(2.25 + 9.0)
    assert values["inputs"][0].asscalar() == 3.0 and values["inputs"][1] == 2
