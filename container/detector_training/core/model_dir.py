"""The model directory (``/opt/ml/model``, tarred by SageMaker into ``model.tar.gz``): every file
in it is written here, by the main rank, each atomically.

* while training: ``model-best.params`` and ``validation-best.json`` at each new best mAP;
* after a completed run: ``model.params`` (final), ``classes.json``, ``config.json`` (effective
  configuration), ``history.json`` (per epoch), ``validation.json`` (last validation), the
  deployable ``model-symbol.json`` + ``model-0000.params`` (the family's export), and the report
  (``training_curves.png``, ``per_class_ap.md``/``.csv``).
"""

import logging
import os

from detector_training.core.files import atomic_save, write_json

LOG = logging.getLogger("detector_training")

FINAL_PARAMS = "model.params"
BEST_PARAMS = "model-best.params"
EXPORT_PREFIX = "model"  # model-symbol.json + model-0000.params


def _save_params(net, path):
    atomic_save(path, net.save_parameters)


class ModelDirectory:
    def __init__(self, path):
        self.path = path

    def _file(self, name):
        return os.path.join(self.path, name)

    def save_best(self, net, validation):
        os.makedirs(self.path, exist_ok=True)
        _save_params(net, self._file(BEST_PARAMS))
        write_json(self._file("validation-best.json"), validation)

    def write_final(self, *, family, config, net, classes, effective_config, history, validation,
                    fitted):
        os.makedirs(self.path, exist_ok=True)
        _save_params(net, self._file(FINAL_PARAMS))
        write_json(self._file("classes.json"), list(classes))
        write_json(self._file("config.json"), effective_config)
        write_json(self._file("history.json"), history)
        if validation is not None:
            write_json(self._file("validation.json"), validation)
        family.export(config, classes, self._file(FINAL_PARAMS), self._file(EXPORT_PREFIX), fitted)
        from detector_training.core.report import write_report

        try:
            write_report(self.path, history, validation, list(classes), family.loss_names,
                         family.report_columns)
        except Exception as exc:  # the report is a convenience: it must never fail a trained job
            LOG.warning("report: not written (%s: %s)", type(exc).__name__, exc)
        LOG.info("model: written to %s", self.path)
