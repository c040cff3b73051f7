"""The model directory (core/model_dir.py): every file of a finished job."""

import os

from detector_training.core.model_dir import ModelDirectory


class _Net:
    def save_parameters(self, path):
        with open(path, "wb") as handle:
            handle.write(b"params")


class _Family:
    loss_names = ("a_loss",)
    report_columns = (("AP", "per_class", "mAP"),)

    def __init__(self):
        self.exported = None

    def export(self, config, classes, params_path, prefix, fitted):
        self.exported = (params_path, prefix, fitted)
        with open(prefix + "-symbol.json", "w") as handle:
            handle.write("{}")


def test_model_directory_holds_every_file_of_a_finished_job(tmp_path):
    directory = ModelDirectory(str(tmp_path / "model"))
    validation = {"mAP": 0.5, "AP50": 0.5, "per_class": {"a": 0.5}, "images": 2, "epoch": 1}
    directory.save_best(_Net(), validation)
    family = _Family()
    directory.write_final(family=family, config=None, net=_Net(), classes=("a",),
                          effective_config={"epochs": 2}, fitted={"k": 1},
                          history=[{"epoch": 0, "a_loss": 1.0, "lr": 0.1, "mAP": 0.5}],
                          validation=validation)
    names = set(os.listdir(tmp_path / "model"))
    assert names >= {"model.params", "model-best.params", "validation-best.json", "classes.json",
                     "config.json", "history.json", "validation.json", "model-symbol.json",
                     "training_curves.png", "per_class_ap.md", "per_class_ap.csv"}
    assert not [n for n in names if n.startswith(".tmp")]
    assert family.exported == (str(tmp_path / "model" / "model.params"),
                               str(tmp_path / "model" / "model"), {"k": 1})

