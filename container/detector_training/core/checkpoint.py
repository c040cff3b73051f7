"""Checkpoints that lose nothing.

Layout under the checkpoint directory::

    ckpt-00000240/      model.params, optimizer.params + optimizer.json (the optimizer state as
                        arrays and a JSON layout, never pickle: a checkpoint comes back from S3
                        and is data, not code), state.json (next epoch and iteration, global
                        step, best mAP, history, config, and the size of every file, so a truncated
                        copy is never taken as complete); numbered by global step, so a mid-epoch
                        checkpoint (stop, spot interruption) and an end-of-epoch one never collide
    latest              the name of the newest complete checkpoint, written last

Each checkpoint is written into a temporary directory, its files flushed to disk, and renamed
into place (a stop or a crash mid-write leaves the temporary directory, never a torn checkpoint); ``latest`` is
replaced atomically afterwards. Resume reads ``latest`` and falls back to the newest complete
directory when the pointer is missing or names something incomplete. The temporaries a writer
killed mid-save left are removed by the next save; anything else in the directory (SageMaker's
``*.sagemaker-uploading`` files) is ignored.
"""

import json
import logging
import math
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Optional

from detector_training.core.files import (REPLACED, TEMPORARY, atomic_write_text, disk_full_error, fsync_dir,
                                         full_disk, read_json, sweep_temporaries, sync_file)
from detector_training.core.networks import load_parameters
from detector_training.errors import CheckpointError, one_line

LOG = logging.getLogger("detector_training")
POINTER = "latest"
MODEL_PARAMS = "model.params"
STATE = "state.json"
STATE_CAP = 16 << 20  # the position and the history of every epoch
LAYOUT_CAP = 64 << 20  # optimizer.json: one entry per parameter
_REMOVE_IT = "remove that checkpoint; the job resumes from the one before it."
_NAME = re.compile(r"^ckpt-(\d{8,})$")


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
        payload files; ``state`` (JSON-able) is completed with the file sizes and written last.
        Every file is on disk before the rename makes the checkpoint complete. A full disk is a
        DiskFullError, any other failure to write a CheckpointError; the checkpoints before it
        stay as they were."""
        name = self.name(number)
        tmp = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix="%s%s-" % (TEMPORARY, name), dir=self.directory)
            write_files(tmp)
            files = {f: os.path.getsize(os.path.join(tmp, f)) for f in sorted(os.listdir(tmp))}
            for f in files:
                sync_file(os.path.join(tmp, f))
            record = dict(state, name=name, files=files)
            with open(os.path.join(tmp, STATE), "w") as handle:
                json.dump(record, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            final = self._path(name)
            if os.path.exists(final):  # the same step saved again (a resumed job re-saving it)
                old = tempfile.mkdtemp(prefix="%s%s-" % (REPLACED, name), dir=self.directory)
                os.rename(final, os.path.join(old, name))
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            fsync_dir(self.directory)
        except BaseException as exc:
            code = full_disk(exc, self.directory)
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            if code:
                previous = self.complete_names()
                raise disk_full_error("checkpoint %s in %s" % (name, self.directory), code,
                                      "the previous checkpoint %s" % previous[-1] if previous else None) from exc
            if isinstance(exc, OSError):
                raise CheckpointError("could not write checkpoint %s in %s: %s" % (name, self.directory, exc),
                                      "check the permissions of the checkpoint directory.") from exc
            raise
        atomic_write_text(self._path(POINTER), name + "\n")
        self.prune()
        return final

    def is_complete(self, name):
        path = self._path(name)
        try:
            record = read_state(path)
            return all(os.path.getsize(os.path.join(path, f)) == size
                       for f, size in record["files"].items())
        except (CheckpointError, OSError, ValueError, KeyError, TypeError, AttributeError):
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
        return self._path(name), read_state(self._path(name))

    def prune(self):
        """Keep the newest ``keep`` complete checkpoints, and remove what a writer killed mid-save
        (SIGKILL, a lost host) left behind: its temporaries (``.tmp-*``, ``.old-*``), which
        SageMaker would otherwise sync to S3 with every checkpoint. Called by the one writer after
        its save, when no other save is under way."""
        complete = self.complete_names()
        for name in complete[: max(0, len(complete) - self.keep)]:
            shutil.rmtree(self._path(name), ignore_errors=True)
        sweep_temporaries(self.directory)


def read_state(path):
    """A checkpoint's ``state.json`` (checkpoints come back from S3: bytes from outside) under the
    JSON policy: size and nesting capped, only JSON's own numbers; a CheckpointError otherwise."""
    return read_json(os.path.join(path, STATE), STATE_CAP, error=CheckpointError, fix=_REMOVE_IT)


OPTIMIZER_ARRAYS = "optimizer.params"
OPTIMIZER_LAYOUT = "optimizer.json"
_OPTIMIZER_FORMAT = 1


def _updaters(trainer):
    """The Gluon trainer's updaters (MXNet 1.9.1; the kvstore's when it updates there), made now
    if the trainer has not made them yet. Trainer.save_states/load_states would pickle them."""
    if not trainer._kv_initialized:  # pylint: disable=protected-access
        trainer._init_kvstore()  # pylint: disable=protected-access
    if trainer._params_to_init:  # pylint: disable=protected-access
        trainer._init_params()  # pylint: disable=protected-access
    if trainer._update_on_kvstore:  # pylint: disable=protected-access
        return [trainer._kvstore._updater]  # pylint: disable=protected-access
    return trainer._updaters  # pylint: disable=protected-access


def save_optimizer_state(trainer, directory):
    """Write the optimizer state into ``directory``: its arrays with ``mx.nd.save`` (MXNet's array
    format) and their layout, the update counts included, as JSON."""
    import mxnet as mx

    updater = _updaters(trainer)[0]
    arrays = {}

    def flatten(key, value):
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            return [flatten("%s.%d" % (key, i), item) for i, item in enumerate(value)]
        arrays[key] = value
        return key

    layout = {str(index): flatten(str(index), value) for index, value in updater.states.items()}
    optimizer = updater.optimizer
    mx.nd.save(os.path.join(directory, OPTIMIZER_ARRAYS), arrays)
    with open(os.path.join(directory, OPTIMIZER_LAYOUT), "w") as handle:
        json.dump({"format": _OPTIMIZER_FORMAT, "states": layout, "num_update": optimizer.num_update,
                   "index_update_count": {str(k): v for k, v in optimizer._index_update_count.items()}},
                  handle, sort_keys=True)  # pylint: disable=protected-access


def read_optimizer_state(directory):
    """(layout, {name: numpy array}) from a checkpoint, checked; CheckpointError when it cannot be
    used. Only MXNet's array loader and JSON read the files."""
    import mxnet as mx

    layout_path = os.path.join(directory, OPTIMIZER_LAYOUT)
    if not os.path.exists(layout_path):
        raise CheckpointError(
            "checkpoint %s has no %s: it was written by an earlier version, whose pickled optimizer "
            "state is not loaded (a checkpoint is data, never code)." % (directory, OPTIMIZER_LAYOUT),
            "start from an empty checkpoint directory (or remove that checkpoint).")
    try:
        layout = read_json(layout_path, LAYOUT_CAP, error=CheckpointError, fix=_REMOVE_IT)
        loaded = mx.nd.load(os.path.join(directory, OPTIMIZER_ARRAYS))
        arrays = {name: value.asnumpy() for name, value in (loaded.items() if isinstance(loaded, dict) else [])}
        names = set()

        def check(entry):
            if isinstance(entry, list):
                for item in entry:
                    check(item)
            elif entry is not None:
                names.add(entry)

        if layout.get("format") != _OPTIMIZER_FORMAT:
            raise ValueError("unknown format %r" % layout.get("format"))
        for entry in layout["states"].values():
            check(entry)
        missing = sorted(names - set(arrays))
        if missing:
            raise ValueError("arrays %s are missing" % ", ".join(missing[:5]))
        int(layout["num_update"])
        {int(k): int(v) for k, v in layout["index_update_count"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, mx.base.MXNetError) as exc:
        raise CheckpointError("the optimizer state in checkpoint %s cannot be read: %s" % (directory, one_line(exc)),
                              _REMOVE_IT) from exc
    return layout, arrays


def apply_optimizer_state(trainer, layout, arrays):
    """Give the trainer the state :func:`read_optimizer_state` returned (on every rank)."""
    import mxnet as mx

    def build(entry):
        if entry is None:
            return None
        if isinstance(entry, list):
            return tuple(build(item) for item in entry)
        return mx.nd.array(arrays[entry], dtype=arrays[entry].dtype)

    for updater in _updaters(trainer):
        updater.states = {int(index): build(entry) for index, entry in layout["states"].items()}
        updater.states_synced = dict.fromkeys(updater.states, False)  # moved to each weight's context
        updater.optimizer.num_update = int(layout["num_update"])
        updater.optimizer._index_update_count = {  # pylint: disable=protected-access
            int(k): int(v) for k, v in layout["index_update_count"].items()}


def optimizer_state_digest(trainer):
    """'N arrays, sum|x|=S' over the optimizer's state (momentum buffers): a cheap fingerprint that
    shows in the log that a resumed job really continues with the saved optimizer state."""
    return states_digest(_updaters(trainer)[0].states)


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


# --- the training state: what a checkpoint holds and how a job resumes from it -----------------

@dataclass
class Position:
    """Where the loop stands: the next epoch and iteration to run, the steps done so far, the
    best validation mAP and the per-epoch history. Saved in state.json, restored from it."""

    epoch: int = 0
    iteration: int = 0
    global_step: int = 0
    best_map: Optional[float] = None
    history: list = field(default_factory=list)

    @classmethod
    def from_state(cls, state):
        return cls(epoch=int(state["epoch"]), iteration=int(state.get("iteration", 0)),
                   global_step=int(state["global_step"]), best_map=state.get("best_map"),
                   history=list(state.get("history") or []))


def save_checkpoint(manager, net, trainer, position, config_dict):
    """A complete, resumable checkpoint numbered by the global step: the network's parameters,
    the optimizer state (no pickle), the position and the effective configuration."""
    state = dict(asdict(position), config=config_dict)
    if state["best_map"] is not None and not math.isfinite(state["best_map"]):
        state["best_map"] = None

    def write(tmp):
        net.save_parameters(os.path.join(tmp, MODEL_PARAMS))
        save_optimizer_state(trainer, tmp)

    path = manager.save(position.global_step, state, write)
    LOG.info("checkpoint: saved %s (next epoch %d, iteration %d)", path, position.epoch,
             position.iteration)
    return path


@dataclass
class Resume:
    """What the main rank read from the newest complete checkpoint, to be broadcast to the
    others: the position, the optimizer state (layout, arrays) and where it came from."""

    position: Position
    optimizer: tuple
    path: str


def load_latest(manager, net, ctx):
    """Load the newest complete checkpoint's parameters into ``net`` (main rank); its Resume, or
    None when there is none."""
    latest = manager.latest()
    if not latest:
        return None
    path, state = latest
    reason = load_parameters(net, os.path.join(path, MODEL_PARAMS), ctx)
    if reason:
        config = state.get("config") if isinstance(state.get("config"), dict) else {}
        raise CheckpointError(
            "checkpoint %s holds parameters of %s that do not load into this job's network: %s" % (
                path, config.get("network") or "another network", reason),
            "give each network a checkpoint location of its own (checkpoint_s3_uri), or remove "
            "the checkpoints there to start afresh.")
    return Resume(Position.from_state(state), read_optimizer_state(path), path)


def resume_trainer(resume, trainer):
    """Give the trainer the saved optimizer state (every rank) and say so in the log."""
    apply_optimizer_state(trainer, *resume.optimizer)
    position = resume.position
    LOG.info("resume: from %s at epoch %d iteration %d (global step %d); optimizer state "
             "restored: %s", resume.path, position.epoch, position.iteration, position.global_step,
             optimizer_state_digest(trainer))
