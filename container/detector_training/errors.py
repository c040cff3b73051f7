"""Errors a user can act on.

Every error the job raises on purpose is a :class:`JobError` with a category, a cause and a fix.
The top-level handler turns it into the short ``/opt/ml/output/failure`` text (SageMaker shows
the first 1024 characters as the job's FailureReason) and logs the full traceback.
"""

import re

FAILURE_LIMIT = 1000  # SageMaker keeps 1024 characters; stay safely under it.


class JobError(Exception):
    """An error with a category (what went wrong), a cause and a fix."""

    category = "JobError"

    def __init__(self, cause, fix=""):
        super().__init__(cause)
        self.cause = cause
        self.fix = fix

    def __reduce__(self):  # survives the trip back from a data-loader worker process
        return (type(self), (self.cause, self.fix))

    def failure_text(self):
        text = "%s: %s" % (self.category, self.cause)
        if self.fix:
            text += " Fix: %s" % self.fix
        return shorten(text)

    def __str__(self):
        return self.failure_text()


class ConfigError(JobError):
    """A hyperparameter, or a combination of them, that cannot work."""

    category = "ConfigError"


class DataError(JobError):
    """The dataset is missing, malformed or does not match the configuration."""

    category = "DataError"


class ArchiveError(DataError):
    """A tar archive (a dataset's, a model's) that cannot be used: unreadable, refused by the
    extraction policy, or too large for the disk. ``reason`` is one short sentence for messages."""

    category = "ArchiveError"

    def __init__(self, reason, fix="use an intact archive of regular files and directories."):
        super().__init__(reason, fix)

    @property
    def reason(self):
        return self.cause


class PretrainedWeightsError(JobError):
    """Backbone weights could be found neither locally nor by download."""

    category = "PretrainedWeightsError"


class CheckpointError(JobError):
    """A checkpoint could not be written or read."""

    category = "CheckpointError"


class ModelError(JobError):
    """A model directory (or model.tar.gz) that is incomplete or holds files a job did not write."""

    category = "ModelError"


class DiskFullError(JobError):
    """A file the job writes (a checkpoint, the model, the report, TensorBoard events) did not fit:
    the disk is full. What was there before it stays as it was."""

    category = "DiskFullError"


class StopError(JobError):
    """A stop request (SIGTERM: the job stopped, its time limit) ended work that cannot be resumed
    before it was done."""

    category = "Stopped"


class EnvironmentCheckError(JobError):
    """The machine cannot run the job as configured (GPU, shared memory, ...)."""

    category = "EnvironmentError"


def shorten(text, limit=FAILURE_LIMIT):
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


# MXNet's place in its own sources inside a message: "[01:48:53] ../src/operator/x.h:1294: ".
_MXNET_SOURCE = re.compile(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ")
# The lines of a traceback MXNet puts in its error text: where the fault was, not what it was.
_TRACE_LINE = re.compile(r'Traceback \(most recent call last\):$|File ".*", line \d+|Stack trace:$|\[bt\] ')


def one_line(exc):
    """An exception's text in one line, for a reason a user reads: MXNet's run to many lines, with
    a traceback of its C++ source; this is its check failure when it has one, else the first line
    that is not part of a traceback, without MXNet's clock time and source file, so that the same
    fault reads the same every time."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not _TRACE_LINE.match(line)] or lines
    text = next((line for line in lines if "Check failed" in line), lines[0] if lines else "")
    return _MXNET_SOURCE.sub("", text) or type(exc).__name__


def failure_text_for(exc):
    """The one-paragraph failure text for any exception."""
    if isinstance(exc, JobError):
        return exc.failure_text()
    return shorten(
        "AlgorithmError: %s: %s. Fix: see the full traceback in the job log; "
        "this is a bug or an unexpected environment problem." % (type(exc).__name__, exc)
    )
