"""A YAML (or JSON) config file as the job's input, under its hyperparameters.

The file comes from the ``config`` channel (its one ``.yaml``/``.yml``/``.json`` file) or from the
``config_file`` hyperparameter (a path inside the channels, relative to ``/opt/ml/input/data``).
It is read into a flat dict of hyperparameters, which the job's own hyperparameters override (a
tuning job varies ``lr`` over one file); ``job/config.py`` then builds the typed configuration
from the merge, exactly as from hyperparameters alone.

Two forms are accepted, also mixed:

* the seed trainer's sections, every key its trainer reads: ``dataset`` (``train_data``/
  ``val_data`` each with ``annFile`` and ``root``: COCO-format data at its own paths;
  ``batch_size_per_device``, ``num_workers``), ``train`` (``lr``, ``wd``, ``momentum``,
  ``lr_decay``, ``lr_decay_epoch``, ``lr_warmup_iteration``, ``lr_warmup_factor``, the smooth-L1
  rhos, ``epochs``, the intervals, ``mixup``, ``no_mixup_epochs``, ``amp``, ``static_alloc``, ...;
  ``start_epoch`` 0; ``gpus``, ``kv_store``, ``horovod`` and ``save_prefix`` are noted and
  ignored), ``model`` (``network``, a model-zoo name or a backbone composed with ``use_fpn``;
  ``image_short``, ``image_max_size``, ``nms_thresh``, ``rcnn_num_samples``,
  ``no_pretrained_base``; ``norm_layer`` and the custom network's structure, noted and ignored;
  ``resume``, empty), plus ``seed`` and ``verbose``;
* this project's hyperparameter names, at the top or inside a section, so the ``config.json`` a
  job writes is a config file that reproduces the run (its derived values are recomputed).

The bytes are parsed by PyYAML's safe loader (JSON is YAML) under a policy: at most
``MAX_BYTES``, a mapping at the top, no aliases, no key given twice. Every problem names the key,
its line and the nearest valid name, and all of them are reported together as one ConfigError.
"""

import difflib
import logging
import os
import re

import yaml

from detector_training import families, settings
from detector_training.core.files import path_inside
from detector_training.data import formats
from detector_training.errors import ConfigError
from detector_training.safe_yaml import SafeLoader
from detector_training.job import config as config_mod
from detector_training.values import decode

LOG = logging.getLogger("detector_training")

CONFIG_CHANNEL = "config"
CONFIG_FILE_KEY = "config_file"
SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 1 << 20

# The seed trainer's keys, section by section, and the hyperparameter each one sets.
SEED_KEYS = {
    "dataset": {"batch_size_per_device": "batch_size_per_device", "num_workers": "num_workers"},
    "train": {"lr": "lr", "wd": "wd", "momentum": "momentum", "lr_decay": "lr_decay",
              "lr_decay_epoch": "lr_decay_epoch", "lr_warmup_iteration": "lr_warmup",
              "lr_warmup_factor": "lr_warmup_factor", "rpn_smoothl1_rho": "rpn_smoothl1_rho",
              "rcnn_smoothl1_rho": "rcnn_smoothl1_rho", "epochs": "epochs",
              "log_interval": "log_interval", "val_interval": "val_interval",
              "save_interval": "save_interval"},
    "model": {"image_short": "short", "image_max_size": "max_size", "nms_thresh": "nms_threshold"},
    None: {"seed": "seed", "verbose": "verbose"},  # top level
}
# The seed trainer's keys that are this image's hyperparameters by the same name (mixup,
# static_alloc, rcnn_num_samples, ...) need no entry: any hyperparameter name is accepted in any
# section.
SPLIT_SECTIONS = {"train_data": "train", "val_data": "val"}  # dataset.<section> -> split kind
SPLIT_KEYS = {"annFile": "%s_annotation_file", "root": "%s_image_dir"}
MODEL_KEYS = ("network", "use_fpn", "norm_layer", "resume", "no_pretrained_base")
# The seed trainer's custom-model options shape a network of its own; the image trains GluonCV's
# model-zoo network that model.network names, as published.
CUSTOM_NETWORK_KEYS = ("num_fpn_filters", "num_box_head_conv", "num_box_head_conv_filters",
                       "num_box_head_dense_filters", "nms_topk", "post_nms", "roi_mode", "roi_size",
                       "strides", "clip", "rpn_channel", "anchor_base_size", "anchor_aspect_ratio",
                       "anchor_scales", "anchor_alloc_size", "rpn_nms_thresh", "rpn_train_pre_nms",
                       "rpn_train_post_nms", "rpn_test_pre_nms", "rpn_test_post_nms", "rpn_min_size",
                       "rcnn_pos_iou_thresh", "rcnn_pos_ratio", "max_num_gt")
IGNORED = {
    ("train", "gpus"): "the image runs one Horovod rank on every GPU it sees",
    ("train", "kv_store"): "the ranks average gradients with Horovod's allreduce",
    ("train", "horovod"): "the image always runs its ranks under Horovod",
    ("train", "save_prefix"): "the model goes to /opt/ml/model and checkpoints to "
                              "/opt/ml/checkpoints under fixed names, which SageMaker uploads",
    ("model", "norm_layer"): "the networks keep BatchNorm frozen over pretrained weights and let it "
                             "learn when trained from scratch (pretrained_base=false)",
}
IGNORED.update({("model", key): "it shapes the seed trainer's custom network; the image trains "
                                "the model-zoo network model.network names, as published, and "
                                "fits its proposal counts to the data's image sizes"
                for key in CUSTOM_NETWORK_KEYS})
START_EPOCH_NOTE = "a job starts at epoch 0, or resumes from its checkpoints at their epoch"
# What the job adds to its config.json beside the hyperparameters (world size, global batch,
# effective lr, ...; test_short: the size its validation resized to, from the network and short):
# recomputed for the world a replay runs in.
DERIVED_KEYS = tuple(sorted(set(config_mod.TrainConfig().resolved(1)) - set(config_mod.FIELDS)
                            | {"test_short"}))


class _Mapping(dict):
    """A YAML mapping that remembers the line of each key."""

    def __init__(self):
        super().__init__()
        self.lines = {}


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


MAX_DEPTH = 32  # a config file's sections hold values two or three levels deep


class _Loader(SafeLoader):
    """The safe loader (no aliases, bounded nesting) that also refuses keys given twice and
    keeps each key's line."""

    max_depth = MAX_DEPTH

    def construct_line_mapping(self, node):
        mapping = _Mapping()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(None, None, "key %r is not a name" % (key,),
                                                        key_node.start_mark)
            line = key_node.start_mark.line + 1
            if key in mapping:
                raise _DuplicateKey(None, None, "key '%s' is given twice (lines %d and %d); keep one"
                                    % (key, mapping.lines[key], line), key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.lines[key] = line
        return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_line_mapping)


def parse(text, name):
    """The document in ``text`` (YAML or JSON) as nested mappings with key lines."""
    try:
        document = yaml.load(text, Loader=_Loader)  # nosec: a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ConfigError("config file %s: line %d: %s." % (name, mark.line + 1, exc.problem),
                          "correct the file at that line.") from None
    except yaml.YAMLError as exc:
        raise ConfigError("config file %s is not YAML or JSON: %s." % (name, exc),
                          "write the file as YAML or JSON.") from None
    if not isinstance(document, _Mapping):
        raise ConfigError("config file %s holds %s, not a mapping of names to values."
                          % (name, "nothing" if document is None else "a " + type(document).__name__),
                          "write sections (dataset, train, model) or hyperparameter names at the top "
                          "level.")
    return document


def read_text(path):
    """The file's text, refused above MAX_BYTES before anything is parsed."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError("config file %s is larger than %d bytes." % (path, MAX_BYTES),
                          "a config file holds settings only; keep it small.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("config file %s is not UTF-8 text (byte %d)." % (path, exc.start),
                          "save it as UTF-8.") from None


class _Translation:
    """The walk from a parsed file to flat hyperparameters, collecting every problem."""

    def __init__(self, channels_dir):
        self.channels_dir = channels_dir
        self.values = {}  # hyperparameter -> value
        self.origin = {}  # hyperparameter -> (line, dotted key)
        self.problems = []
        self.notes = []

    def problem(self, line, key, text):
        self.problems.append("line %d: %s: %s" % (line, key, text))

    def unknown(self, line, key, valid):
        hint = _nearest(key.split(".")[-1], valid)
        self.problem(line, key, "unknown key%s" % (" (did you mean '%s'?)" % hint if hint else ""))

    def set(self, name, value, line, key):
        if name in self.origin:
            first_line, first_key = self.origin[name]
            self.problem(line, key, "sets %s, which line %d (%s) sets already; keep one"
                         % (name, first_line, first_key))
            return
        try:
            config_mod.FIELDS[name].metadata["parse"](value)
        except ValueError as exc:
            self.problem(line, key, "%s: expected %s" % (_shown(value), exc))
            return
        self.values[name] = value
        self.origin[name] = (line, key)

    def walk(self, document):
        for key, value in document.items():
            line = document.lines[key]
            # 'dataset' is a section, or the hyperparameter when it holds a name (coco).
            if key in SEED_KEYS and (isinstance(value, dict) or key not in config_mod.FIELDS):
                self.section(key, value, line)
            elif key in SEED_KEYS[None]:
                self.set(SEED_KEYS[None][key], value, line, key)
            else:
                self.flat(key, value, line, key, _valid_names(None))

    def flat(self, name, value, line, key, valid):
        if name in DERIVED_KEYS:
            self.notes.append("%s (derived: recomputed for this job's world)" % key)
        elif name in config_mod.LAUNCH_KEYS:
            self.problem(line, key, "is a launch setting, not read from a config file; give it as "
                                    "a hyperparameter")
        elif name in config_mod.FIELDS:
            self.set(name, value, line, key)
        else:
            self.unknown(line, key, valid)

    def section(self, section, mapping, section_line):
        if not isinstance(mapping, _Mapping):
            self.problem(section_line, section, "%s: expected a mapping of names to values"
                         % _shown(mapping))
            return
        model = {}
        for key, value in mapping.items():
            line, dotted = mapping.lines[key], "%s.%s" % (section, key)
            if (section, key) in IGNORED:
                self.notes.append("%s=%s (ignored: %s)" % (dotted, _shown(value), IGNORED[section, key]))
            elif (section, key) == ("train", "start_epoch"):
                self.start_epoch(value, line, dotted)
            elif section == "dataset" and key in SPLIT_SECTIONS:
                self.split(SPLIT_SECTIONS[key], value, line, dotted)
            elif section == "model" and key in MODEL_KEYS:
                model[key] = (value, line)
            elif key in SEED_KEYS[section]:
                self.set(SEED_KEYS[section][key], value, line, dotted)
            else:
                self.flat(key, value, line, dotted, _valid_names(section))
        if section == "model":
            self.model(model)

    def start_epoch(self, value, line, dotted):
        """The seed's epoch to resume a ``model.resume`` file from: 0 is a fresh start, which is
        what a job without checkpoints does; any other epoch goes with a resume, refused below."""
        if value in (0, "0", None, ""):
            self.notes.append("%s=%s (noted: %s)" % (dotted, _shown(value), START_EPOCH_NOTE))
        else:
            self.problem(line, dotted, "%s: %s; a model to start from is the 'model' channel and "
                                       "starts at epoch 0; set 0 or leave it out"
                         % (_shown(value), START_EPOCH_NOTE))

    def split(self, kind, mapping, line, dotted):
        if not isinstance(mapping, _Mapping):
            self.problem(line, dotted, "expected annFile and root")
            return
        if "annFile" not in mapping:
            self.problem(line, dotted, "has no annFile (the split's COCO-format JSON)")
        for key, value in mapping.items():
            key_line, key_dotted = mapping.lines[key], "%s.%s" % (dotted, key)
            if key not in SPLIT_KEYS:
                self.unknown(key_line, key_dotted, SPLIT_KEYS)
            elif not isinstance(value, str) or not value.strip():
                self.problem(key_line, key_dotted, "%s: expected a path" % _shown(value))
            else:
                self.set(SPLIT_KEYS[key] % kind, self.channel_path(value.strip(), key_line, key_dotted),
                         key_line, key_dotted)
        if "dataset" not in self.origin:
            self.set("dataset", "coco", line, dotted)

    def channel_path(self, value, line, key):
        """A path inside the channels, relative to their folder (so config.json is portable)."""
        real = path_inside(self.channels_dir, value)
        if real is None:
            self.problem(line, key, "%s lies outside the job's channels (%s); name a path inside a "
                                    "channel" % (value, self.channels_dir))
            return value
        return os.path.relpath(real, os.path.realpath(self.channels_dir))

    def model(self, keys):
        if "no_pretrained_base" in keys:
            value, line = keys["no_pretrained_base"]
            if not isinstance(value, bool):
                self.problem(line, "model.no_pretrained_base", "%s: expected true or false" % _shown(value))
            else:
                self.set("pretrained_base", not value, line, "model.no_pretrained_base")
        value, line = keys.get("resume", (None, 0))
        if value not in (None, "", False):
            self.problem(line, "model.resume", "%s: a job resumes from its checkpoints by itself; "
                                               "give a model to start from as the 'model' channel"
                                               % _shown(value))
        if "network" not in keys:
            if "use_fpn" in keys:
                self.problem(keys["use_fpn"][1], "model.use_fpn", "needs model.network")
            return
        network, line = keys["network"]
        use_fpn, fpn_line = keys.get("use_fpn", (None, line))
        if use_fpn is not None and not isinstance(use_fpn, bool):
            self.problem(fpn_line, "model.use_fpn", "%s: expected true or false" % _shown(use_fpn))
            return
        name = network_name(network, use_fpn)
        if name is None:
            hint = _nearest(str(network), families.network_names() + backbones())
            self.problem(line, "model.network", "%s%s is neither a network name nor a backbone of "
                                                "one%s" % (_shown(network), " with use_fpn" if use_fpn else "",
                                                           " (did you mean '%s'?)" % hint if hint else ""))
            return
        self.set("network", name, line, "model.network")


def network_name(network, use_fpn=None):
    """A network of ours from the seed trainer's ``network`` and ``use_fpn``: a full model-zoo
    name as it is (when use_fpn agrees), else a backbone (``resnet50_v1b``) composed into
    ``faster_rcnn[_fpn]_<backbone>_<coco|voc>``, COCO's heads first. None when nothing fits."""
    if not isinstance(network, str):
        return None
    network = network.strip()
    if network in families.network_names():
        return network if use_fpn is None or use_fpn == ("_fpn_" in network) else None
    prefix = "faster_rcnn_fpn_" if use_fpn else "faster_rcnn_"
    return next((name for name in (prefix + network + "_coco", prefix + network + "_voc")
                 if name in families.network_names()), None)


def backbones():
    """The backbones ``network_name`` composes a Faster R-CNN network from."""
    found = (re.match(r"faster_rcnn_(?:fpn_)?(.+)_(?:coco|voc)$", n)
             for n in families.get_by_name("faster_rcnn").networks)
    return tuple(sorted({m.group(1) for m in found if m}))


def _valid_names(section):
    """The keys valid in ``section`` (None: the top level): the seed trainer's and ours."""
    seed = set(SEED_KEYS[section]) | set(config_mod.FIELDS) | set(config_mod.LAUNCH_KEYS)
    if section is None:
        seed |= {s for s in SEED_KEYS if s}
    elif section == "dataset":
        seed |= set(SPLIT_SECTIONS)
    elif section == "model":
        seed |= set(MODEL_KEYS)
    elif section == "train":
        seed |= {"start_epoch"}
    return sorted(seed | {key for sec, key in IGNORED if sec == section})


def _nearest(key, valid):
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=config_mod.NEAR)
    return match[0] if match else None


def _shown(value):
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def read_config_file(path, channels_dir, name=None):
    """The hyperparameters a config file sets (flat names; values as the file has them)."""
    name = name or path
    translation = _Translation(channels_dir)
    translation.walk(parse(read_text(path), name))
    if translation.problems:
        raise ConfigError("config file %s: %s." % (name, "; ".join(translation.problems)),
                          "correct the keys named above (the seed trainer's sections, or "
                          "hyperparameter names; see docs/config-file.md).")
    for note in translation.notes:
        LOG.info("config file: %s", note)
    return translation.values


def config_file_path(env):
    """The config file of the job: ``config_file`` (a path inside the channels), else the one
    YAML/JSON file of the ``config`` channel, else None."""
    channels = env.paths.channels_dir
    raw = env.hyperparameters.get(CONFIG_FILE_KEY)
    if raw is not None:
        value = decode(raw)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError("config_file=%s: expected a path inside the job's channels." % _shown(raw),
                              "name the file relative to %s, e.g. config/experiment.yaml." % channels)
        path = path_inside(channels, value.strip())
        if path is None:
            raise ConfigError("config_file=%s lies outside the job's channels (%s)." % (value, channels),
                              "name a file inside a channel, relative to %s, e.g. "
                              "config/experiment.yaml." % channels)
        if not os.path.isfile(path):
            raise ConfigError("config_file=%s: no such file in the job's channels (%s)." % (value, channels),
                              "give the file's path relative to %s, starting with its channel's name."
                              % channels)
        return path
    channel = env.channel_dir(CONFIG_CHANNEL)
    if channel is None:
        return None
    found = sorted(f for f in os.listdir(channel)
                   if f.lower().endswith(SUFFIXES) and os.path.isfile(os.path.join(channel, f)))
    if len(found) != 1:
        raise ConfigError("the '%s' channel holds %s." % (CONFIG_CHANNEL, "no .yaml, .yml or .json file"
                                                         if not found else "several config files: %s"
                                                         % ", ".join(found)),
                          "put one config file in the channel, or name one with the hyperparameter "
                          "config_file=%s/<file>." % CONFIG_CHANNEL)
    return os.path.join(channel, found[0])


def hyperparameters_over_file(env):
    """The job's hyperparameters over its config file's values (just the hyperparameters when
    there is no config file); ``config_file`` itself is consumed here."""
    hyperparameters = {k: v for k, v in env.hyperparameters.items() if k != CONFIG_FILE_KEY}
    path = config_file_path(env)
    if path is None:
        return hyperparameters
    name = os.path.relpath(path, os.path.realpath(env.paths.channels_dir))
    values = read_config_file(path, env.paths.channels_dir, name)
    overridden = sorted(set(values) & set(hyperparameters))
    LOG.info("config file: %s sets %d hyperparameter(s); the job's hyperparameters override %s",
             name, len(values), ", ".join(overridden) or "none of them")
    return dict(values, **hyperparameters)


def load_config(env):
    """The job's typed configuration: its hyperparameters over its config file, if it has one.
    When neither names a dataset, the data format is recognised from the channels' contents
    (data/formats: a channel holding two formats, or data channels holding none, is a DataError
    listing what they hold)."""
    values = hyperparameters_over_file(env)
    if settings.setting(settings.MODE, env.environ):  # the `evaluate` command's
        values["mode"] = settings.setting(settings.MODE, env.environ)
    if "dataset" not in values:
        if decode(values.get("mode")) == "evaluate":  # its data is the test channel's
            name, channel, where = formats.recognise_evaluation_data(env.paths.channels_dir)
        else:
            name, channel, where = formats.recognise(env.paths.channels_dir, env.input_data_config)
        LOG.info("data: dataset=%s recognised%s: %s", name,
                 " in channel '%s'" % channel if channel else "", where)
        values["dataset"] = name
    return config_mod.from_hyperparameters(values)
