"""Once per host: local rank 0 prepares a directory under an exclusive lock and writes a completion
marker; the other ranks on the host poll for that marker (no collectives), and fail with its
reason when the fetcher failed in this launch.

The directory, the lock file and the marker are names in a working directory that may hold
anything: a symbolic link or another kind of file in their place is replaced (a directory where
the lock file belongs is refused), never written or read through.
"""

import errno
import fcntl
import logging
import os
import shutil
import socket
import stat
import tempfile
import time

from detector_training import settings
from detector_training.core.files import read_json, write_json
from detector_training.errors import FAILURE_LIMIT, DataError, JobError, shorten

LOG = logging.getLogger("detector_training")

MARKER_NAME = ".detector-data.json"
MARKER_FORMAT = 2
MARKER_CAP = 1 << 20


def marker_state(marker, key, launch):
    """'ok' (complete, same key), 'failed' (this launch's fetcher failed), else 'pending'."""
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or marker.get("key") != key:
        return "pending"
    if marker.get("status") == "ok":
        return "ok"
    if marker.get("status") == "failed" and marker.get("launch") == launch:
        return "failed"
    return "pending"


def launch_token(environ=None):
    """Identifies this launch of the job's ranks on this host, so that a waiting rank does not take
    an earlier launch's failure for its own: $DETECTOR_LAUNCH_ID when the launcher sets it, else the
    parent process (mpirun/orted start a host's ranks) and its start time."""
    environ = os.environ if environ is None else environ
    launch_id = settings.setting(settings.LAUNCH_ID, environ)
    if launch_id:
        return "env:" + launch_id
    ppid = os.getppid()
    started = ""
    try:
        with open("/proc/%d/stat" % ppid) as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    return "ppid:%d:%s" % (ppid, started)


def read_marker(root):
    """The marker under ``root``, or None when there is none to trust (missing, a symbolic link,
    not a regular file, not JSON): the directory is then prepared again."""
    try:
        return read_json(os.path.join(root, MARKER_NAME), MARKER_CAP, follow_symlinks=False)
    except DataError:
        return None


def _kind(mode):
    return "a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else \
        "a file" if stat.S_ISREG(mode) else "a special file"


def real_directory(path):
    """Make ``path`` a directory of its own: whatever else is there (a symbolic link, a file) is
    removed first, never followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        LOG.warning("data: %s was %s, not a directory; replacing it", path, _kind(mode))
        os.unlink(path)
    os.makedirs(path, exist_ok=True)


def _open_lock_file(path):
    """The lock file, opened without following a link: a symbolic link or a special file in its
    place is replaced by a new file, a directory is refused."""
    while True:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            raise DataError("%s, where the data lock file belongs, is a directory." % path,
                            "remove that directory from the working directory.")
        if mode is not None and not stat.S_ISREG(mode):
            LOG.warning("data: %s was %s, not a lock file; replacing it", path, _kind(mode))
            os.unlink(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # replaced meanwhile: look again
                continue
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return os.fdopen(fd, "rb+")
        os.close(fd)


def write_marker(root, **fields):
    payload = dict(fields, format=MARKER_FORMAT, time=time.time(), host=socket.gethostname())
    path = os.path.join(root, MARKER_NAME)
    if os.path.isdir(path) and not os.path.islink(path):  # a rename puts a file over anything else
        shutil.rmtree(path)
    write_json(path, payload)


def write_failure_marker(root, key, launch, exc):
    cause = exc.cause if isinstance(exc, JobError) else "%s: %s" % (type(exc).__name__, exc)
    fix = exc.fix if isinstance(exc, JobError) else "see the job log of local rank 0 on this host."
    try:
        real_directory(root)
        write_marker(root, status="failed", key=key, launch=launch, cause=cause, fix=fix)
    except OSError as err:  # the waiting ranks then time out; say why here
        LOG.error("data: could not write the failure marker under %s: %s", root, err)


class HostLock:
    """An exclusive flock on a file (one fetcher per directory at a time)."""

    def __init__(self, path):
        self._path = path
        self._handle = None

    def __enter__(self):
        self._handle = _open_lock_file(self._path)
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()


def wait_for_host(root, key, launch, ready, timeout_s, poll_s=1.0):
    """Ranks other than local rank 0: poll the marker until it says done (and ``ready(marker)``
    agrees), failed, or ``timeout_s`` runs out."""
    started = time.monotonic()
    next_log = started + 60.0
    while True:
        marker = read_marker(root)
        state = marker_state(marker, key, launch)
        if state == "ok" and ready(marker):
            return marker
        if state == "failed":
            fix = str(marker.get("fix") or "see the log of local rank 0 on this host.")
            prefix = "local rank 0 on this host failed to prepare the data: "
            room = FAILURE_LIMIT - 100 - len(prefix) - len(fix)
            raise DataError(prefix + shorten(str(marker.get("cause", "no reason recorded")), max(room, 80)), fix)
        now = time.monotonic()
        if now - started > timeout_s:
            raise DataError("timed out after %.0f s waiting for local rank 0 on this host to prepare the data "
                            "(no completion marker from this launch at %s)."
                            % (timeout_s, os.path.join(root, MARKER_NAME)),
                            "see the log of local rank 0: it may still be downloading (raise "
                            "DETECTOR_FETCH_WAIT_S) or it stopped without writing the marker.")
        if now >= next_log:
            LOG.info("data: waiting for local rank 0 to prepare %s (%.0f s so far)", root, now - started)
            next_log = now + 60.0
        time.sleep(poll_s)


def fill_once(root, key, launch, is_local_main, fill, wait_timeout_s, poll_s=1.0):
    """``root`` (an absolute path) filled once per host. Local rank 0 (``is_local_main``) calls
    ``fill(staging)`` under the host's lock, in a staging folder beside ``root`` that then
    replaces it (an earlier launch's copy) whole, and writes the completion marker with the
    fields ``fill`` returns; a failure leaves the failure marker. The host's other ranks wait
    for the marker. Returns ``root``."""
    if not is_local_main:
        wait_for_host(root, key, launch, lambda marker: True, wait_timeout_s, poll_s)
        return root
    parent, name = os.path.split(root)
    os.makedirs(parent, exist_ok=True)
    staging = None
    try:
        with HostLock(os.path.join(parent, "." + name + ".lock")):
            staging = tempfile.mkdtemp(prefix=".%s-staging-" % name, dir=parent)
            fields = fill(staging)
            shutil.rmtree(root, ignore_errors=True)  # an earlier launch's copy
            os.rename(staging, root)
            staging = None
            write_marker(root, status="ok", key=key, launch=launch, **fields)
    except BaseException as exc:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        write_failure_marker(root, key, launch, exc)
        raise
    return root
