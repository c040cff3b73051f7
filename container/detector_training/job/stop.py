"""Stop requests, both sides, in one place.

SageMaker stops a job (StopTrainingJob, spot interruption, max_run) with SIGTERM to the
container's process and gives it 120 seconds. The launcher (:class:`StopSignal`) turns the signal
into the host's stop file; every rank (:class:`RankStop`) asks ``requested()`` at each step
boundary: a signal of its own or the stop file. The ranks then agree (engine.StopHook), save a
mid-epoch checkpoint and exit.

Signal handlers belong to the process that installed them, never to processes forked from it
(data-loader workers), see :func:`install_for_this_process`.
"""

import logging
import os
import signal
import time

LOG = logging.getLogger("detector_training")
STOP_FILE_NAME = "stop-requested"


def install_for_this_process(handler, signums):
    """Call ``handler(signum, frame)`` for ``signums`` in this process only. A process forked from
    it (a data-loader worker, which its pool ends with SIGTERM) gets the default action instead:
    inheriting a handler that only records a stop, it would outlive its pool and hang the job."""
    owner = os.getpid()

    def on_signal(signum, frame):
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        handler(signum, frame)

    for signum in signums:
        signal.signal(signum, on_signal)


def request_stop(stop_file):
    """Create the host's stop file (what the launcher does on SIGTERM)."""
    os.makedirs(os.path.dirname(stop_file), exist_ok=True)
    with open(stop_file, "w") as handle:
        handle.write("stop\n")


def clear_stale_request(stop_file):
    """A stop file left by an earlier run of the same job must not stop this one."""
    if os.path.exists(stop_file):
        os.remove(stop_file)


class StopSignal:
    """The launcher's side: SIGTERM/SIGINT record the time and create the host's stop file."""

    def __init__(self, stop_file):
        self.stop_file = stop_file
        self.since = None

    def install(self):
        """In this process only: with world size 1 the job runs here, and its forked data-loader
        workers must keep the default action."""
        install_for_this_process(self._handle, (signal.SIGTERM, signal.SIGINT))

    def _handle(self, signum, _frame):
        if self.since is None:
            self.since = time.time()
            LOG.warning("received signal %d: asking the ranks to checkpoint and stop", signum)
            request_stop(self.stop_file)


class RankStop:
    """A rank's side: ``requested()`` is true once this process got SIGTERM or the host's stop
    file exists."""

    def __init__(self, stop_file=None):
        self.stop_file = stop_file
        self.signalled = False

    def install(self):
        install_for_this_process(self._handle, (signal.SIGTERM,))
        return self

    def _handle(self, signum, _frame):
        if not self.signalled:
            self.signalled = True
            LOG.warning("received signal %d: stopping at the next step boundary", signum)

    def requested(self):
        return self.signalled or bool(self.stop_file and os.path.exists(self.stop_file))
