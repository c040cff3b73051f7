"""The validator: a detector scored on a job's validation data by every rank together, and an
exported model reported on the same images. Training's validation (each epoch's scores, then the
evaluation report of the best model) and ``mode=evaluate`` (evaluate.py) call one such object
with a network, so an evaluation's mAP is the one a training job reports for the same model and
data, and both reports are drawn the same way.

``score(net)`` runs the family's ``detect`` on this rank's shard, gathers every rank's detections
and scores them all (core/evaluation.py ``validate``); ``report(model_directory, out_dir)`` loads
an exported model as ``serve`` loads it (inference.py) and writes core/eval_report.py's pictures
and tables for the validation images.

Given ``stop`` (this rank's ``requested()``, job/stop.py), a stop request ends either part-way
(core/evaluation.py Interrupted): validation once every rank agreed, the report at once (the main
rank writes it alone). A validation longer than the launcher's grace then never costs the job its
checkpoint, nor a report its model.
"""

import shutil
import tempfile

from detector_training import inference
from detector_training.core.distributed import any_rank
from detector_training.core.evaluation import Interrupted, validate


class Validator:
    """One rank's validator over ``datasets.val``, read through ``loader`` (this rank's shard:
    the dataset ``indices`` it holds)."""

    def __init__(self, family, config, datasets, loader, indices, dist, ctx, stop=None):
        self.family, self.config, self.datasets = family, config, datasets
        self.loader, self.indices, self.dist, self.ctx = loader, indices, dist, ctx
        self.stop = stop
        self._scratch = tempfile.mkdtemp(prefix="detector-val-rank%d-" % dist.world.rank)

    @property
    def images(self):
        """How many images are scored (every rank's together)."""
        return len(self.datasets.val)

    @property
    def shard(self):
        """How many of them this rank detects."""
        return len(self.indices)

    def score(self, net):
        """``net``'s scores on the validation images, the same on every rank (a collective: every
        rank calls it): {'mAP', 'AP50', 'per_class', 'images', ...the family's extra scores}.
        Every rank first takes the main rank's parameters: the gradients are averaged, but each
        rank's batch-norm statistics follow its own batches, and the model scored must be the
        one the main rank writes."""
        self.dist.broadcast_parameters(net.collect_params())
        if not self.config.disable_hybridization:  # the graph for inference inputs
            net.hybridize(static_alloc=self.config.static_alloc)
        return validate(self.family, net, self.loader, self.indices, self.ctx, self.dist,
                        self.config, self.datasets, self._scratch,
                        self._stop_agreed if self.stop is not None else None)

    def _stop_agreed(self):
        """Whether any rank was asked to stop (one allreduce: every rank asks together)."""
        return any_rank(self.dist, self.stop())

    def report(self, model_directory, out_dir):
        """The exported model in ``model_directory`` (symbol, params, classes.json, config.json),
        loaded as ``serve`` loads it, on the validation images: the evaluation report's pictures
        and tables written into ``out_dir``. Returns (evaluation, pictures, report text)."""
        model = inference.load_model(model_directory, self.ctx)
        return inference.evaluate(model, self._until_stopped(inference.dataset_samples(self.datasets.val)),
                                  out_dir, self.datasets.metric.report_ious)

    def _until_stopped(self, samples):
        for done, sample in enumerate(samples):
            if self.stop is not None and self.stop():
                raise Interrupted("a stop was requested after %d of %d image(s)" % (done, self.images))
            yield sample

    def close(self):
        shutil.rmtree(self._scratch, ignore_errors=True)
