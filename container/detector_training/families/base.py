"""The seam between the shared engine and a detector family.

The engine, the sampler (GluonCV's SplitSortedBucketSampler under the equal-steps wrapper),
Horovod, checkpoints, hooks, stop/resume and failure handling are shared (core/, data/, job/).
What differs between Faster R-CNN, Mask R-CNN and YOLOv3 is what a family module says by
subclassing :class:`DetectorFamily`.

What the family is, as class attributes (plain values: read without mxnet by the configuration,
the metric definitions, the demo and the report):

* ``name``, ``networks`` (the network names it builds), ``presets`` (defaults per data style,
  the ``style`` a data format declares, data/formats/data_format.py's DATA_STYLES; merged over
  the format's own preset), ``needs_masks`` (it trains only on a data format whose
  objects carry masks: ``accepts(data_format)``), ``options`` (the hyperparameters of
  FAMILY_OPTIONS it takes; turning on another is a ConfigError);
* ``loss_names`` and ``metric_names`` (what its step returns, by name; the log lines, history
  and SageMaker metric definitions use them), ``score_names`` and ``objective`` (validation),
  ``report_columns`` (the AP columns of the report's table), ``test_resize`` (how inference
  resizes an image: as the family validates);
* ``demo_defaults`` and ``demo_images`` (``make run``: hyperparameters over the default
  network's, and the generated dataset's size).

How it trains, as methods:

* ``read_datasets``: the training and validation data in the form the family trains on, read by
  the configured data format (boxes; Mask R-CNN: boxes and masks);
* ``build_network``: the network by its model-zoo name, on the job's classes;
* ``fit_to_data``: adjustments the data asks for before training (e.g. RPN proposal counts for
  small images), returned as a JSON-able dict that ``export`` gets back;
* ``train_loader`` / ``val_loader``: transforms and batchify around the shared sampler;
* ``materialize``: one forward pass that gives every deferred parameter its shape;
* ``make_step``: the family's step, a :class:`~detector_training.core.step.TrainingStep`
  (core/step.py) on the network, given the AMP trainer when the job trains with AMP. The family
  writes only its ``forward(batch)``: the forward pass and its losses by ``loss_names``; the base
  runs it under ``autograd.record()``, does the backward (AMP's scaled loss when it has an AMP
  trainer) and returns ``{name: value}``: each of ``loss_names`` as the batch's mean loss
  (weighted under mixup), each of ``metric_names`` as a ``(total, count)`` pair (the step's
  ``values``); the engine sums them by name. A hook touches the step only through what the base
  declares: ``mix_ratio``, the weight of the losses while mixup is on (the epoch set-up hook
  writes ``mixup_loss_weight`` or 1.0 before each epoch);
* ``detect`` / ``evaluate``: a rank's detections on its validation shard (small, picklable), and
  the score of every rank's detections together (run on every rank, same number everywhere):
  the scores named in ``score_names`` (logged and kept per epoch), ``objective`` the one the best
  model is chosen by, and ``per_class``;
* ``export``: the deployable symbol/params pair.

Optional, with defaults here: ``check_config`` (rules on hyperparameters that only this family
has, run before any data is read), ``mixup_draw``/``mixup_loss_weight`` (how mixing ratios are
drawn, and the weight of the losses while mixup is on).

A new family is one module that subclasses DetectorFamily, registered with
``families.register`` (the built-in ones in ``families/__init__.py``).
"""

from detector_training.core.networks import build_zoo_network
from detector_training.core.report import BOX_AP_COLUMNS
from detector_training.data.formats import build_datasets

# Hyperparameters that only some families take; each family lists those it takes in ``options``.
FAMILY_OPTIONS = ("label_smooth", "multi_scale", "mixup", "final_fit")


class DetectorFamily:
    name = ""
    networks = ()
    # Networks whose GluonCV builder takes the class list itself (the ``*_custom`` builders of
    # SSD and YOLOv3): built with the job's classes instead of having their head reset.
    class_list_networks = ()
    presets = {}  # data style -> {hyperparameter: default}, over the format's preset
    needs_masks = False  # True: trains only on a data format whose objects carry masks
    options = ()
    loss_names = ()  # summed into the total loss; NaN/inf in any of them stops the job
    metric_names = ()  # logged beside the losses (accuracies, L1 terms)
    score_names = ("mAP", "AP50")  # validation scores (fractions), in the order they are logged
    objective = "mAP"  # the validation score the best model is chosen by
    report_columns = BOX_AP_COLUMNS  # (column, per-class key, headline key)
    # How inference resizes an image (inference.py), as the family's validation does: "short"
    # (short side to the last training scale, longer side capped, aspect kept) or "square"
    # (the square data shape: ``short``, else ``default_size(network)``).
    test_resize = "short"
    # The runtime `serve` runs this family's models with on a CPU host when the model directory
    # holds the verified ONNX export ("auto", serve/runtime.py): the faster one as measured by
    # benchmarks/serving.py, per family (its table in benchmarks/README.md).
    cpu_runtime = "mxnet"
    demo_defaults = {}
    demo_images = dict(n_train=120, n_test=48, n_train_2012=60)
    # Mixup: ratios from numpy.random.<name>(*args), and the weight of the losses while mixing.
    # Default (Faster R-CNN): even mixing only, since its target generator cannot weight boxes.
    mixup_draw = ("uniform", 0.5, 0.5)
    mixup_loss_weight = 0.5

    @property
    def log_names(self):
        return tuple(self.loss_names) + tuple(self.metric_names)

    def accepts(self, data_format):
        """Whether this family trains on data in ``data_format`` (a DataFormat)."""
        return data_format.masks or not self.needs_masks

    def read_datasets(self, config, root, data_format=None):
        """The data in this family's form, read by ``data_format`` (the job's one instance of its
        format, which keeps what it read for the data report; None: the configured format)."""
        return build_datasets(config, root, instances=self.needs_masks, fmt=data_format)

    def default_size(self, network):
        """A square-input family's data shape when ``short`` is not set (None: not square)."""
        return None

    def check_config(self, config):
        """Raise ConfigError for hyperparameters this family cannot use (before data is read)."""

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        """The configured GluonCV model-zoo network for ``classes`` (core/networks.py
        build_zoo_network), its NMS threshold the configured one; a family with builder
        overrides or networks of its own (Faster R-CNN) overrides this."""
        own = None
        if config.network in self.class_list_networks:
            from gluoncv.model_zoo import get_model

            own = {config.network: lambda **kwargs: get_model(
                config.network, pretrained=False, classes=list(classes), **kwargs)}
        return build_zoo_network(config.network, classes, pretrained_base, pretrained_dirs, ctx,
                                 own_networks=own, nms_threshold=config.nms_threshold)

    def fit_to_data(self, net, config, datasets):
        return {}

    def image_sizes(self, config, net):
        """(training short sides, validation short side, max size): the config's, else the network's."""
        short = config.short if config.short is not None else net.short
        short = tuple(short) if isinstance(short, (list, tuple)) else (short,)
        max_size = config.max_size if config.max_size is not None else net.max_size
        return short, short[-1], max_size

    def train_loader(self, config, net, datasets, world, per_rank_batch, steps, num_workers):
        raise NotImplementedError

    def val_loader(self, config, net, datasets, world, num_workers):
        raise NotImplementedError

    def materialize(self, net, batch, ctx):
        raise NotImplementedError

    def make_step(self, net, config, ctx, amp_trainer=None):
        raise NotImplementedError

    def detect(self, net, loader, indices, ctx, datasets):
        raise NotImplementedError

    def evaluate(self, config, datasets, gathered, scratch_dir):
        raise NotImplementedError

    def export(self, config, classes, params_path, prefix, fitted):
        raise NotImplementedError
