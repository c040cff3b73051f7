"""A full disk at each write the job makes (issue 39): the model's parameters, the export, the
report and TensorBoard's event files each fail with the project's DiskFullError naming the path,
on a real file system that is full (tmpfs), and leave what was there before whole."""

import os
import subprocess
from types import SimpleNamespace

import pytest

from detector_training.core.files import atomic_save, atomic_save_prefix
from detector_training.errors import DiskFullError


@pytest.fixture
def disk(tmp_path):
    """A 2 MB file system: room for one 1.6 MB parameter file, not for two."""
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], check=True)
    yield str(path)
    subprocess.run(["umount", "-l", str(path)], check=False)


def dense(seed):
    import mxnet as mx

    mx.random.seed(seed)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(640, in_units=640))  # 1.6 MB of float32
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 640)))
    return net


def test_model_params_that_do_not_fit_are_a_disk_full_error_and_the_earlier_file_stays(disk):
    import mxnet as mx

    path = os.path.join(disk, "model.params")
    first = dense(1)
    atomic_save(path, first.save_parameters)
    before = open(path, "rb").read()
    with pytest.raises(DiskFullError) as caught:  # MXNet's own error says only "Write incomplete"
        atomic_save(path, dense(2).save_parameters)
    assert str(caught.value).startswith("DiskFullError: the disk is full: %s could not be written (No space "
                                        "left on device); the earlier file is kept." % path)
    assert open(path, "rb").read() == before and mx.nd.load(path)
    assert os.listdir(disk) == ["model.params"]  # the partial temporary file is gone


def test_an_export_that_does_not_fit_is_a_disk_full_error_naming_it(disk):
    prefix = os.path.join(disk, "model")
    with pytest.raises(DiskFullError, match="the disk is full: %s-\\* could not be written" % prefix):
        atomic_save_prefix(prefix, lambda tmp: [dense(3).export(tmp, epoch=0), dense(4).export(tmp + "2", 0)])
    assert os.listdir(disk) == []  # neither file half there


def test_the_report_on_a_full_disk_is_a_disk_full_error(disk):
    from detector_training.core.report import write_report

    filler = os.path.join(disk, "filler")
    with pytest.raises(OSError):
        with open(filler, "wb") as handle:
            handle.write(b"x" * (3 << 20))
    history = [{"epoch": 0, "loss": 1.0, "mAP": 0.1}, {"epoch": 1, "loss": 0.5, "mAP": 0.2}]
    with pytest.raises(DiskFullError, match="the disk is full: %s" % os.path.join(disk, "training_curves.png")):
        write_report(disk, history, {"mAP": 0.2, "per_class": {"a": 0.2}}, ["a"], ("loss",))


@pytest.mark.timeout(60)  # tensorboardX's SummaryWriter hung here: its dead writer thread's queue full
def test_tensorboard_on_a_full_disk_is_a_disk_full_error_naming_the_folder(disk):
    """The error reaches the job (tensorboardX's SummaryWriter would meet it in a thread of its
    own, which dies, and leave the job waiting on its queue)."""
    from detector_training.core.tensorboard_events import TensorBoardHook

    with open(os.path.join(disk, "filler"), "wb") as handle:
        handle.write(b"x" * ((2 << 20) - (256 << 10)))  # 256 KB left
    folder = os.path.join(disk, "tensorboard")
    hook = TensorBoardHook(folder, {"epochs": 1})
    engine = SimpleNamespace(start_global_step=0, global_step=0, scalars={}, pictures={}, texts={})
    hook.before_train(engine)
    with pytest.raises(DiskFullError) as caught:
        for step in range(1, 10_000):
            engine.global_step = step
            engine.scalars = {"train/loss%d" % i: 1.0 / step for i in range(50)}
            engine.texts = {"note": "x" * 2000}
            hook.after_step(engine)
    assert str(caught.value).startswith("DiskFullError: the disk is full: TensorBoard's event file in %s could "
                                        "not be written (No space left on device)." % folder)
