"""Signal handlers that belong to one process, not to the processes forked from it."""

import os
import signal


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
