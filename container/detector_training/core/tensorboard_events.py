"""TensorBoard event files while the job runs (``/opt/ml/output/tensorboard``).

SageMaker syncs that folder to S3 when the job has a ``TensorBoardOutputConfig``; the container is
not told whether it has one, so the main rank always writes there, with tensorboardX (no
TensorFlow). The hook writes what the hooks before it published at the same point
(``engine.scalars``): the losses and metrics, lr, throughput and data-wait share every
``log_interval`` steps (``train/*``), each epoch's summary with its step-time split (``epoch/*``),
the validation scores and per-class AP (``validation/*``, ``per_class_*``); the effective
configuration as text; and at the end the evaluation report's pictures and tables
(``evaluation/*``, published by the final model's hook, which runs before this one). Every value is written at the engine's global step, which a resumed job
takes from its checkpoint: a resumed run writes a new event file in the same folder that
continues the curves, and TensorBoard's purge step hides whatever the earlier run wrote past the
checkpoint (steps that are trained again), so no step appears twice.

Events are written in the job's own thread (tensorboardX's event file writer and summaries, not
its SummaryWriter, which writes from a thread of its own: a full disk kills that thread, and the
job then waits on its queue, or at exit on the queue's feeder). A full disk is a DiskFullError
naming the folder.
"""

import io
import json
import os
import time

from detector_training.core.engine import Hook
from detector_training.core.files import disk_full_error, full_disk

CONFIG_TAG = "config"


class EventFile:
    """One event file in ``log_dir``, written in the caller's thread. ``purge_step``: TensorBoard
    hides the events of earlier files at and after this step (as SummaryWriter's purge_step)."""

    def __init__(self, log_dir, filename_suffix, purge_step=None):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self._event = Event
        os.makedirs(log_dir, exist_ok=True)
        self._writer = EventsWriter(os.path.join(log_dir, "events"), filename_suffix)
        if purge_step is not None:
            self._writer.write_event(Event(step=purge_step, file_version="brain.Event:2"))
            self._writer.write_event(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))

    def add(self, summary, step):
        self._writer.write_event(self._event(summary=summary, wall_time=time.time(), step=int(step)))

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()


class TensorBoardHook(Hook):
    """Event files on the main rank: ``engine.scalars`` after each step and epoch, at the global
    step; flushed each time something was written, so a running job's curves are visible."""

    main_only = True

    def __init__(self, log_dir, effective_config):
        self.log_dir = log_dir
        self.effective_config = effective_config
        self.writer = None

    def _writing(self, write):
        """``write()``; a full disk under the folder is a DiskFullError naming it."""
        try:
            write()
        except OSError as exc:
            code = full_disk(exc, self.log_dir)
            if code:
                raise disk_full_error("TensorBoard's event file in %s" % self.log_dir, code) from exc
            raise

    def before_train(self, engine):
        self._writing(lambda: self._open(engine))

    def _open(self, engine):
        from tensorboardX.summary import text

        start = engine.start_global_step
        # purge_step: events of an earlier run after the checkpoint this run starts from (steps it
        # trains again) are hidden, so a resumed job's curves continue instead of doubling back.
        # The start step in the file name keeps a resumed run's file apart from (and, read in name
        # order, after) the earlier run's, also when both start within the same second.
        self.writer = EventFile(self.log_dir, ".step%012d" % start, purge_step=start + 1 if start > 0 else None)
        self.writer.add(text(CONFIG_TAG, "```\n%s\n```" % json.dumps(
            self.effective_config, indent=1, sort_keys=True, default=str)), start)
        self.writer.flush()

    def _write(self, engine):
        if engine.scalars or engine.pictures or engine.texts:
            self._writing(lambda: self._add(engine))

    def _add(self, engine):
        from tensorboardX.summary import image, scalar, text

        for tag, value in sorted(engine.scalars.items()):
            self.writer.add(scalar(tag, float(value)), engine.global_step)
        for tag, png in sorted(engine.pictures.items()):
            self.writer.add(image(tag, _pixels(png), dataformats="HWC"), engine.global_step)
        for tag, markdown in sorted(engine.texts.items()):
            self.writer.add(text(tag, markdown), engine.global_step)
        self.writer.flush()

    def after_step(self, engine):
        self._write(engine)

    def after_epoch(self, engine):
        self._write(engine)

    def after_train(self, engine):
        if self.writer is not None:
            self._write(engine)
            self._writing(self.writer.close)


def _pixels(png):
    """A PNG's RGB pixels (HWC uint8), as add_image takes them."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as img:
        return np.asarray(img.convert("RGB"))
