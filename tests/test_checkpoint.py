import json
import os

import pytest

from frcnn_train.checkpoint import CheckpointManager, atomic_write_text
from frcnn_train.errors import CheckpointError


def payload(text):
    def write(tmp):
        with open(os.path.join(tmp, "model.params"), "w") as handle:
            handle.write(text)
        with open(os.path.join(tmp, "trainer.states"), "w") as handle:
            handle.write(text * 2)
    return write


def test_save_then_latest_returns_state_and_files(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=3)
    m.save(1, {"epoch": 1, "global_step": 10}, payload("a"))
    m.save(2, {"epoch": 2, "global_step": 20}, payload("bb"))
    path, state = m.latest()
    assert os.path.basename(path) == "ckpt-00000002"
    assert state["epoch"] == 2 and state["global_step"] == 20
    assert state["files"] == {"model.params": 2, "trainer.states": 4}
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


def test_no_checkpoint_returns_none(tmp_path):
    assert CheckpointManager(str(tmp_path / "none")).latest() is None


def test_a_failing_writer_leaves_the_previous_checkpoint_intact(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1}, payload("a"))

    def broken(tmp):
        with open(os.path.join(tmp, "model.params"), "w") as handle:
            handle.write("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError) as err:
        m.save(2, {"epoch": 2}, broken)
    assert "No space left" in str(err.value)
    assert m.latest()[1]["epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000001", "latest"]


def test_saving_the_same_epoch_again_replaces_it(tmp_path):
    m = CheckpointManager(str(tmp_path), keep=5)
    m.save(1, {"epoch": 1, "note": "first"}, payload("a"))
    m.save(1, {"epoch": 1, "note": "second"}, payload("abc"))
    state = json.load(open(os.path.join(tmp_path, "ckpt-00000001", "state.json")))
    assert state["note"] == "second" and state["files"]["model.params"] == 3
