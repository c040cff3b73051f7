"""The SageMaker job as a read-only snapshot of ``/opt/ml`` (or ``$SAGEMAKER_BASE_DIR``) and of
the process environment, read once: the rest of the package takes its paths, channels, rank hint,
stop file, launch id and fetch settings from this object, never from ``os.environ``.

Reading is all this module does: it creates nothing and runs nothing at import time.
"""

import os
from dataclasses import dataclass, field

from detector_training import settings
from detector_training.core.files import read_json
from detector_training.errors import ConfigError

ENV_STOP_FILE = settings.name(settings.STOP_FILE)
ENV_WORK_DIR = settings.name(settings.WORK_DIR)


@dataclass(frozen=True)
class JobPaths:
    base: str

    def _p(self, *parts):
        return os.path.join(self.base, *parts)

    @property
    def config_dir(self):
        return self._p("input", "config")

    @property
    def channels_dir(self):
        return self._p("input", "data")

    def channel(self, name):
        return self._p("input", "data", name)

    @property
    def model_dir(self):
        return self._p("model")

    @property
    def output_dir(self):
        return self._p("output")

    @property
    def tensorboard_dir(self):
        """Synced to S3 while the job runs when it has a TensorBoardOutputConfig."""
        return self._p("output", "tensorboard")

    @property
    def failure_file(self):
        return self._p("output", "failure")

    @property
    def checkpoint_dir(self):
        return self._p("checkpoints")

    @property
    def work_dir(self):
        """Writable scratch for extracted data (channel directories are read-only)."""
        return self._p("work")


def base_dir(environ=None):
    environ = os.environ if environ is None else environ
    return environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")


CONFIG_FILE_CAP = 4 << 20  # SageMaker's hyperparameters (at most 100 of 2.5 KB) are far smaller


def _read_object(path, fix="write the file as a JSON object."):
    """A JSON object from one of the job's configuration files ({} when the file is absent)."""
    if not os.path.lexists(path):
        return {}
    value = read_json(path, CONFIG_FILE_CAP, error=ConfigError, fix=fix)
    if not isinstance(value, dict):
        raise ConfigError("%s must hold a JSON object." % os.path.basename(path), fix)
    return value


@dataclass(frozen=True)
class Environment:
    paths: JobPaths
    hyperparameters: dict = field(default_factory=dict)
    input_data_config: dict = field(default_factory=dict)
    resource_config: dict = field(default_factory=dict)
    checkpoint_config: dict = field(default_factory=dict)
    environ: dict = field(default_factory=dict)  # the process environment when the job was read

    @classmethod
    def read(cls, base=None, environ=None):
        """The job under ``base`` (default: $SAGEMAKER_BASE_DIR, else /opt/ml)."""
        environ = dict(os.environ if environ is None else environ)
        paths = JobPaths(base or base_dir(environ))
        config = {name: _read_object(os.path.join(paths.config_dir, name + ".json"))
                  for name in ("inputdataconfig", "resourceconfig", "checkpointconfig")}
        return cls(
            paths=paths,
            hyperparameters=_read_object(os.path.join(paths.config_dir, "hyperparameters.json"),
                                         "pass hyperparameters as a mapping of names to values."),
            input_data_config=config["inputdataconfig"],
            resource_config=config["resourceconfig"],
            checkpoint_config=config["checkpointconfig"],
            environ=environ,
        )

    @property
    def baked_pretrained_dir(self):
        """Weights baked into the image ($DETECTOR_PRETRAINED_DIR)."""
        return settings.setting(settings.PRETRAINED_DIR, self.environ, "")

    @property
    def work_dir(self):
        """Scratch for fetched data: $DETECTOR_WORK_DIR (set by the launcher), else /opt/ml/work."""
        return settings.setting(settings.WORK_DIR, self.environ) or self.paths.work_dir

    @property
    def stop_file(self):
        """The host's stop file: $DETECTOR_STOP_FILE (set by the launcher), else in the work dir."""
        from detector_training.job.stop import STOP_FILE_NAME

        return settings.setting(settings.STOP_FILE, self.environ) or os.path.join(self.work_dir, STOP_FILE_NAME)

    @property
    def rank_hint(self):
        """This process's rank as the MPI launcher announced it (for log lines before Horovod
        starts); 0 outside mpirun."""
        for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            if self.environ.get(var, "").isdigit():
                return int(self.environ[var])
        return 0

    @property
    def pretrained_dirs(self):
        """Where backbone weights are looked for first: the 'pretrained' channel, then the image."""
        return [d for d in (self.channel_dir("pretrained"), self.baked_pretrained_dir) if d]

    def channel_dir(self, name):
        path = self.paths.channel(name)
        return path if os.path.isdir(path) else None

    def data_channel(self, names):
        """(name, folder) of the first existing of the channels ``names``, else (None, None)."""
        for name in names:
            if self.channel_dir(name):
                return name, self.channel_dir(name)
        return None, None

    @property
    def checkpoint_dir(self):
        """checkpointconfig.json's LocalPath when checkpointing is configured, else /opt/ml/checkpoints."""
        return self.checkpoint_config.get("LocalPath") or self.paths.checkpoint_dir

    @property
    def current_host(self):
        return self.resource_config.get("current_host", "algo-1")

    @property
    def hosts(self):
        return sorted(self.resource_config.get("hosts", [self.current_host]))
