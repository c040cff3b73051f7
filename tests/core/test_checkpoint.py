import json
import os

import pytest

from detector_training.core.checkpoint import CheckpointManager
from detector_training.core.files import atomic_write_text
from detector_training.errors import CheckpointError, DiskFullError


def payload(text):
    def write(tmp):
        with open(os.path.join(tmp, "model.params"), "w") as handle:
            handle.write(text)
        with open(os.path.join(tmp, "optimizer.params"), "w") as handle:
            handle.write(text * 2)
    return write


def test_save_then_latest_returns_state_and_files(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=3)
    m.save(1, {"epoch": 1, "global_step": 10}, payload("a"))
    m.save(2, {"epoch": 2, "global_step": 20}, payload("bb"))
    path, state = m.latest()
    assert os.path.basename(path) == "ckpt-00000002"
    assert state["epoch"] == 2 and state["global_step"] == 20
    assert state["files"] == {"model.params": 2, "optimizer.params": 4}
    assert open(os.path.join(tmp_path, "latest")).read().strip() == "ckpt-00000002"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_keeps_only_the_last_n(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=2)
    for epoch in range(1, 6):
        m.save(epoch, {"epoch": epoch}, payload("x"))
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt-")) == ["ckpt-00000004", "ckpt-00000005"]


def test_truncated_checkpoint_is_never_taken_as_complete(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("aaaa"))
    m.save(2, {"epoch": 2}, payload("bbbb"))
    # Simulate a copy cut short (e.g. a partial sync): params shorter than recorded.
    with open(os.path.join(tmp_path, "ckpt-00000002", "model.params"), "w") as handle:
        handle.write("b")
    path, state = m.latest()
    assert os.path.basename(path) == "ckpt-00000001" and state["epoch"] == 1


@pytest.mark.parametrize("state", ["[" * 100000 + "]" * 100000, '{"epoch": NaN}', '{"files": {}, "x": "%s"}'
                                   % ("a" * (17 << 20))])
def test_a_state_file_that_breaks_the_json_policy_is_not_a_checkpoint(tmp_path, state):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    m.save(2, {"epoch": 2}, payload("a"))
    with open(os.path.join(tmp_path, "ckpt-00000002", "state.json"), "w") as handle:
        handle.write(state)
    path, found = m.latest()  # the one before it, and no RecursionError or huge read
    assert os.path.basename(path) == "ckpt-00000001" and found["epoch"] == 1


def test_pointer_missing_or_stale_falls_back_to_newest_complete(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    m.save(3, {"epoch": 3}, payload("a"))
    os.remove(os.path.join(tmp_path, "latest"))
    assert m.latest()[1]["epoch"] == 3
    atomic_write_text(os.path.join(tmp_path, "latest"), "ckpt-00000009\n")
    assert m.latest()[1]["epoch"] == 3


def test_foreign_and_partial_entries_are_ignored(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    os.makedirs(os.path.join(tmp_path, ".tmp-ckpt-00000002-xyz"))
    open(os.path.join(tmp_path, "ckpt-00000002.sagemaker-uploading"), "w").close()
    os.makedirs(os.path.join(tmp_path, "ckpt-00000003"))  # directory without state.json
    with open(os.path.join(tmp_path, "ckpt-00000003", "model.params"), "w") as handle:
        handle.write("zzz")
    assert m.latest()[1]["epoch"] == 1


def test_the_next_save_removes_what_a_killed_writer_left_behind(tmp_path):
    """A writer killed mid-save (SIGKILL, a lost host) leaves its temporaries; SageMaker would sync
    them to S3 with every checkpoint. The next save removes them, and nothing else that is not its own."""
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    left = [".tmp-ckpt-00000002-abc", ".old-ckpt-00000001-def", ".tmp-x1y2"]
    for name in left[:2]:
        os.makedirs(os.path.join(tmp_path, name, "ckpt-00000002"))
        open(os.path.join(tmp_path, name, "ckpt-00000002", "model.params"), "w").close()
    open(os.path.join(tmp_path, left[2]), "w").close()  # atomic_write_text's temporary of `latest`
    foreign = ["ckpt-00000002.sagemaker-uploading", "notes.txt"]
    for name in foreign:
        open(os.path.join(tmp_path, name), "w").close()
    m.save(2, {"epoch": 2}, payload("b"))
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt-00000001", "ckpt-00000002", "latest"] + foreign)


def test_no_checkpoint_returns_none(tmp_path):
    assert CheckpointManager(str(tmp_path / "none")).latest() is None


def partial_writer(error):
    """A payload writer that leaves a partial file in the checkpoint being written, then raises."""
    def broken(tmp):
        with open(os.path.join(tmp, "model.params"), "w") as handle:
            handle.write("partial")
        raise error

    return broken


def test_a_failing_writer_leaves_the_previous_checkpoint_intact(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    with pytest.raises(DiskFullError) as err:
        m.save(2, {"epoch": 2}, partial_writer(OSError(28, "No space left on device")))
    assert "checkpoint ckpt-00000002 in %s could not be written (No space left on device); the previous " \
           "checkpoint ckpt-00000001 is kept" % tmp_path in str(err.value)
    assert m.latest()[1]["epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000001", "latest"]


def test_a_writer_that_fails_otherwise_leaves_nothing_behind(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))
    with pytest.raises(RuntimeError):
        m.save(2, {"epoch": 2}, partial_writer(RuntimeError("a writer's own error (MXNet's are not OSErrors)")))
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000001", "latest"]
    with pytest.raises(CheckpointError, match="could not write checkpoint ckpt-00000003 .*Permission denied"):
        m.save(3, {"epoch": 3}, lambda tmp: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))


def test_saving_the_same_epoch_again_replaces_it(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1, "note": "first"}, payload("a"))
    m.save(1, {"epoch": 1, "note": "second"}, payload("abc"))
    state = json.load(open(os.path.join(tmp_path, "ckpt-00000001", "state.json")))
    assert state["note"] == "second" and state["files"]["model.params"] == 3


# ----------------------------------------------------------------------- optimizer state, no pickle

def _trained(steps, momentum=0.9):
    """A tiny Gluon net and its SGD trainer after ``steps`` updates (fixed data, fixed init)."""
    import mxnet as mx

    mx.random.seed(7)
    net = mx.gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier())
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": momentum})
    data = mx.nd.array([[1, 2, 3, 4], [0.5, -1, 2, 0]])
    for _ in range(steps):
        with mx.autograd.record():
            loss = (net(data) ** 2).sum()
        loss.backward()
        trainer.step(2)
    return net, trainer, data


def test_optimizer_state_round_trips_without_pickle(tmp_path):
    import mxnet as mx

    from detector_training.core.checkpoint import apply_optimizer_state, read_optimizer_state, save_optimizer_state, states_digest

    net, trainer, data = _trained(3)
    save_optimizer_state(trainer, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["optimizer.json", "optimizer.params"]
    layout = json.load(open(tmp_path / "optimizer.json"))  # plain JSON and MXNet's array format
    assert layout["num_update"] == 3 and set(layout["states"]) == {"0", "1"}
    assert set(mx.nd.load(str(tmp_path / "optimizer.params"))) == {"0", "1"}

    fresh_net, fresh, _ = _trained(0)
    pairs = list(zip(net.collect_params().values(), fresh_net.collect_params().values()))
    for param, twin in pairs:  # the weights come from model.params in a real resume
        twin.set_data(param.data())
    apply_optimizer_state(fresh, *read_optimizer_state(str(tmp_path)))
    assert states_digest(fresh._updaters[0].states) == states_digest(trainer._updaters[0].states)
    assert fresh._updaters[0].optimizer.num_update == 3
    for model, opt in ((net, trainer), (fresh_net, fresh)):  # one more step: the same weights
        with mx.autograd.record():
            loss = (model(data) ** 2).sum()
        loss.backward()
        opt.step(2)
    for param, twin in pairs:
        assert (param.data() - twin.data()).abs().max().asscalar() < 1e-6


def test_a_pickled_optimizer_state_is_never_loaded(tmp_path):
    import pickle

    from detector_training.core.checkpoint import read_optimizer_state

    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "trainer.states").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError, match="earlier version, whose pickled optimizer state is not loaded"):
        read_optimizer_state(str(tmp_path))
    assert not marker.exists()


def test_a_damaged_optimizer_state_is_a_checkpoint_error(tmp_path):
    from detector_training.core.checkpoint import read_optimizer_state, save_optimizer_state

    _, trainer, _ = _trained(1)
    save_optimizer_state(trainer, str(tmp_path))
    (tmp_path / "optimizer.params").write_bytes(b"\x00" * 40)
    with pytest.raises(CheckpointError, match="cannot be read: .*Invalid NDArray file format") as caught:
        read_optimizer_state(str(tmp_path))
    assert "Traceback" not in str(caught.value) and "ndarray.cc" not in str(caught.value)  # MXNet's C++ trace
    save_optimizer_state(trainer, str(tmp_path))
    layout = json.load(open(tmp_path / "optimizer.json"))
    layout["states"]["0"] = "no-such-array"
    (tmp_path / "optimizer.json").write_text(json.dumps(layout))
    with pytest.raises(CheckpointError, match="arrays no-such-array are missing"):
        read_optimizer_state(str(tmp_path))
    (tmp_path / "optimizer.json").write_text('{"format": 1, "states": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(CheckpointError, match="optimizer.json is not usable JSON: it is nested more than"):
        read_optimizer_state(str(tmp_path))


def test_a_checkpoint_of_another_network_is_a_checkpoint_error_naming_it(tmp_path):
    """A checkpoint location reused by a job of another network: its parameters do not load."""
    import mxnet as mx

    from detector_training.core.checkpoint import Position, load_latest, save_checkpoint

    other, trainer, _ = _trained(1)  # Dense(3, in_units=4)
    manager = CheckpointManager(str(tmp_path), keep=2)
    save_checkpoint(manager, other, trainer, Position(epoch=1, global_step=1),
                    {"network": "yolo3_darknet53_voc"})
    net = mx.gluon.nn.Dense(5, in_units=4)
    net.initialize()
    with pytest.raises(CheckpointError) as caught:
        load_latest(manager, net, mx.cpu())
    text = str(caught.value)
    assert "checkpoint %s holds parameters of yolo3_darknet53_voc that do not load into this " \
           "job's network:" % os.path.join(str(tmp_path), "ckpt-00000001") in text, text
    assert "shape" in text and "Traceback" not in text, text
    assert "a checkpoint location of its own" in text, text
