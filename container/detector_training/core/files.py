"""Files that readers never see half-written: the package's one atomic-write helper; and the one
reader of JSON that comes from outside (a channel, a model, the job's configuration).

Everything the job leaves behind (checkpoint pointers, the model directory, the report, the
data-fetch completion marker, prediction pictures) goes through :func:`atomic_write`: the bytes
are written to a temporary file beside the target, flushed to disk and renamed over it.
"""

import errno
import json
import math
import os
import shutil
import stat
import tempfile

from detector_training.errors import DataError, DiskFullError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_FIX = ("give the job more disk: a larger storage volume (the estimator's volume_size, SageMaker's "
                 "VolumeSizeInGB), or fewer checkpoints kept (keep_checkpoints).")
_PROBE_BYTES = 1 << 16
# The names of the project's temporaries beside what they become (tempfile.mk*temp prefixes):
# TEMPORARY while written, REPLACED for what a new checkpoint displaces until it is complete.
# A sweep of leftovers matches both (TEMPORARIES).
TEMPORARY = ".tmp-"
REPLACED = ".old-"
TEMPORARIES = (TEMPORARY, REPLACED)


def sweep_temporaries(directory):
    """Remove what a writer killed mid-write (SIGKILL, a lost host) left in ``directory``: the
    project's temporaries (TEMPORARIES), files or directories; nothing else. Only while no write
    into ``directory`` is under way."""
    for name in os.listdir(directory):
        if name.startswith(TEMPORARIES):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def fsync_dir(path):
    """Make a rename inside ``path`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def full_disk(exc, directory):
    """The errno (ENOSPC, EDQUOT) when the failed write ``exc`` into ``directory`` met a full disk,
    else None: the exception's own errno, or, for a writer that gives none (MXNet's
    ``save_parameters`` fails with 'Write incomplete'), a probe: no room left there for 64 KiB.
    Call it before removing what the failed write left (that frees the space again)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno if exc.errno in FULL_ERRNOS else None
    if not isinstance(exc, Exception):
        return None
    try:
        fd, probe = tempfile.mkstemp(prefix=TEMPORARY + "probe-", dir=directory)
    except OSError as err:
        return err.errno if err.errno in FULL_ERRNOS else None
    try:
        os.posix_fallocate(fd, 0, _PROBE_BYTES)
        return None
    except OSError as err:
        if err.errno in FULL_ERRNOS:
            return err.errno
        # A file system without fallocate: ask for its free space instead.
        return errno.ENOSPC if shutil.disk_usage(directory).free < _PROBE_BYTES else None
    finally:
        os.close(fd)
        os.unlink(probe)


def disk_full_error(path, code, kept=None):
    """The DiskFullError for ``path`` that did not fit (``code``: what ``full_disk`` returned);
    ``kept``: what stays in its place, for the message."""
    return DiskFullError("the disk is full: %s could not be written (%s)%s." % (
        path, os.strerror(code), "; %s is kept" % kept if kept else ""), DISK_FULL_FIX)


def sync_file(path):
    """Flush ``path``'s data to disk (before a rename makes it part of something complete)."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def atomic_save(path, save):
    """Create ``path`` so readers see the old file or the new one, never a partial one:
    ``save(tmp_path)`` writes a temporary file beside ``path`` (by name, as MXNet's
    ``save_parameters`` does), which is flushed to disk and renamed over ``path`` (mode 0644).
    A full disk is a DiskFullError naming ``path`` (the old file, if any, stays)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TEMPORARY, dir=directory)
        os.close(fd)
        save(tmp)
        sync_file(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; model files are read by other users/tools
        os.replace(tmp, path)
    except BaseException as exc:
        code = full_disk(exc, directory)
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if code:
            raise disk_full_error(path, code, "the earlier file" if os.path.exists(path) else None) from exc
        raise
    fsync_dir(directory)


def atomic_save_prefix(prefix, save):
    """:func:`atomic_save` for a writer of several files by one name prefix (a family's export:
    ``<prefix>-symbol.json`` and ``<prefix>-0000.params``): ``save(tmp_prefix)`` writes them into
    a temporary folder beside them; each is flushed to disk and renamed into place. A stop or a
    crash part-way leaves whole files, never a torn one; a full disk is a DiskFullError."""
    directory = os.path.dirname(os.path.abspath(prefix))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=TEMPORARY, dir=directory)
        save(os.path.join(tmp, os.path.basename(prefix)))
        names = sorted(os.listdir(tmp))
        for name in names:
            sync_file(os.path.join(tmp, name))
            os.chmod(os.path.join(tmp, name), 0o644)
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(directory, name))
    except BaseException as exc:
        code = full_disk(exc, directory)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if code:
            raise disk_full_error(os.path.abspath(prefix) + "-*", code) from exc
        raise
    os.rmdir(tmp)
    fsync_dir(directory)


def atomic_write(path, write):
    """:func:`atomic_save` for a writer of an open binary handle: ``write(handle)``."""

    def save(tmp):
        with open(tmp, "wb") as handle:
            write(handle)

    atomic_save(path, save)


def atomic_write_text(path, text):
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def write_json(path, value):
    """``value`` as indented, key-sorted JSON (anything else JSON cannot encode as its str)."""
    atomic_write_text(path, json.dumps(value, indent=1, sort_keys=True, default=str) + "\n")


JSON_MAX_DEPTH = 64  # COCO's deepest field (a polygon in a segmentation list) is 4 levels down


def _finite(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number too large for a float (%s)" % text[:40])
    return value


def _constant(name):
    raise ValueError("%s, which JSON does not allow" % name)


def _depth_problem(value, max_depth):
    pending = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > max_depth:
            return "it is nested more than %d levels deep" % max_depth
        for item in node.values() if type(node) is dict else node:
            if type(item) is dict or type(item) is list:
                pending.append((item, depth + 1))
    return None


def parse_json(text, source, *, max_depth=JSON_MAX_DEPTH, error=DataError, fix="write it as valid JSON."):
    """One JSON document (``text``: str or UTF-8 bytes) under the policy for untrusted JSON: NaN,
    Infinity and numbers beyond a float are refused, and so is nesting deeper than ``max_depth``.
    Errors are ``error(cause, fix)`` with the cause naming ``source`` (a file name, or a file and
    line for JSON Lines)."""
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        raise error("%s is not usable JSON: it is nested more than %d levels deep." % (source, max_depth),
                    fix) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a refused number, too many digits
        raise error("%s is not valid JSON (%s)." % (source, str(exc)[:200]), fix) from None
    if isinstance(value, (dict, list)):
        problem = _depth_problem(value, max_depth)
        if problem:
            raise error("%s is not usable JSON: %s." % (source, problem), fix)
    return value


def json_preview(value, limit=60):
    """A short rendering of a JSON value for an error message."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_json(path, cap, *, error=DataError, fix="write it as valid JSON.", max_depth=JSON_MAX_DEPTH,
              follow_symlinks=True):
    """:func:`parse_json` of the regular file ``path`` of at most ``cap`` bytes: a larger file, a
    FIFO, a device or a directory is refused before anything is parsed (opened without blocking,
    checked on the open descriptor), and so is a symbolic link unless ``follow_symlinks``. Errors
    name the file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error("cannot read %s (%s)." % (path, exc.strerror or exc), fix) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error("%s is not a regular file." % path, fix)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(cap + 1)
        except OSError as exc:
            raise error("cannot read %s (%s)." % (path, exc.strerror or exc), fix) from None
    if len(data) > cap:
        raise error("%s is larger than the %d bytes allowed." % (path, cap), fix)
    return parse_json(data, path, max_depth=max_depth, error=error, fix=fix)


def path_inside(root, path):
    """``path`` (absolute, or relative to ``root``) as a real path, if it lies inside ``root``
    after every ``..`` and symbolic link is resolved; None when it leaves ``root``."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    return real if real == real_root or real.startswith(real_root + os.sep) else None
