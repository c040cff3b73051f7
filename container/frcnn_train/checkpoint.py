"""Checkpoints that lose nothing.

Layout under the checkpoint directory::

    ckpt-00000240/      model.params, trainer.states, state.json (next epoch and iteration, global
                        step, best mAP, history, config, and the size of every file, so a truncated
                        copy is never taken as complete); numbered by global step, so a mid-epoch
                        checkpoint (stop, spot interruption) and an end-of-epoch one never collide
    latest              the name of the newest complete checkpoint, written last

Each checkpoint is written into a temporary directory and renamed into place; ``latest`` is
replaced atomically afterwards. Resume reads ``latest`` and falls back to the newest complete
directory when the pointer is missing or names something incomplete. Anything else in the
directory (SageMaker's ``*.sagemaker-uploading`` files, temporary directories) is ignored.
"""

import json
import os
import re
import shutil
import tempfile

from .errors import CheckpointError

POINTER = "latest"
STATE = "state.json"
_NAME = re.compile(r"^ckpt-(\d{8,})$")


def _fsync_dir(path):
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


def atomic_write(path, write):
    """Write a file so readers see the old or the new one, never a partial one: ``write(handle)``
    fills a binary temporary file beside ``path``, which then replaces it (mode 0644)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; model files are read by other users/tools
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def atomic_write_text(path, text):
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


class CheckpointManager:
    def __init__(self, directory, keep=3):
        self.directory = directory
        self.keep = keep

    def _path(self, name):
        return os.path.join(self.directory, name)

    @staticmethod
    def name(number):
        return "ckpt-%08d" % number

    def save(self, number, state, write_files):
        """Write checkpoint ``number`` (the global step). ``write_files(tmpdir)`` writes the
        payload files; ``state`` (JSON-able) is completed with the file sizes and written last."""
        os.makedirs(self.directory, exist_ok=True)
        name = self.name(number)
        tmp = tempfile.mkdtemp(prefix=".tmp-%s-" % name, dir=self.directory)
        try:
            write_files(tmp)
            files = {f: os.path.getsize(os.path.join(tmp, f)) for f in sorted(os.listdir(tmp))}
            record = dict(state, name=name, files=files)
            with open(os.path.join(tmp, STATE), "w") as handle:
                json.dump(record, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            final = self._path(name)
            if os.path.exists(final):  # the same step saved again (a resumed job re-saving it)
                old = tempfile.mkdtemp(prefix=".old-%s-" % name, dir=self.directory)
                os.rename(final, os.path.join(old, name))
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(self.directory)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError("could not write checkpoint %s in %s: %s" % (name, self.directory, exc),
                                  "check free disk space and permissions of the checkpoint directory.") from exc
        atomic_write_text(self._path(POINTER), name + "\n")
        self.prune()
        return final

    def is_complete(self, name):
        path = self._path(name)
        try:
            with open(os.path.join(path, STATE)) as handle:
                record = json.load(handle)
            return all(os.path.getsize(os.path.join(path, f)) == size
                       for f, size in record["files"].items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False

    def complete_names(self):
        if not os.path.isdir(self.directory):
            return []
        names = [n for n in os.listdir(self.directory) if _NAME.match(n)]
        return sorted((n for n in names if self.is_complete(n)), key=lambda n: int(_NAME.match(n).group(1)))

    def latest(self):
        """(path, state) of the newest complete checkpoint, or None."""
        name = None
        try:
            with open(self._path(POINTER)) as handle:
                name = handle.read().strip()
        except OSError:
            pass
        complete = self.complete_names()
        if not (name and _NAME.match(name) and name in complete):
            name = complete[-1] if complete else None
        if name is None:
            return None
        with open(os.path.join(self._path(name), STATE)) as handle:
            return self._path(name), json.load(handle)

    def prune(self):
        complete = self.complete_names()
        for name in complete[: max(0, len(complete) - self.keep)]:
            shutil.rmtree(self._path(name), ignore_errors=True)


def states_digest(states):
    """Fingerprint of an MXNet optimizer state dict {index: NDArray | tuple | None}."""
    import numpy as np

    arrays = []

    def collect(value):
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for item in value:
                collect(item)
        else:
            arrays.append(np.abs(value.asnumpy()).sum(dtype="float64"))

    for key in sorted(states):
        collect(states[key])
    return "%d arrays, sum|x|=%.6e" % (len(arrays), float(sum(arrays)))
