"""The container's own process settings: ``DETECTOR_*`` environment variables.

Their earlier names, ``FRCNN_*`` (from when the image trained Faster R-CNN only), are still read
for one release: a value found only under the old name is used, with one warning per name that
says which name replaces it. Nothing here runs at import time.
"""

import logging
import os

PREFIX = "DETECTOR_"
OLD_PREFIX = "FRCNN_"  # read until the next release, with a warning

WORK_DIR = "WORK_DIR"
STOP_FILE = "STOP_FILE"
LAUNCH_ID = "LAUNCH_ID"
PRETRAINED_DIR = "PRETRAINED_DIR"
WORKER_WAIT_S = "WORKER_WAIT_S"  # a worker host's bound on each wait for the leader's start
MODE = "MODE"  # set by the `evaluate` command: the job's mode whatever its hyperparameters say

LOG = logging.getLogger("detector_training")
_warned = set()


def name(key):
    """The environment variable of a setting: ``DETECTOR_<key>``."""
    return PREFIX + key


def setting(key, environ=None, default=None):
    """``$DETECTOR_<key>``, else the deprecated ``$FRCNN_<key>`` (warned once), else ``default``."""
    environ = os.environ if environ is None else environ
    if environ.get(PREFIX + key):
        return environ[PREFIX + key]
    old = OLD_PREFIX + key
    if environ.get(old):
        if old not in _warned:
            _warned.add(old)
            LOG.warning("%s is deprecated and will stop working in the next release: set %s instead.",
                        old, PREFIX + key)
        return environ[old]
    return default
