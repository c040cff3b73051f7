"""Once per host: the marker's states, the waiting rank, the lock."""

import os
import threading
import time

import pytest

from detector_training.data.acquire import host_once
from detector_training.errors import DataError


def test_marker_state():
    fmt = host_once.MARKER_FORMAT
    ok = {"format": fmt, "status": "ok", "key": "k", "launch": "old"}
    failed = {"format": fmt, "status": "failed", "key": "k", "launch": "this", "cause": "x"}
    assert host_once.marker_state(ok, "k", "this") == "ok"  # a complete directory serves any launch
    assert host_once.marker_state(ok, "other", "this") == "pending"
    assert host_once.marker_state(failed, "k", "this") == "failed"
    assert host_once.marker_state(dict(failed, launch="earlier"), "k", "this") == "pending"
    assert host_once.marker_state(None, "k", "this") == "pending"
    assert host_once.marker_state(dict(ok, format=fmt - 1), "k", "this") == "pending"  # an older layout


def test_launch_token_prefers_the_launcher_id():
    assert host_once.launch_token({"DETECTOR_LAUNCH_ID": "abc"}) == "env:abc"
    assert host_once.launch_token({}).startswith("ppid:%d:" % os.getppid())


def test_a_waiting_rank_sees_success_then_failure_with_its_reason(tmp_path):
    root = str(tmp_path)
    host_once.write_marker(root, status="ok", key="k", launch="l", tree={"n": 1})
    marker = host_once.wait_for_host(root, "k", "l", lambda m: m["tree"] == {"n": 1}, timeout_s=5, poll_s=0.01)
    assert marker["status"] == "ok" and marker["host"]
    host_once.write_failure_marker(root, "k", "l", DataError("the disk is full", "free some space."))
    with pytest.raises(DataError, match="failed to prepare the data: the disk is full") as caught:
        host_once.wait_for_host(root, "k", "l", lambda m: True, timeout_s=5, poll_s=0.01)
    assert caught.value.fix == "free some space."


def test_a_waiting_rank_waits_until_the_tree_is_ready(tmp_path):
    root = str(tmp_path)
    host_once.write_marker(root, status="ok", key="k", launch="l")
    ready = threading.Event()
    started = time.monotonic()  # before the timer starts, so the wait is at least its 0.3 s
    threading.Timer(0.3, ready.set).start()
    host_once.wait_for_host(root, "k", "l", lambda m: ready.is_set(), timeout_s=5, poll_s=0.01)
    assert time.monotonic() - started >= 0.3


def test_the_host_lock_is_exclusive(tmp_path):
    path = str(tmp_path / "lock")
    trying, inside = threading.Event(), threading.Event()
    first_holds = []  # whether the first holder still held the lock when the second got in

    def second():
        trying.set()
        with host_once.HostLock(path):
            first_holds.append(holding.is_set())
            inside.set()

    holding = threading.Event()
    with host_once.HostLock(path):
        holding.set()
        thread = threading.Thread(target=second)
        thread.start()
        assert trying.wait(5)  # the second is at the lock while the first holds it, however late it started
        assert not inside.wait(1.0), "a second holder got in while the first held the lock"
        holding.clear()
    thread.join(5)
    assert inside.is_set() and first_holds == [False]  # it got in once the first let go


def test_a_marker_that_is_not_a_file_is_no_marker_and_never_blocks(tmp_path):
    root = tmp_path / "voc"
    root.mkdir()
    elsewhere = tmp_path / "forged.json"
    elsewhere.write_text('{"format": %d, "status": "ok", "key": "k", "launch": "l"}' % host_once.MARKER_FORMAT)
    for make in (lambda p: os.mkfifo(str(p)), lambda p: p.symlink_to(elsewhere), lambda p: p.symlink_to("/dev/zero"),
                 lambda p: p.mkdir()):
        marker = root / host_once.MARKER_NAME
        make(marker)
        found = []
        reader = threading.Thread(target=lambda: found.append(host_once.read_marker(str(root))), daemon=True)
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "reading the marker blocked"
        assert found == [None]
        host_once.write_marker(str(root), status="ok", key="k", launch="l")  # replaces it, never through it
        assert host_once.read_marker(str(root))["status"] == "ok"
        assert elsewhere.read_text().startswith('{"format"')
        os.remove(str(marker))


def test_the_lock_file_and_the_data_directory_are_replaced_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    lock, data = tmp_path / "work" / ".voc.lock", tmp_path / "work" / "voc"
    lock.parent.mkdir()
    lock.symlink_to(outside / "created-through-the-lock")
    data.symlink_to(outside)
    with host_once.HostLock(str(lock)):
        host_once.real_directory(str(data))
    assert os.listdir(outside) == []
    assert lock.is_file() and not lock.is_symlink() and data.is_dir() and not data.is_symlink()
    lock.unlink()
    lock.mkdir()
    with pytest.raises(DataError, match="where the data lock file belongs, is a directory"):
        with host_once.HostLock(str(lock)):
            pass


def test_fill_once_replaces_an_earlier_copy_whole_and_marks_it(tmp_path):
    root = str(tmp_path / "work" / "copy")
    os.makedirs(os.path.join(root, "stale"))

    def fill(staging):
        open(os.path.join(staging, "data"), "w").write("new")
        return {"lines": {"train": 1}}

    assert host_once.fill_once(root, "k", "this", True, fill, 5) == root
    assert sorted(os.listdir(root)) == [host_once.MARKER_NAME, "data"]  # the stale copy gone
    marker = host_once.read_marker(root)
    assert host_once.marker_state(marker, "k", "this") == "ok" and marker["lines"] == {"train": 1}
    assert [n for n in os.listdir(tmp_path / "work") if "staging" in n] == []
    # another rank of the host only waits for the marker
    assert host_once.fill_once(root, "k", "this", False, lambda s: pytest.fail("filled"), 5) == root


def test_fill_once_leaves_the_failure_marker_and_no_staging_folder(tmp_path):
    root = str(tmp_path / "work" / "copy")

    def fill(staging):
        open(os.path.join(staging, "half"), "w").write("x")
        raise DataError("the FIFO ended early.", "send it again.")

    with pytest.raises(DataError, match="ended early"):
        host_once.fill_once(root, "k", "this", True, fill, 5)
    marker = host_once.read_marker(root)
    assert host_once.marker_state(marker, "k", "this") == "failed"
    assert marker["cause"] == "the FIFO ended early." and marker["fix"] == "send it again."
    assert [n for n in os.listdir(tmp_path / "work") if "staging" in n] == []
    with pytest.raises(DataError, match="ended early"):  # a waiting rank gets the reason
        host_once.fill_once(root, "k", "this", False, fill, 5, poll_s=0.05)
