"""Files that readers never see half-written: the package's one atomic-write helper (and a
bounded reader for the small JSON files that come with untrusted input).

Everything the job leaves behind (checkpoint pointers, the model directory, the report, the
data-fetch completion marker, prediction pictures) goes through :func:`atomic_write`: the bytes
are written to a temporary file beside the target, flushed to disk and renamed over it.
"""

import json
import os
import tempfile


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


def atomic_save(path, save):
    """Create ``path`` so readers see the old file or the new one, never a partial one:
    ``save(tmp_path)`` writes a temporary file beside ``path`` (by name, as MXNet's
    ``save_parameters`` does), which is flushed to disk and renamed over ``path`` (mode 0644)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    os.close(fd)
    try:
        save(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; model files are read by other users/tools
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
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


class TooLarge(ValueError):
    pass


def read_small_json(path, cap):
    """JSON from a file of at most ``cap`` bytes (a classes.json or config.json that came with a
    user's model): a larger file raises TooLarge before anything is parsed; invalid JSON raises
    ValueError, a missing file OSError."""
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise TooLarge("%s is larger than %d bytes" % (os.path.basename(path), cap))
    return json.loads(data.decode("utf-8"))


def path_inside(root, path):
    """``path`` (absolute, or relative to ``root``) as a real path, if it lies inside ``root``
    after every ``..`` and symbolic link is resolved; None when it leaves ``root``."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    return real if real == real_root or real.startswith(real_root + os.sep) else None
