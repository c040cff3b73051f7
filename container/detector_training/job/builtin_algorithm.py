"""The SageMaker built-in Object Detection algorithm's hyperparameters, in this image's terms.

A job written for the built-in algorithm (an MXNet SSD) sends names such as ``learning_rate``,
``mini_batch_size`` and ``base_network``. ``translate`` turns those that have a counterpart here
into it (``learning_rate`` -> ``lr``, ...), before the configuration parses them, so every value
is checked by the same parser and a config.json holds only this image's names. The rest of the
built-in algorithm's names are this image's own hyperparameters with the same meaning
(``epochs``, ``momentum``, ``optimizer``, ``early_stopping*``, ``num_classes``,
``nms_threshold``, ``overlap_threshold``, ``freeze_layer_pattern``, ``kv_store``).

A job written for the built-in algorithm (one that uses any of its names, e.g. only its two
required ones, ``num_classes`` and ``num_training_samples``) gets the built-in algorithm's
documented defaults (DEFAULTS: 30 epochs, a batch of 32, learning rate 0.001 at that batch, no
step decay, ...) for whatever it leaves unsaid, as that algorithm would have trained it: they go
over the data format's and family's presets, under the job's own values, and the log says which
values they set.

Without ``network``, the built-in names select the SSD the algorithm would have run:
``base_network`` (``vgg-16`` by default) and ``image_shape`` (300 by default) choose
``ssd_300_vgg16_atrous_*``, ``ssd_512_vgg16_atrous_*`` or ``ssd_512_resnet50_v1_*``. With
``network``, ``base_network`` must name that network's backbone.

Pure: no mxnet, no environment (the launcher's side imports it through job/config.py).
"""

from detector_training import families
from detector_training.values import choice, check, decode, parse_bool, parse_float, parse_int, \
    parse_int_list

BASE_NETWORKS = {"vgg-16": "vgg16", "resnet-50": "resnet50"}  # name -> the backbone in network names


def _base_network(value):
    return choice(tuple(BASE_NETWORKS))(value)


def _use_pretrained_model(value):
    # The built-in algorithm takes 0 or 1; a boolean as this image writes it is the same thing.
    return parse_bool(value)


_positive = check(parse_int, lambda v: v >= 1, "an integer >= 1")
_image_shape = check(parse_int, lambda v: v >= 32, "an integer >= 32 (the built-in algorithm: >= 300)")
_steps = check(parse_int_list, lambda v: all(e >= 1 for e in v), "epochs >= 1, e.g. \"20,40\"")
_factor = check(parse_float, lambda v: 0 < v <= 1, "a number in (0, 1]")
_lr = check(parse_float, lambda v: 0 < v <= 10, "a number in (0, 10]")

# Built-in name -> (this image's hyperparameter, parser of the built-in's value). None: no
# counterpart here; the value is checked and noted in the log (see NOTED).
TRANSLATED = {
    "mini_batch_size": ("batch_size", _positive),
    "learning_rate": ("lr", _lr),
    "lr_scheduler_step": ("lr_decay_epoch", _steps),
    "lr_scheduler_factor": ("lr_decay", _factor),
    "weight_decay": ("wd", check(parse_float, lambda v: 0 <= v < 1, "a number in [0, 1)")),
    "use_pretrained_model": ("pretrained_base", _use_pretrained_model),
    "image_shape": ("short", _image_shape),
    "base_network": (None, _base_network),
    "num_training_samples": (None, _positive),
    "label_width": (None, _positive),
}
NOTED = {
    "num_training_samples": "the job counts its training images itself (the count is logged) and "
                            "its schedule is in epochs, so no sample count is needed",
    "label_width": "the built-in algorithm pads every RecordIO label to this width; this image "
                   "reads each record's label at its own length",
}
# The built-in algorithm's documented defaults (its hyperparameters page), in this image's names:
# (our name, the value as the built-in algorithm's default, the names, built-in and ours, that
# set it). ``image_shape`` (300) needs no entry: it selects ssd_300_*, whose data shape it is.
DEFAULTS = (
    ("epochs", "30", ("epochs",)),
    ("batch_size", "32", ("mini_batch_size", "batch_size", "batch_size_per_device")),
    ("lr", "0.001", ("learning_rate", "lr")),
    ("lr_decay_epoch", "[]", ("lr_scheduler_step", "lr_decay_epoch")),  # no step: a constant rate
    ("lr_decay", "0.1", ("lr_scheduler_factor", "lr_decay")),
    ("optimizer", "sgd", ("optimizer",)),
    ("momentum", "0.9", ("momentum",)),
    ("wd", "0.0005", ("weight_decay", "wd")),
    ("pretrained_base", "true", ("use_pretrained_model", "pretrained_base")),
    ("overlap_threshold", "0.5", ("overlap_threshold",)),
    ("nms_threshold", "0.45", ("nms_threshold",)),
    ("early_stopping", "false", ("early_stopping",)),
    ("early_stopping_min_epochs", "10", ("early_stopping_min_epochs",)),
    ("early_stopping_patience", "5", ("early_stopping_patience",)),
    ("early_stopping_tolerance", "0.0", ("early_stopping_tolerance",)),
)
DEFAULT_SOURCE = "the built-in algorithm's default"
# The built-in names that only this layer knows; those that are hyperparameters here too are
# listed in docs/migrating-from-built-in.md.
NAMES = tuple(TRANSLATED)


def ssd_network(base_network, image_shape):
    """The GluonCV SSD the built-in algorithm runs for ``base_network`` and ``image_shape``: the
    network built for the job's class list (``_custom``), as the algorithm trains ``num_classes``
    of the user's data whatever its format."""
    if base_network == "resnet-50":
        return "ssd_512_resnet50_v1_custom"
    return "ssd_%d_vgg16_atrous_custom" % (512 if image_shape >= 512 else 300)


def uses_builtin_names(hyperparameters):
    return any(name in hyperparameters for name in NAMES)


def translate(hyperparameters):
    """(hyperparameters in this image's names, notes for the log, problems, defaulted). Values
    keep the form they came in (raw strings stay strings for the configuration's parsers),
    except where a built-in value needs reading to be translated. ``defaulted``: the names whose
    value is one of the built-in algorithm's DEFAULTS (the job left them unsaid)."""
    if not uses_builtin_names(hyperparameters):
        return dict(hyperparameters), [], [], ()
    ours = {k: v for k, v in hyperparameters.items() if k not in NAMES}
    notes, problems, parsed = [], [], {}
    for name in NAMES:
        if name not in hyperparameters:
            continue
        target, parser = TRANSLATED[name]
        try:
            parsed[name] = parser(decode(hyperparameters[name]))
        except ValueError as exc:
            problems.append("%s=%s: expected %s" % (name, hyperparameters[name], exc))
            continue
        if target is None:
            if name in NOTED:
                notes.append("%s=%s (noted: %s)" % (name, hyperparameters[name], NOTED[name]))
            continue
        if target in hyperparameters:
            problems.append("%s (the built-in algorithm's name for %s) and %s are both set; keep one"
                            % (name, target, target))
            continue
        ours[target] = hyperparameters[name]
        notes.append("%s=%s -> %s" % (name, hyperparameters[name], target))
    defaulted = [target for target, value, names in DEFAULTS
                 if not any(n in hyperparameters for n in names)]
    for target, value, _names in DEFAULTS:
        if target in defaulted:
            ours[target] = value
    if defaulted:
        notes.append("%s: %s" % (DEFAULT_SOURCE + "s for what the job leaves unsaid", ", ".join(
            "%s=%s" % (target, ours[target]) for target in defaulted)))
    # The built-in algorithm applies learning_rate as it is, to its mini_batch_size: no scaling.
    if "learning_rate" in parsed or "lr" in defaulted:
        batch = ours.get("batch_size")
        if batch is not None and "lr_base_batch_size" not in hyperparameters:
            ours["lr_base_batch_size"] = batch
            defaulted.append("lr_base_batch_size")  # the built-in algorithm's rule, not the job's value
            notes.append("lr_base_batch_size=%s (learning_rate applies to that batch as it is)" % batch)
    base = parsed.get("base_network")
    network = decode(hyperparameters.get("network")) if "network" in hyperparameters else None
    if network is None:
        if not problems:
            shape = parsed.get("image_shape", 300)
            name = ssd_network(base or "vgg-16", shape)
            if name in families.network_names():
                ours["network"] = name
                notes.append("network=%s (the built-in algorithm's SSD for base_network=%s, "
                             "image_shape=%s)" % (name, base or "vgg-16", shape))
            else:
                problems.append("base_network=%s with image_shape=%s selects %s, which this image "
                                "does not train; set network" % (base or "vgg-16", shape, name))
    elif base is not None and BASE_NETWORKS[base] not in str(network):
        problems.append("base_network=%s does not describe network=%s (whose backbone is in its name); "
                        "base_network chooses the built-in algorithm's SSD when network is not set: "
                        "drop base_network, or set it to this network's backbone" % (base, network))
    return ours, notes, problems, tuple(defaulted)
