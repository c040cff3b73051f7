"""The job report: training curves PNG and the per-class AP table (Markdown + CSV)."""

import csv
import math
import os
import re
import subprocess
import sys

import numpy as np
from PIL import Image

from detector_training.core.report import write_report

CLASSES = ["circle", "square", "triangle"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAP_PURPLE = np.array([148, 103, 189])  # matplotlib's tab:purple, the colour of the mAP curve only


def epoch(n, scale=1.0, map_value=None):
    entry = {"epoch": n, "rpn_conf_loss": 0.6 * scale, "rpn_smoothl1_loss": 0.05 * scale,
             "rcnn_cls_loss": 1.1 * scale, "rcnn_smoothl1_loss": 0.4 * scale, "rpn_acc": 0.9,
             "rpn_l1": 0.3, "rcnn_acc": 0.8, "rcnn_l1": 1.0, "speed": 3.0, "time_s": 20.0,
             "lr": 0.01, "data_wait_pct": 1.0}
    if map_value is not None:
        entry["mAP"] = map_value
    return entry


LOSS_NAMES = ("rpn_conf_loss", "rpn_smoothl1_loss", "rcnn_cls_loss", "rcnn_smoothl1_loss")
HISTORY = [epoch(0, 1.0), epoch(1, 0.7, 0.21), epoch(2, 0.5), epoch(3, 0.4, 0.43)]
VALIDATION = {"mAP": 0.4321, "per_class": {"circle": 0.5, "square": 0.3963, "triangle": 0.4},
              "images": 24, "epoch": 3}


def png_pixels(path):
    with open(path, "rb") as handle:
        assert handle.read(8) == PNG_SIGNATURE
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def purple_pixels(pixels):
    return int((np.abs(pixels - MAP_PURPLE).sum(axis=-1) < 30).sum())


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def table_rows(path):
    rows = []
    for line in open(path).read().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        if line.startswith("|") and cells[0] not in ("class", "---"):
            rows.append(cells)
    return rows


def test_full_report_has_curves_and_every_class_with_the_map(tmp_path):
    paths = write_report(str(tmp_path), HISTORY, VALIDATION, CLASSES, LOSS_NAMES)
    assert sorted(os.path.basename(p) for p in paths) == [
        "per_class_ap.csv", "per_class_ap.md", "training_curves.png"]
    assert sorted(os.listdir(tmp_path)) == ["per_class_ap.csv", "per_class_ap.md",
                                            "training_curves.png"]  # no temporary files left

    curves = os.path.join(tmp_path, "training_curves.png")
    assert os.path.getsize(curves) > 10000
    pixels = png_pixels(curves)
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 600
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # a drawn chart, not a blank canvas
    # The mAP curve (purple) lies in the right-hand panel only.
    half = pixels.shape[1] // 2
    assert purple_pixels(pixels[:, half:]) > 50 and purple_pixels(pixels[:, :half]) == 0

    rows = table_rows(os.path.join(tmp_path, "per_class_ap.md"))
    assert [r[0] for r in rows] == CLASSES + ["**mAP**"]
    assert rows[0][1] == "0.5000" and rows[1][1] == "0.3963" and rows[2][1] == "0.4000"
    assert rows[-1][1] == "**0.4321**"
    assert "epoch 3 on 24 image(s)" in open(os.path.join(tmp_path, "per_class_ap.md")).read()

    table = read_csv(os.path.join(tmp_path, "per_class_ap.csv"))
    assert table[0] == ["class", "AP"]
    assert [r[0] for r in table[1:]] == CLASSES + ["mAP"]
    assert [float(r[1]) for r in table[1:]] == [0.5, 0.3963, 0.4, 0.4321]


def test_one_epoch_without_validation_still_writes_everything(tmp_path):
    model_dir = tmp_path / "model"  # created when missing
    write_report(str(model_dir), [epoch(0)], None, CLASSES, LOSS_NAMES)
    pixels = png_pixels(str(model_dir / "training_curves.png"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20
    assert purple_pixels(pixels) == 0  # no mAP point to draw
    rows = table_rows(str(model_dir / "per_class_ap.md"))
    assert rows == [["circle", "n/a"], ["square", "n/a"], ["triangle", "n/a"], ["**mAP**", "**n/a**"]]
    table = read_csv(str(model_dir / "per_class_ap.csv"))
    assert [r[0] for r in table[1:]] == CLASSES + ["mAP"]
    assert all(math.isnan(float(r[1])) for r in table[1:])


def test_one_validated_epoch_draws_its_map_point(tmp_path):
    write_report(str(tmp_path), [epoch(0, map_value=0.3)],
                 {"mAP": 0.3, "per_class": {"a": 0.3}, "images": 2, "epoch": 0}, ["a"], LOSS_NAMES)
    pixels = png_pixels(str(tmp_path / "training_curves.png"))
    assert purple_pixels(pixels[:, pixels.shape[1] // 2:]) > 10
    assert table_rows(str(tmp_path / "per_class_ap.md"))[-1] == ["**mAP**", "**0.3000**"]


def test_odd_class_names_and_missing_values_keep_the_table_intact(tmp_path):
    validation = {"mAP": float("nan"), "per_class": {"a|b": float("nan"), "c,d": 0.25, "extra": 0.5},
                  "images": 3, "epoch": 0}
    write_report(str(tmp_path), [epoch(0, map_value=float("nan"))], validation, ["a|b", "c,d", "nothing"], LOSS_NAMES)
    rows = table_rows(str(tmp_path / "per_class_ap.md"))
    assert len(rows) == 5 and all(len(r) == 2 for r in rows)  # the pipe in a name is escaped
    assert rows[0] == ["a\\|b", "n/a"] and rows[1] == ["c,d", "0.2500"] and rows[2] == ["nothing", "n/a"] and rows[3] == ["extra", "0.5000"]
    table = read_csv(str(tmp_path / "per_class_ap.csv"))
    assert [r[0] for r in table[1:]] == ["a|b", "c,d", "nothing", "extra", "mAP"]
    assert float(table[2][1]) == 0.25 and math.isnan(float(table[-1][1]))


def test_rewrite_replaces_the_files(tmp_path):
    write_report(str(tmp_path), HISTORY, VALIDATION, CLASSES, LOSS_NAMES)
    write_report(str(tmp_path), HISTORY[:1], dict(VALIDATION, mAP=0.9), CLASSES, LOSS_NAMES)
    assert table_rows(str(tmp_path / "per_class_ap.md"))[-1] == ["**mAP**", "**0.9000**"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, detector_training.core.report; sys.exit(1 if 'matplotlib' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


LR_BROWN = np.array([140, 86, 75])  # matplotlib's tab:brown, the colour of the learning-rate line only


def brown_rows(pixels):
    """The rows of the image that hold learning-rate-line pixels."""
    return np.nonzero((np.abs(pixels - LR_BROWN).sum(axis=-1) < 30).any(axis=1))[0]


def test_the_learning_rate_is_drawn_beside_the_map_and_a_decay_shows_as_a_step(tmp_path):
    decaying = [dict(epoch(n, 1.0 - 0.1 * n, 0.2 + 0.05 * n), lr=0.02 if n < 3 else 0.002)
                for n in range(5)]
    write_report(str(tmp_path / "decay"), decaying, VALIDATION, CLASSES, LOSS_NAMES)
    pixels = png_pixels(str(tmp_path / "decay" / "training_curves.png"))
    half = pixels.shape[1] // 2
    assert brown_rows(pixels[:, :half]).size == 0  # the loss panel has no lr line
    rows = brown_rows(pixels[:, half:])
    assert rows.size > 0 and rows.max() - rows.min() > pixels.shape[0] // 3  # the 10x drop: a tall step

    constant = [dict(epoch(n, 1.0 - 0.1 * n, 0.2 + 0.05 * n), lr=0.02) for n in range(5)]
    write_report(str(tmp_path / "flat"), constant, VALIDATION, CLASSES, LOSS_NAMES)
    rows = brown_rows(png_pixels(str(tmp_path / "flat" / "training_curves.png")))
    assert rows.size > 0 and rows.max() - rows.min() < 10  # one level: a flat line

    without = [{k: v for k, v in entry.items() if k != "lr"} for entry in decaying]
    write_report(str(tmp_path / "none"), without, VALIDATION, CLASSES, LOSS_NAMES)
    assert brown_rows(png_pixels(str(tmp_path / "none" / "training_curves.png"))).size == 0


def test_no_loss_curve_of_any_family_takes_the_learning_rates_colour(tmp_path):
    """Mask R-CNN logs five losses: the fifth curve must not be drawn in the lr line's brown."""
    from detector_training.families.mask_rcnn import MASK_LOSS_NAMES

    history = [dict(epoch(n, 1.0 - 0.1 * n), rcnn_mask_loss=0.7 - 0.1 * n) for n in range(4)]
    without_lr = [{k: v for k, v in entry.items() if k != "lr"} for entry in history]
    write_report(str(tmp_path), without_lr, VALIDATION, CLASSES, loss_names=MASK_LOSS_NAMES)
    assert brown_rows(png_pixels(str(tmp_path / "training_curves.png"))).size == 0


def test_the_table_has_the_ap_columns_the_caller_names(tmp_path):
    """A family's report_columns decide the table: Mask R-CNN's adds a mask AP column."""
    from detector_training.families.mask_rcnn import MaskRCNN

    validation = dict(VALIDATION, mask_mAP=0.25, mask_per_class={"circle": 0.2, "square": 0.3})
    write_report(str(tmp_path / "box"), HISTORY, validation, CLASSES, LOSS_NAMES)
    write_report(str(tmp_path / "mask"), HISTORY, validation, CLASSES, LOSS_NAMES,
                 MaskRCNN.report_columns)
    assert read_csv(str(tmp_path / "box" / "per_class_ap.csv"))[0] == ["class", "AP"]
    mask_table = read_csv(str(tmp_path / "mask" / "per_class_ap.csv"))
    assert mask_table[0] == ["class", "AP", "mask AP"]
    assert mask_table[1] == ["circle", "0.5", "0.2"] and mask_table[-1] == ["mAP", "0.4321", "0.25"]
