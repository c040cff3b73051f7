"""The training configuration: one frozen, typed object built once.

Precedence: field defaults < the data format's preset < the family's preset for the format's data
style < the built-in algorithm's documented defaults (only for a job in its names) < user
hyperparameters; ``sources`` says which set each value. Field names are the hyperparameter names
(GluonCV's flags with underscores), so tuning jobs target them directly.
Values arrive as SageMaker sends them (strings, sometimes JSON-quoted) or as Python values;
both go through the same parsers. Nothing here imports mxnet or reads the environment.
"""

import dataclasses
import difflib
import json
import logging
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Tuple

from detector_training import families
from detector_training.data import formats
from detector_training.errors import ConfigError
from detector_training.families.base import FAMILY_OPTIONS
from detector_training.job import builtin_algorithm
from detector_training.values import (check, choice, decode, optional, parse_bool,
                                      parse_checksums, parse_float, parse_int, parse_int_list,
                                      parse_regex, parse_str, parse_str_list)

LOG = logging.getLogger("detector_training")

KV_STORES = ("device", "local", "nccl", "dist_sync", "dist_device_sync", "dist_async")
# MXNet's optimizers by their registered names (the built-in algorithm's four).
OPTIMIZERS = ("sgd", "adam", "rmsprop", "adadelta")

# Hyperparameters the launcher owns (how many processes, MPI options), not training settings.
LAUNCH_KEYS = ("processes_per_host", "custom_mpi_options")

# Keys SageMaker and the SDK add on their own; they are not ours to validate.
RESERVED_PREFIXES = ("sagemaker_",)
RESERVED_KEYS = ("_tuning_objective_metric",)

def preset_layers(network, dataset):
    """The defaults a job starts from, lowest first, each as (where it comes from, {field:
    value}): its data format's preset, then its network's family's preset for the data style the
    format declares."""
    fmt, family = formats.get(dataset), families.get(network)
    return [("dataset=%s's preset" % dataset, dict(fmt.preset, no_wd=False)),
            ("the %s family's preset for %s-style data" % (family.name, fmt.style),
             dict(family.presets.get(fmt.style, {})))]


def preset_for(network, dataset):
    """The defaults a job starts from (``preset_layers`` merged)."""
    preset = {}
    for _source, values in preset_layers(network, dataset):
        preset.update(values)
    return preset


def parse_dataset(value):
    """A registered data format's name (read at parse time: a format registered later counts)."""
    return choice(formats.names())(value)


def parse_network(value):
    """A network of a registered family (read at parse time: a family registered later counts)."""
    return choice(families.network_names())(value)


def hp(default, parser, help_text):
    """A hyperparameter field: default, parser and help live together."""
    return field(default=default, metadata={"parse": parser, "help": help_text})


_pos_int = check(parse_int, lambda v: v >= 1, "an integer >= 1")
_nonneg_int = check(parse_int, lambda v: v >= 0, "an integer >= 0")
_at_least_4 = check(parse_int, lambda v: v >= 4, "an integer >= 4")  # a quarter of it positive


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of a training job. ``None`` means: take the dataset preset or derive it."""

    mode: str = hp("train", choice(("train", "evaluate")),
                   "train, or evaluate: score the model in the 'model' channel on the data in the "
                   "'test' channel (else 'validation'), without training (docs/evaluation.md).")
    network: str = hp("faster_rcnn_resnet50_v1b_voc", parse_network,
                      "Base network name (GluonCV model zoo name, or a registered family's).")
    dataset: str = hp("voc", parse_dataset,
                      "The data format: voc (Pascal VOC, 20 classes), coco (COCO-format JSON, its "
                      "own categories), custom (Pascal VOC XML, own classes: a VOCdevkit tree or a "
                      "labelling tool's export), manifest (a Ground Truth object-detection "
                      "manifest), yolo (YOLO text labels), or a registered format's name. Not set: "
                      "recognised from the data channels' contents (voc when the job has none).")
    classes: Tuple[str, ...] = hp((), parse_str_list,
                                  "custom, coco and manifest: the classes to train; empty means "
                                  "all of those in the training annotations (coco: the training "
                                  "JSON's categories; manifest: the class maps'). A manifest "
                                  "without class maps (Pipe mode without the metadata attribute): "
                                  "the names of class ids 0, 1, ...")
    label_attribute: str = hp("", parse_str,
                              "manifest: the label attribute holding the boxes (Ground Truth names "
                              "it after the labelling job); empty: the one whose metadata says "
                              "object detection, an adjustment job's (its metadata has an "
                              "adjustment-status) preferred.")
    skip_empty: bool = hp(True, parse_bool,
                          "Leave out images without boxes (GluonCV's default; COCO validation "
                          "keeps them all); false trains and validates them as negatives, in "
                          "every format. The count is logged.")
    train_splits: Optional[Tuple[str, ...]] = hp(None, optional(parse_str_list),
                                                 "Training splits, e.g. 2007_trainval,2012_trainval.")
    val_splits: Optional[Tuple[str, ...]] = hp(None, optional(parse_str_list),
                                               "Validation splits, e.g. 2007_test.")
    train_annotation_file: str = hp("", parse_str,
                                    "coco: the training split's COCO-format JSON at any path "
                                    "inside the job's channels (relative to /opt/ml/input/data, "
                                    "e.g. coco/labels/train.json) instead of "
                                    "annotations/<train_splits>.json; with val_annotation_file.")
    train_image_dir: str = hp("", parse_str,
                              "coco: the folder (inside the channels) its images' file_name is "
                              "relative to. Default: the annotation file's folder.")
    val_annotation_file: str = hp("", parse_str,
                                  "coco: the validation split's COCO-format JSON inside the "
                                  "channels, as train_annotation_file.")
    val_image_dir: str = hp("", parse_str,
                            "coco: the folder of the validation images, as train_image_dir.")
    val_fraction: float = hp(0.0, check(parse_float, lambda v: 0 <= v <= 0.5, "a number in [0, 0.5]"),
                             "Every format: carve this share of the training images (seeded by "
                             "seed) as the validation split instead of val_splits or the "
                             "validation channel (coco: by image id from the one training file, "
                             "which COCO's metric then scores); 0: use those (a format given no "
                             "validation data carves 0.1).")
    final_fit: bool = hp(False, parse_bool,
                         "Train on the training and validation images together (a final fit "
                         "after tuning); validation still runs, on seen images.")
    short: Optional[Tuple[int, ...]] = hp(None, optional(check(parse_int_list, lambda v: len(v) > 0 and min(v) >= 32, "image sizes >= 32")),
                                          "Shorter image side; several values train multi-scale. "
                                          "Default: the network's (600 for VOC).")
    max_size: Optional[int] = hp(None, optional(check(parse_int, lambda v: v >= 32, "an integer >= 32")),
                                 "Longer side cap. Default: the network's (1000 for VOC).")
    batch_size: Optional[int] = hp(None, optional(_pos_int),
                                   "GLOBAL mini-batch size, split evenly over all ranks. "
                                   "Default: batch_size_per_device images per rank.")
    batch_size_per_device: Optional[int] = hp(None, optional(_pos_int),
                                              "Images per rank (one rank per GPU) when batch_size "
                                              "is not set: the global batch is this times the "
                                              "ranks. Default: 1.")
    epochs: Optional[int] = hp(None, optional(_pos_int), "Training epochs.")
    lr: Optional[float] = hp(None, optional(check(parse_float, lambda v: 0 < v <= 10, "a number in (0, 10]")),
                             "Learning rate at the global batch lr_base_batch_size; scaled "
                             "linearly to the actual global batch.")
    lr_base_batch_size: Optional[int] = hp(None, optional(_pos_int),
                                           "Global batch that lr is given for (VOC 4, COCO 8).")
    lr_decay: float = hp(0.1, check(parse_float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                         "Learning-rate decay factor.")
    lr_decay_epoch: Optional[Tuple[int, ...]] = hp(None, optional(check(parse_int_list, lambda v: all(e >= 1 for e in v), "epochs >= 1")),
                                                   "Epochs at which the learning rate decays, e.g. 14,20.")
    lr_mode: str = hp("step", choice(("step", "poly", "cosine")),
                      "After warm-up: step (decay at lr_decay_epoch), poly or cosine (over the "
                      "remaining iterations).")
    lr_poly_power: float = hp(2.0, check(parse_float, lambda v: v > 0, "a number > 0"),
                              "Power of the poly schedule (GluonCV's YOLOv3 uses 2).")
    lr_warmup: Optional[int] = hp(None, optional(check(parse_int, lambda v: v >= -1, "an integer >= -1")),
                                  "Warm-up iterations (-1 or 0: none).")
    lr_warmup_factor: float = hp(1.0 / 3.0, check(parse_float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                                 "Warm-up starts at lr * lr_warmup_factor.")
    wd: Optional[float] = hp(None, optional(check(parse_float, lambda v: 0 <= v < 1, "a number in [0, 1)")),
                             "Weight decay.")
    momentum: float = hp(0.9, check(parse_float, lambda v: 0 <= v < 1, "a number in [0, 1)"), "SGD momentum.")
    no_wd: Optional[bool] = hp(None, optional(parse_bool),
                               "No weight decay on bias, beta and gamma. Default: false; Mask "
                               "R-CNN true (its script never decays biases).")
    clip_gradient: float = hp(-1.0, parse_float, "Clip gradients at this value; <= 0 turns clipping off.")
    mixup: bool = hp(False, parse_bool, "Mixup training augmentation.")
    no_mixup_epochs: int = hp(20, _nonneg_int, "Turn mixup off for the last N epochs.")
    label_smooth: bool = hp(False, parse_bool, "YOLOv3: label smoothing of the class targets.")
    multi_scale: bool = hp(False, parse_bool,
                           "YOLOv3: train at random square sizes (multiples of 32 from 0.75x to "
                           "1.5x short, e.g. 320..608 for 416), a new size every "
                           "multi_scale_interval batches.")
    multi_scale_interval: int = hp(10, _pos_int, "YOLOv3 multi-scale: batches per input size.")
    export_onnx: bool = hp(False, parse_bool,
                           "Also write model.onnx and onnx.json into the model directory, once ONNX "
                           "Runtime answers what MXNet answers on validation images (docs/onnx.md).")
    amp: bool = hp(False, parse_bool, "Automatic mixed precision (GPU only).")
    static_alloc: bool = hp(False, parse_bool, "static_alloc when hybridizing (faster, more memory).")
    disable_hybridization: bool = hp(False, parse_bool, "Run the network imperatively.")
    executor_threads: int = hp(4, _pos_int,
                               "MXNet engine worker threads per device for this rank's process.")
    kv_store: str = hp("device", choice(KV_STORES),
                       "KVStore for a single process; ranks under Horovod use allreduce instead.")
    rcnn_num_samples: Optional[int] = hp(None, optional(_at_least_4),
                                         "RoIs sampled per image to train the R-CNN heads. Default: "
                                         "the network's (C4 128 or 256, FPN 512, "
                                         "faster_rcnn_resnet18_v1b_voc 16); fewer train faster.")
    rpn_smoothl1_rho: float = hp(1.0 / 9.0, check(parse_float, lambda v: v > 0, "a number > 0"),
                                 "RPN box regression smooth-L1 rho.")
    rcnn_smoothl1_rho: float = hp(1.0, check(parse_float, lambda v: v > 0, "a number > 0"),
                                  "R-CNN box regression smooth-L1 rho.")
    num_workers: int = hp(4, _nonneg_int, "Data-loading worker processes per rank.")
    log_interval: int = hp(100, _pos_int, "Log training metrics every N iterations.")
    val_interval: int = hp(1, _pos_int, "Validate every N epochs (and after the last).")
    save_interval: int = hp(1, _pos_int, "Checkpoint every N epochs (and after the last).")
    keep_checkpoints: int = hp(3, _pos_int, "Keep the last N complete checkpoints.")
    data_s3_uri: str = hp("", check(parse_str, lambda v: v == "" or (v.startswith("s3://") and len(v) > 5),
                                    "an s3://bucket/prefix/ URI"),
                          "S3 location of the three VOC tars, tried after the 'voc' channel.")
    data_mirrors: Tuple[str, ...] = hp(("official",), parse_str_list,
                                       "HTTP(S) base URLs tried after S3 (comma-separated); "
                                       "'official' means the Oxford VOC locations. Plain http is "
                                       "used only for tars with a known checksum.")
    data_checksums: str = hp("", parse_checksums,
                             "SHA-1 per tar as a JSON object for a custom dataset, or 'none' to opt "
                             "out (then no plain-http mirror is used); empty means the known VOC "
                             "checksums. A tar is extracted only after its checksum matched.")
    pretrained_base: bool = hp(True, parse_bool,
                               "Start the backbone from ImageNet weights (the 'pretrained' channel, "
                               "else GluonCV's download); false trains it from scratch.")
    # --- the optimizer, early stopping, and settings the built-in algorithm names alike --------
    optimizer: str = hp("sgd", choice(OPTIMIZERS),
                        "MXNet optimizer: sgd (with momentum), adam, rmsprop or adadelta (which "
                        "sets its own step size: lr has no effect on it).")
    early_stopping: bool = hp(False, parse_bool,
                              "End the job when the validation objective (mAP) stopped improving: "
                              "a success, with the best model as the model.")
    early_stopping_min_epochs: int = hp(10, _pos_int,
                                        "Early stopping: never before this many epochs ran.")
    early_stopping_patience: int = hp(5, _pos_int,
                                      "Early stopping: epochs without improvement before it stops.")
    early_stopping_tolerance: float = hp(0.0, check(parse_float, lambda v: 0 <= v < 1, "a number in [0, 1)"),
                                         "Early stopping: an improvement is a relative gain over "
                                         "the best objective above this ((new - best) / best).")
    num_classes: Optional[int] = hp(None, optional(_pos_int),
                                    "The number of classes the data must have (checked when it is "
                                    "read); empty: whatever it has.")
    nms_threshold: Optional[float] = hp(None, optional(check(parse_float, lambda v: 0 < v <= 1, "a number in (0, 1]")),
                                        "IoU above which non-maximum suppression drops the weaker "
                                        "detection (validation and the exported model). Default: "
                                        "the network's.")
    overlap_threshold: float = hp(0.5, check(parse_float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                                  "voc/custom/manifest: the IoU at which a detection matches an "
                                  "object in the validation mAP (VOC07: 0.5).")
    freeze_layer_pattern: str = hp("", parse_regex,
                                   "A regular expression: parameters whose name it finds are not "
                                   "trained (e.g. ^resnetv1b_conv0_|^resnetv1b_layers1_).")
    seed: int = hp(233, _nonneg_int, "Random seed (each rank derives its own).")
    verbose: bool = hp(False, parse_bool, "Log the network and per-iteration details.")

    # Where each value came from ({field: text}: the job's hyperparameters, the built-in
    # algorithm's defaults, which preset), as from_hyperparameters found them; logged with the
    # effective configuration. Not a hyperparameter: {} for a configuration built otherwise.
    sources: ClassVar[dict] = {}

    def __post_init__(self):
        # Presets are merged once, here: a field the user left unset takes the preset's value,
        # so every reader sees numbers (config.epochs), never a "look it up later" None.
        for name, value in preset_for(self.network, self.dataset).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    # -- derived values: functions of the config and the world size, never stored --

    @property
    def family(self):
        return families.get(self.network).name

    def per_rank_batch(self, world_size):
        """Images per rank per step. Raises ConfigError naming the nearest valid sizes."""
        global_batch = self.global_batch(world_size)
        if global_batch % world_size or global_batch < world_size:
            lower = (global_batch // world_size) * world_size
            nearest = [n for n in (lower, lower + world_size) if n >= world_size]
            raise ConfigError(
                "batch_size=%d is the GLOBAL batch and must be a positive multiple of the %d "
                "ranks (hosts x processes per host) so every rank gets the same number of images."
                % (global_batch, world_size),
                "set batch_size to %s." % " or ".join(str(n) for n in nearest),
            )
        return global_batch // world_size

    def global_batch(self, world_size):
        if self.batch_size is not None:
            return self.batch_size
        return (self.batch_size_per_device or 1) * world_size

    def effective_lr(self, world_size):
        """Linear scaling rule: lr is given for lr_base_batch_size images; scale to the actual
        global batch (Goyal et al. 2017; gradients are averaged over all ranks by Horovod)."""
        return self.lr * self.global_batch(world_size) / self.lr_base_batch_size

    @property
    def warmup_iters(self):
        return max(0, self.lr_warmup)

    @property
    def use_fpn(self):
        return "_fpn_" in self.network

    def resolved(self, world_size):
        """Every effective value, plus the derived ones, as a JSON-able dict (logged and saved)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        values.update(
            world_size=world_size,
            global_batch=self.global_batch(world_size),
            per_rank_batch=self.per_rank_batch(world_size),
            effective_lr=self.effective_lr(world_size),
            lr_scaling="linear: effective_lr = lr * global_batch / lr_base_batch_size",
        )
        return values


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


# Names people commonly use for our keys (other trainers' flags). The built-in algorithm's names
# (learning_rate, weight_decay, ...) are accepted as they are (job/builtin_algorithm.py).
ALIASES = {"learning-rate": "lr", "num_epochs": "epochs",
           "base_lr": "lr", "batch": "batch_size", "image_size": "short", "model": "network",
           "workers": "num_workers", "gpus_per_host": "processes_per_host"}


# How near a name must be to be suggested (difflib's ratio): 'epoch' -> 'epochs' (0.91), 'lrr' ->
# 'lr' (0.8), but not 'start_epoch' -> 'static_alloc' (0.61).
NEAR = 0.7


def closest_key(key):
    normalised = key.strip().lower().replace("-", "_")
    if normalised in ALIASES:
        return ALIASES[normalised]
    valid = list(FIELDS) + list(LAUNCH_KEYS) + list(builtin_algorithm.NAMES)
    if normalised in valid:
        return normalised
    match = difflib.get_close_matches(normalised, valid, n=1, cutoff=NEAR)
    return match[0] if match else None


def split_reserved(hyperparameters):
    """Separate SageMaker's own keys (sagemaker_*, _tuning_objective_metric) from ours."""
    ours, reserved = {}, {}
    for key, value in hyperparameters.items():
        if key.startswith(RESERVED_PREFIXES) or key in RESERVED_KEYS:
            reserved[key] = value
        else:
            ours[key] = value
    return ours, reserved


def _shown(raw):
    text = raw if isinstance(raw, str) else json.dumps(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def from_hyperparameters(hyperparameters, extra_keys=LAUNCH_KEYS):
    """Build and validate a TrainConfig from a mapping of hyperparameters.

    ``extra_keys`` are keys another layer owns (launch settings); they are accepted and ignored
    here. All problems are reported together, each naming the key, the value and what was expected.
    """
    values, defaulted = _parsed(hyperparameters, extra_keys)
    config = TrainConfig(**values)
    validate(config)
    object.__setattr__(config, "sources", value_sources(config, set(values) - set(defaulted),
                                                        defaulted))
    return config


def value_sources(config, given, defaulted=()):
    """{field: where its value comes from} for every field not at its field default: the job's
    hyperparameters (``given``), the built-in algorithm's defaults (``defaulted``), else the
    highest preset layer that sets it (``preset_layers``)."""
    sources = {}
    for source, values in preset_layers(config.network, config.dataset):
        sources.update((name, source) for name in values)
    sources.update((name, builtin_algorithm.DEFAULT_SOURCE) for name in defaulted)
    sources.update((name, "the job's hyperparameters") for name in given)
    return {name: sources[name] for name in FIELDS if name in sources}


def parse_hyperparameters(hyperparameters, extra_keys=LAUNCH_KEYS):
    """Each hyperparameter parsed on its own ({name: typed value}); a ConfigError naming every
    unknown name and every value that does not parse. Rules across fields are ``validate``'s."""
    return _parsed(hyperparameters, extra_keys)[0]


def _parsed(hyperparameters, extra_keys):
    """(``parse_hyperparameters``' values, the names the built-in algorithm's defaults set)."""
    ours, _ = split_reserved(hyperparameters)
    ours, notes, problems, defaulted = builtin_algorithm.translate(ours)
    for note in notes:
        LOG.info("built-in algorithm's hyperparameters: %s", note)
    values = {}
    for key, raw in sorted(ours.items()):
        if key in extra_keys:
            continue
        if key not in FIELDS:
            hint = closest_key(key)
            problems.append("unknown hyperparameter '%s'%s" % (
                key, " (did you mean '%s'?)" % hint if hint else ""))
            continue
        parser = FIELDS[key].metadata["parse"]
        decoded = decode(raw)
        try:
            # A string field keeps the raw text when JSON turned it into a number.
            value = parser(decoded)
        except ValueError as exc:
            if isinstance(raw, str) and decoded is not raw:
                try:
                    value = parser(raw)
                except ValueError:
                    problems.append("%s=%s: expected %s" % (key, _shown(raw), exc))
                    continue
            else:
                problems.append("%s=%s: expected %s" % (key, _shown(raw), exc))
                continue
        values[key] = value
    if problems:
        raise ConfigError("invalid hyperparameters: " + "; ".join(problems) + ".",
                          "correct the hyperparameters named above (docs/hyperparameters.md lists every one).")
    return values, defaulted


def validate(config):
    """Rules that involve more than one field."""
    problems = []
    data_format = formats.get(config.dataset)
    family = families.get(config.network)
    problems.extend(data_format.check_config(config))
    if not family.accepts(data_format):
        takers = [f.name for f in formats.all_formats() if family.accepts(f)]
        problems.append("network=%s trains on dataset=%s only, not dataset=%s%s" % (
            config.network, " or ".join(takers), config.dataset,
            " (a %s network needs every object's mask; %s has boxes only: train a %s network "
            "on it)" % (family.name, data_format.title, " or ".join(
                f.name for f in families.all_families() if f.accepts(data_format)))
            if family.needs_masks else ""))
    for option in formats.FORMAT_OPTIONS:
        if getattr(config, option) and option not in data_format.options:
            takers = [f.name for f in formats.all_formats() if option in f.options]
            problems.append("%s is only used with dataset=%s" % (option, " or ".join(takers)))
    if config.batch_size is not None and config.batch_size_per_device is not None:
        problems.append("batch_size=%d (global) and batch_size_per_device=%d both set; set one"
                        % (config.batch_size, config.batch_size_per_device))
    if config.train_annotation_file or config.val_annotation_file:
        if not (config.train_annotation_file and config.val_annotation_file):
            problems.append("train_annotation_file and val_annotation_file go together; name both")
    for images, annotations in (("train_image_dir", "train_annotation_file"),
                                ("val_image_dir", "val_annotation_file")):
        if getattr(config, images) and not getattr(config, annotations):
            problems.append("%s is used with %s only; name that file too" % (images, annotations))
    if len(set(config.classes)) != len(config.classes):
        problems.append("classes contains duplicates: %s" % ",".join(config.classes))
    for option in FAMILY_OPTIONS:
        if getattr(config, option) and option not in family.options:
            takers = [f.name for f in families.all_families() if option in f.options]
            problems.append("%s=true applies to %s networks only, not to %s" % (
                option, " and ".join(takers), config.network))
    problems += _builtin_rules(config, data_format)
    decay = config.lr_decay_epoch
    if list(decay) != sorted(set(decay)):
        problems.append("lr_decay_epoch=%s must be strictly increasing" % ",".join(map(str, decay)))
    if config.mixup and config.no_mixup_epochs >= config.epochs and config.no_mixup_epochs:
        problems.append("mixup=true with no_mixup_epochs=%d >= epochs=%d never mixes; lower "
                        "no_mixup_epochs" % (config.no_mixup_epochs, config.epochs))
    for splits_key in ("train_splits", "val_splits"):
        splits = getattr(config, splits_key)
        if not splits:
            problems.append("%s must name at least one split" % splits_key)
    if problems:
        raise ConfigError("invalid combination of hyperparameters: " + "; ".join(problems) + ".",
                          "change the values named above.")


def _builtin_rules(config, data_format):
    """Rules on the settings the built-in algorithm names alike."""
    problems = []
    if not data_format.metric.takes_overlap_threshold and config.overlap_threshold != 0.5:
        problems.append("overlap_threshold=%g: dataset=%s is scored by COCO's mAP, which averages IoU "
                        "0.50:0.95 (its AP50 is at 0.5); the threshold applies to the VOC07 mAP of "
                        "the other datasets" % (config.overlap_threshold, config.dataset))
    if config.num_classes is not None and config.classes and len(config.classes) != config.num_classes:
        problems.append("num_classes=%d but classes names %d (%s)" % (
            config.num_classes, len(config.classes), ",".join(config.classes)))
    return problems
