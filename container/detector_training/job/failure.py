"""The job's failure file, ``/opt/ml/output/failure``: its first 1024 characters become the job's
FailureReason. Written once: the first writer (the first failing rank or the launcher) wins, as
the sagemaker-training toolkit also writes it only when it does not exist yet."""

import logging
import os
import traceback

from detector_training.errors import failure_text_for

LOG = logging.getLogger("detector_training")


def write_failure(path, text):
    """Write ``text`` to the failure file unless it exists; whether this call wrote it."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:  # FileExistsError included: an earlier writer's reason stands
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    return True


def report_failure(exc, failure_path):
    """Log the reason and the traceback, write the failure file once; the exit code to use.
    A clean ``SystemExit`` (code 0 or None) is not a failure and is raised again."""
    if isinstance(exc, SystemExit) and not exc.code:
        raise exc
    text = failure_text_for(exc)
    LOG.error("job failed: %s\n%s", text, traceback.format_exc())
    write_failure(failure_path, text)
    return 1
