"""One call that builds the right training job for an instance type.

Hyperparameters are validated with the container's own schema (detector_training.job.config) before
anything is sent; metric definitions come from the container's single source
(detector_training.job.metrics); processes per host follow the instance type's GPU count.
"""

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from detector_training.data.formats import NOT_DATA
from detector_training.job.config import LAUNCH_KEYS, from_hyperparameters, parse_hyperparameters
from detector_training.job.config_file import CONFIG_CHANNEL, CONFIG_FILE_KEY
from detector_training.errors import ConfigError
from detector_training.job.guards import WORKING_FAMILIES, unsupported_gpu
from detector_training.job.metrics import METRIC_DEFINITIONS

# GPUs per instance for the families the image can run: detector_training.job.guards.SUPPORTED_GPU_FAMILIES
# says which and why (a test keeps this table inside that list).
_GPUS = {
    "ml.p3.2xlarge": 1, "ml.p3.8xlarge": 4, "ml.p3.16xlarge": 8, "ml.p3dn.24xlarge": 8,
    "ml.p4d.24xlarge": 8, "ml.p4de.24xlarge": 8,
    "ml.g4dn.xlarge": 1, "ml.g4dn.2xlarge": 1, "ml.g4dn.4xlarge": 1, "ml.g4dn.8xlarge": 1,
    "ml.g4dn.16xlarge": 1, "ml.g4dn.12xlarge": 4, "ml.g4dn.metal": 8,
    "ml.g5.xlarge": 1, "ml.g5.2xlarge": 1, "ml.g5.4xlarge": 1, "ml.g5.8xlarge": 1,
    "ml.g5.16xlarge": 1, "ml.g5.12xlarge": 4, "ml.g5.24xlarge": 4, "ml.g5.48xlarge": 8,
    "ml.g6.xlarge": 1, "ml.g6.2xlarge": 1, "ml.g6.4xlarge": 1, "ml.g6.8xlarge": 1,
    "ml.g6.16xlarge": 1, "ml.g6.12xlarge": 4, "ml.g6.24xlarge": 4, "ml.g6.48xlarge": 8,
    "ml.g6e.xlarge": 1, "ml.g6e.2xlarge": 1, "ml.g6e.4xlarge": 1, "ml.g6e.8xlarge": 1,
    "ml.g6e.16xlarge": 1, "ml.g6e.12xlarge": 4, "ml.g6e.24xlarge": 4, "ml.g6e.48xlarge": 8,
}
LOCAL_TYPES = ("local", "local_gpu")
LOG = logging.getLogger("sagemaker_launch")


class LaunchError(ValueError):
    """A job that cannot work as asked; says what and how to fix it."""


def refuse_unsupported_gpu(instance_type):
    unsupported = unsupported_gpu(instance_type)
    if unsupported:
        raise LaunchError("%s has %s GPUs (%s), which the image's mxnet-cu112 build cannot run "
                          "(no GPU code for them); use %s." % ((instance_type,) + unsupported + (WORKING_FAMILIES,)))


def processes_per_host(instance_type, local_gpus=1):
    """One rank per GPU; CPU instances and CPU local mode run one process."""
    if instance_type == "local":
        return 1
    if instance_type == "local_gpu":
        return local_gpus
    refuse_unsupported_gpu(instance_type)
    if instance_type in _GPUS:
        return _GPUS[instance_type]
    if instance_type.startswith(("ml.p", "ml.g")):
        raise LaunchError("unknown GPU instance type %s: pass processes_per_host explicitly." % instance_type)
    return 1


@dataclass
class JobSpec:
    image_uri: str
    role: str
    instance_type: str
    instance_count: int = 1
    hyperparameters: Dict[str, object] = field(default_factory=dict)
    volume_size: int = 100
    max_run: int = 5 * 24 * 3600
    output_path: Optional[str] = None
    checkpoint_s3_uri: Optional[str] = None
    use_spot_instances: bool = False
    max_wait: Optional[int] = None
    tags: List[Dict[str, str]] = field(default_factory=list)
    base_job_name: str = "detector"
    processes_per_host: Optional[int] = None
    shm_size: str = "2g"  # local mode: Docker's 64 MB default breaks data loading and NCCL
    tensorboard_s3_uri: Optional[str] = None  # where SageMaker syncs output/tensorboard while it runs
    environment: Dict[str, str] = field(default_factory=dict)


def hyperparameters_for(spec, config_channel=False):
    """The hyperparameters to send, validated by the container's schema, with processes_per_host
    (the container's MPI setting) made explicit. Raises LaunchError naming what is wrong.

    With a config file (``config_file``, or a ``config`` channel: ``config_channel``) the job
    reads the file, which is not at hand here: each hyperparameter is checked on its own, and the
    whole configuration by the job."""
    pph = spec.processes_per_host or processes_per_host(spec.instance_type)
    values = {k: _as_text(v) for k, v in spec.hyperparameters.items()}
    values["processes_per_host"] = str(pph)
    try:
        if config_channel or CONFIG_FILE_KEY in values:
            parse_hyperparameters(values, LAUNCH_KEYS + (CONFIG_FILE_KEY,))
        else:
            config = from_hyperparameters(values)
            config.per_rank_batch(spec.instance_count * pph)
    except ConfigError as exc:
        raise LaunchError(str(exc)) from exc
    return values


def _as_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _check(spec):
    if spec.instance_count < 1:
        raise LaunchError("instance_count must be >= 1.")
    refuse_unsupported_gpu(spec.instance_type)  # also when processes_per_host is given
    local = spec.instance_type in LOCAL_TYPES
    if spec.use_spot_instances:
        if local:
            raise LaunchError("spot instances do not exist in local mode; drop use_spot_instances.")
        if not spec.checkpoint_s3_uri:
            raise LaunchError("spot training needs checkpoint_s3_uri, or an interruption loses the work.")
        if not spec.max_wait or spec.max_wait < spec.max_run:
            raise LaunchError("max_wait (%s) must be set and >= max_run (%d) for spot training."
                              % (spec.max_wait, spec.max_run))
    if local and spec.checkpoint_s3_uri:
        raise LaunchError("local mode does not sync checkpoints to S3; drop checkpoint_s3_uri.")
    if spec.tensorboard_s3_uri is not None:
        if local:
            raise LaunchError("local mode does not sync TensorBoard files to S3 (they come back in "
                              "output.tar.gz, under tensorboard/); drop tensorboard_s3_uri.")
        if not spec.tensorboard_s3_uri.startswith("s3://") or len(spec.tensorboard_s3_uri) <= 5:
            raise LaunchError("tensorboard_s3_uri=%r: expected an s3://bucket/prefix/ URI."
                              % spec.tensorboard_s3_uri)


def build_estimator(spec, session=None, config_channel=False):
    """A SageMaker SDK v2 Estimator for the detector-training image (``config_channel``: the job
    gets a ``config`` channel, its config file)."""
    from sagemaker.estimator import Estimator

    _check(spec)
    hyperparameters = hyperparameters_for(spec, config_channel)
    if session is None and spec.instance_type in LOCAL_TYPES:
        from sagemaker.local import LocalSession

        session = LocalSession()
        session.config = {"local": {"local_code": True,
                                    "container_config": {"shm_size": spec.shm_size}}}
    kwargs = dict(
        image_uri=spec.image_uri, role=spec.role, instance_count=spec.instance_count,
        instance_type=spec.instance_type, volume_size=spec.volume_size, max_run=spec.max_run,
        output_path=spec.output_path, hyperparameters=hyperparameters,
        metric_definitions=[dict(d) for d in METRIC_DEFINITIONS], base_job_name=spec.base_job_name,
        tags=spec.tags or None, sagemaker_session=session, environment=spec.environment or None,
    )
    if spec.instance_type not in LOCAL_TYPES:
        kwargs.update(use_spot_instances=spec.use_spot_instances, max_wait=spec.max_wait,
                      checkpoint_s3_uri=spec.checkpoint_s3_uri)
    if spec.tensorboard_s3_uri:
        from sagemaker.debugger import TensorBoardOutputConfig

        kwargs["tensorboard_output_config"] = TensorBoardOutputConfig(s3_output_path=spec.tensorboard_s3_uri)
    return Estimator(**kwargs)


AUGMENTED_MANIFEST = "AugmentedManifestFile"


def manifest_inputs(manifests, attribute, with_metadata=True):
    """Channels for Ground Truth manifests, sent as a built-in-algorithm job sends them: Pipe
    mode, ``AugmentedManifestFile``, RecordIO records of ``AttributeNames`` ["source-ref",
    ``attribute``, ``attribute``-metadata] (the metadata's class maps name the classes; without
    it the job needs the ``classes`` hyperparameter). ``manifests``: channel ('train',
    'validation') -> the manifest's S3 URI. Returns channel -> TrainingInput for :func:`launch`."""
    from sagemaker.inputs import TrainingInput

    if not attribute or attribute == "source-ref":
        raise LaunchError("name the manifest's label attribute (Ground Truth names it after the "
                          "labelling job; it holds the boxes), e.g. attribute='my-labelling-job'.")
    names = ["source-ref", attribute] + ([attribute + "-metadata"] if with_metadata else [])
    channels = {}
    for channel, uri in manifests.items():
        if not str(uri).startswith("s3://"):
            raise LaunchError("manifest %s=%s: an augmented manifest channel needs an s3:// URI "
                              "(local mode sends every channel as files: give it a File-mode "
                              "'train' folder with the manifest and an 'images' channel)."
                              % (channel, uri))
        channels[channel] = TrainingInput(
            uri, distribution="FullyReplicated", content_type="application/x-recordio",
            s3_data_type=AUGMENTED_MANIFEST, attribute_names=names, input_mode="Pipe",
            record_wrapping="RecordIO")
    return channels


def _with_manifest_dataset(spec, inputs):
    """``spec`` with dataset=manifest when a channel is an augmented manifest and no dataset is
    named (so the hyperparameters are checked as the job will read them). A manifest sent
    without its metadata attribute names no classes: then 'classes' must."""
    manifests = {}
    for channel, value in inputs.items():
        source = getattr(value, "config", {}).get("DataSource", {}).get("S3DataSource", {})
        if source.get("S3DataType") == AUGMENTED_MANIFEST:
            manifests[channel] = source.get("AttributeNames") or []
    for channel, names in manifests.items():
        if not any(n.endswith("-metadata") for n in names) and not spec.hyperparameters.get("classes"):
            raise LaunchError("channel %s sends the manifest without its '<attribute>-metadata', "
                              "so nothing names the classes: set the hyperparameter classes "
                              "(names in class-id order), or send the metadata." % channel)
    if not manifests or "dataset" in spec.hyperparameters:
        return spec
    return dataclasses.replace(spec, hyperparameters=dict(spec.hyperparameters, dataset="manifest"))


def local_folders(inputs):
    """{channel: folder} of the inputs that are local folders (``file://`` URIs or paths)."""
    found = {}
    for channel, value in (inputs or {}).items():
        if isinstance(value, str) and not value.startswith("s3://"):
            path = value[len("file://"):] if value.startswith("file://") else value
            if os.path.isdir(path):
                found[channel] = path
    return found


def check_data(path, hyperparameters=None, channel=None):
    """The container's data check (``detector-check-data``) of a local folder: a channels folder
    or one channel's (``channel`` names it); returns its DataReport (``.ok``, ``.problems``,
    ``.markdown()``). Runs without MXNet."""
    from detector_training.job.check_data import check

    return check(path, hyperparameters, channel)


def check_inputs(spec, inputs):
    """The data check of the inputs that are local folders, checked together as the job's
    channels; None when there is none. A LaunchError listing the problems when the job would not
    start on them."""
    from detector_training.job.check_data import check_channels

    folders = {name: path for name, path in local_folders(inputs).items() if name not in NOT_DATA}
    if not folders:
        return None
    report = check_channels(folders, spec.hyperparameters)
    for line in report.log_lines():
        LOG.info("data check: %s", line)
    if not report.ok:
        raise LaunchError("the data check found what would stop the job: %s (launch(..., "
                          "data_check=False) skips the check)." % " ".join(p.text() for p in report.problems))
    return report


def launch(spec, inputs, wait=True, logs=True, session=None, data_check=True):
    """Build the estimator and start the job. ``inputs``: channel name -> S3 or file:// URI
    (``voc``, ``coco``, ``train``; optional ``pretrained`` and ``model``), or the TrainingInputs
    of :func:`manifest_inputs`. With ``data_check``, inputs that are local folders are checked
    first (:func:`check_inputs`): a problem is a LaunchError before anything starts. Returns the
    estimator."""
    if not inputs and not spec.hyperparameters.get("data_s3_uri"):
        raise LaunchError(
            "no input channels and no data_s3_uri: the job would have no data. Pass a data channel: "
            "{'voc': 's3://.../'} (the three VOC tars or an extracted VOCdevkit), {'coco': "
            "'s3://.../'} (COCO-format data, with dataset=coco) or {'train': 's3://.../'} (your own "
            "VOC-format data, with dataset=custom, or a Ground Truth manifest: manifest_inputs); "
            "file:// URIs in local mode. Or set the hyperparameter data_s3_uri to where the VOC "
            "tars are.")
    spec = _with_manifest_dataset(spec, inputs or {})
    if data_check:
        check_inputs(spec, inputs)
    estimator = build_estimator(spec, session, config_channel=CONFIG_CHANNEL in (inputs or {}))
    estimator.fit(inputs or None, wait=wait, logs="All" if (logs and wait) else "None")
    return estimator
