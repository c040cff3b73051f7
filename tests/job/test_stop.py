"""Stop requests (job/stop.py): the launcher's signal, the rank's check."""

import os
import signal

from detector_training.job.stop import RankStop, StopSignal, clear_stale_request


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

