"""The seam between the shared engine and a detector family.

The engine, the sampler (GluonCV's SplitSortedBucketSampler under the equal-steps wrapper),
Horovod, checkpoints, hooks, stop/resume and failure handling are shared (core/, data/, job/).
What differs between Faster R-CNN, Mask R-CNN and YOLOv3 is what a family module says by
subclassing :class:`DetectorFamily`:

* ``read_datasets``: the training and validation data in the form the family trains on (boxes;
  Mask R-CNN: boxes and masks);
* ``build_network``: the network by its model-zoo name, on the job's classes;
* ``fit_to_data``: adjustments the data asks for before training (e.g. RPN proposal counts for
  small images), returned as a JSON-able dict that ``export`` gets back;
* ``train_loader`` / ``val_loader``: transforms and batchify around the shared sampler;
* ``materialize``: one forward pass that gives every deferred parameter its shape;
* ``make_step``: forward and backward of one batch, adding losses and metric inputs to the
  engine's sums (names in ``loss_names`` and ``metric_names``, which the log lines and the
  SageMaker metric definitions use);
* ``detect`` / ``evaluate``: a rank's detections on its validation shard (small, picklable), and
  the score of every rank's detections together (run on every rank, same number everywhere):
  the scores named in ``score_names`` (logged and kept per epoch), ``objective`` the one the best
  model is chosen by, and ``per_class``;
* ``export``: the deployable symbol/params pair.

Optional, with defaults here: ``check_config`` (rules on hyperparameters that only this family
has, run before any data is read), ``mixup_draw``/``mixup_loss_weight`` (how mixing ratios are
drawn, and the weight of the losses while mixup is on).

A new family is one module here that subclasses DetectorFamily, plus its networks in
``job/config.py``'s ``FAMILY_NETWORKS`` (and ``FAMILY_PRESETS`` when its defaults differ) and
its entry in ``families/__init__.py``'s ``FAMILIES``.
"""

from detector_training.data.datasets import build_datasets


class DetectorFamily:
    name = ""
    loss_names = ()  # summed into the total loss; NaN/inf in any of them stops the job
    metric_names = ()  # logged beside the losses (accuracies, L1 terms)
    score_names = ("mAP", "AP50")  # validation scores (fractions), in the order they are logged
    objective = "mAP"  # the validation score the best model is chosen by
    # Mixup: ratios from numpy.random.<name>(*args), and the weight of the losses while mixing.
    # Default (Faster R-CNN): even mixing only, since its target generator cannot weight boxes.
    mixup_draw = ("uniform", 0.5, 0.5)
    mixup_loss_weight = 0.5

    @property
    def log_names(self):
        return tuple(self.loss_names) + tuple(self.metric_names)

    def read_datasets(self, config, root):
        return build_datasets(config, root)

    def check_config(self, config):
        """Raise ConfigError for hyperparameters this family cannot use (before data is read)."""

    def build_network(self, config, classes, per_rank_batch, pretrained_base, pretrained_dirs, ctx):
        raise NotImplementedError

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
