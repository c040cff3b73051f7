"""Stop requests (job/stop.py): the launcher's signal, the rank's check."""

import os
import signal
import subprocess
import sys
import time

from detector_training.job.stop import (RankStop, StopSignal, clear_stale_request, finished_file,
                                        mark_finished)


def test_launcher_signal_writes_the_stop_file_that_the_rank_reads(tmp_path):
    stop_file = str(tmp_path / "work" / "stop-requested")
    rank = RankStop(stop_file)
    launcher = StopSignal(stop_file)
    assert not rank.requested()
    previous = signal.getsignal(signal.SIGINT)
    try:
        launcher.install()
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, previous)
    assert launcher.since is not None and rank.requested()
    clear_stale_request(stop_file)
    assert not rank.requested()


def test_a_rank_signal_is_a_stop_request_without_a_file():
    rank = RankStop(None)
    try:
        rank.install()
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert rank.requested()



EXIT_PROBE = """
import logging, os, signal, sys, threading, time
from detector_training.job.logs import setup_logging
from detector_training.job.stop import RankStop, begin_exit
setup_logging(0)
RankStop(None).install()
begin_exit(int(sys.argv[1]), bound_s=float(sys.argv[2]))
print("ready", flush=True)
threading.Event().wait()  # what a stuck exit handler does: wait forever
"""


def run_exit_probe(code, bound_s, signal_after_s=None):
    """The probe's (exit code, output, seconds from 'ready' to its exit)."""
    proc = subprocess.Popen([sys.executable, "-c", EXIT_PROBE, str(code), str(bound_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    before = []
    for line in proc.stdout:
        if line.strip() == "ready":
            break
        before.append(line)
    ready = time.time()
    if signal_after_s is not None:
        time.sleep(signal_after_s)
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=120)  # only catches a hang
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(before) + out, time.time() - ready


def test_a_settled_process_stuck_on_its_way_out_leaves_after_the_bound_with_its_code():
    code, out, took = run_exit_probe(3, 1.0)
    assert code == 3, out
    assert "exit: leaving with code 3 (at most 1 s from now)" in out
    assert "exit: still running 1 s after its work ended; leaving now with code 3" in out
    assert took >= 1.0


def test_sigterm_in_the_exit_phase_ends_the_process_at_once():
    code, out, took = run_exit_probe(0, 600, signal_after_s=0.5)
    assert code == 0, out
    assert "received signal 15 after its work ended; leaving now with code 0" in out
    assert "stopping at the next step boundary" not in out  # not taken as a stop request
    assert took < 60, took  # the bound was 600 s: a deadline that only catches a hang


FORK_PROBE = """
import os, signal, threading
from detector_training.job.stop import RankStop
RankStop(None).install()
result = []
def fork():  # a pool forks replacement workers from its handler thread
    pid = os.fork()
    if pid == 0:
        os._exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 9)
    result.append(os.waitpid(pid, 0)[1])
thread = threading.Thread(target=fork)
thread.start()
thread.join()
print("child", os.waitstatus_to_exitcode(result[0]))
print("parent handler is ours", signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None))
"""


def test_a_process_forked_after_install_has_sigterms_default_action_even_blocked_in_c():
    """A loader worker blocked in C (MXNet's engine) never runs a Python-level handler: it must
    get the default action at fork, or its pool's SIGTERM leaves it alive and the join hangs."""
    result = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True,
                            timeout=60)
    assert "child 0" in result.stdout, result.stdout + result.stderr
    assert "parent handler is ours True" in result.stdout


def test_clear_stale_request_removes_an_earlier_runs_finished_marker(tmp_path):
    stop_file = str(tmp_path / "work" / "stop-requested")
    mark_finished(stop_file)
    assert os.path.exists(finished_file(stop_file))
    clear_stale_request(stop_file)
    assert not os.path.exists(finished_file(stop_file))
