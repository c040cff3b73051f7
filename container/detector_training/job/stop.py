"""Stop requests, both sides, in one place.

SageMaker stops a job (StopTrainingJob, spot interruption, max_run) with SIGTERM to the
container's process and gives it 120 seconds. The launcher (:class:`StopSignal`) turns the signal
into the host's stop file; every rank (:class:`RankStop`) asks ``requested()`` at each step
boundary: a signal of its own or the stop file. The ranks then agree (hooks.StopHook), save a
mid-epoch checkpoint and exit.

Signal handlers belong to the process that installed them, never to processes forked from it
(data-loader workers), see :func:`install_for_this_process`.

The exit phase: once a process's outcome is settled (the model written, or the failure file), it
leaves within :data:`EXIT_BOUND_S` whatever its exit handlers wait for (:func:`begin_exit`), and a
SIGTERM from then on ends it at once. A finished job that does not exit is a job SageMaker never
completes: the model directory is uploaded only after the container exits.
"""

import logging
import os
import signal
import sys
import threading
import time

LOG = logging.getLogger("detector_training")
STOP_FILE_NAME = "stop-requested"
FINISHED_FILE_NAME = "job-finished"  # beside the stop file: rank 0 wrote the model
EXIT_BOUND_S = 30  # a settled process leaves within this; the launcher waits longer (launcher.py)

_exit_code = None  # set by begin_exit: the code this process leaves with


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
        if _exit_code is not None:
            leave_now(_exit_code, "received signal %d after its work ended" % signum)
        handler(signum, frame)

    def default_in_child():
        # The check above runs only when the child executes Python; a child blocked in C (a
        # worker in MXNet's engine) would never run it and outlive its pool's SIGTERM. What the
        # parent set just before forking (the loader ignores SIGINT in its workers) stays.
        for signum in signums:
            if signal.getsignal(signum) is on_signal:
                signal.signal(signum, signal.SIG_DFL)

    for signum in signums:
        signal.signal(signum, on_signal)
    os.register_at_fork(after_in_child=default_in_child)


def begin_exit(code, bound_s=EXIT_BOUND_S):
    """This process's outcome is settled (model written, failure file written): from now on it
    leaves with ``code`` within ``bound_s`` seconds, even when an exit handler or a destructor
    waits forever (a data-loader pool's lock), and a SIGTERM ends it at once. Idempotent: the
    first code stands."""
    global _exit_code
    if _exit_code is not None:
        return
    _exit_code = code
    LOG.info("exit: leaving with code %d (at most %d s from now)", code, bound_s)
    guard = threading.Timer(bound_s, leave_now,
                            (code, "still running %d s after its work ended" % bound_s))
    guard.daemon = True  # never what keeps the interpreter alive
    guard.start()


def leave_now(code, reason):
    """Log ``reason``, flush the logs and end this process with ``code`` (no exit handlers)."""
    LOG.warning("exit: %s; leaving now with code %d", reason, code)
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def finished_file(stop_file):
    """The host's marker that rank 0 wrote the model (the launcher's exit clock starts there)."""
    return os.path.join(os.path.dirname(stop_file), FINISHED_FILE_NAME)


def mark_finished(stop_file):
    path = finished_file(stop_file)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("finished\n")


def request_stop(stop_file):
    """Create the host's stop file (what the launcher does on SIGTERM)."""
    os.makedirs(os.path.dirname(stop_file), exist_ok=True)
    with open(stop_file, "w") as handle:
        handle.write("stop\n")


def clear_stale_request(stop_file):
    """A stop file (or finished marker) left by an earlier run of the same job must not stop
    (or end) this one."""
    for path in (stop_file, finished_file(stop_file)):
        if os.path.exists(path):
            os.remove(path)


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
