"""benchmarks/learning.py cannot rot: it runs each family's demo recipe (what `make run
NETWORK=...` runs) as a whole job, reads the scores the job wrote and tabulates them."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import learning  # noqa: E402 (after the path)

from detector_training import families  # noqa: E402
from detector_training.job.demo import run_hyperparameters  # noqa: E402


def test_each_family_is_measured_on_its_demo_network_and_recipe():
    assert set(learning.FAMILIES) == {family.name for family in families.all_families()}
    for family, network in learning.FAMILIES.items():
        assert families.get(network).name == family
        assert families.get(network).demo_defaults["network"] == network  # make run NETWORK=...
        assert learning.recipe(family) == run_hyperparameters({"network": network})
        assert learning.recipe(family, 2)["epochs"] == "2"


def test_a_short_run_writes_the_table_and_every_run(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "learning.py"), "--families", "yolo3",
         "--datasets", "other", "--seeds", "1", "--epochs", "1", "--images", "8",
         "--output", str(out)], capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "| yolo3 (`yolo3_mobilenet0.25_voc`) | other | **" in result.stdout
    with open(out / "learning.json") as handle:
        written = json.load(handle)
    (run,) = written["runs"]
    assert run["family"] == "yolo3" and run["dataset"] == "other" and run["epochs"] == 1
    assert 0 <= run["AP50"] <= 1 and len(run["AP50_curve"]) == 1 and run["cpu_s"] > 0
    assert set(run["per_class"]) == {"cross", "diamond", "ellipse"}  # the classes the job read
    assert run["worst_class_AP"] == min(run["per_class"].values())
    assert written["recipes"]["yolo3"]["network"] == "yolo3_mobilenet0.25_voc"
    with open(out / "yolo3" / "other" / "seed1" / "input" / "config" / "hyperparameters.json") as h:
        assert json.load(h)["seed"] == "1"


def test_every_family_has_a_floor_recipe_on_its_demo_network():
    assert set(learning.FLOORS) == {family.name for family in families.all_families()}
    for family, floor in learning.FLOORS.items():
        hyperparameters = learning.floor_recipe(family, seed=5)
        assert hyperparameters["network"] == learning.FAMILIES[family] and hyperparameters["seed"] == "5"
        assert int(hyperparameters["val_interval"]) == int(hyperparameters["epochs"])  # scored once
        assert floor["style"] in learning.DATASETS and 0 < min(floor["floors"].values()) < 1


def test_each_real_export_floor_is_its_familys_real_recipe_scored_once():
    assert learning.REAL_FLOORS
    for name, floor in learning.REAL_FLOORS.items():
        assert name in learning.REAL_EXPORTS and floor["family"] in learning.FAMILIES
        hyperparameters = learning.real_floor_recipe(name, seed=5)
        assert "dataset" not in hyperparameters  # the job recognises the export's format
        assert hyperparameters["network"] == learning.FAMILIES[floor["family"]]
        assert hyperparameters["seed"] == "5"
        assert int(hyperparameters["val_interval"]) == int(hyperparameters["epochs"])  # scored once
        assert 0 < min(floor["floors"].values()) < 1


def test_floors_measures_the_real_export_floors_of_the_families_asked_for():
    def labels(families, exports=",".join(learning.REAL_EXPORTS)):
        args = learning.argparse.Namespace(families=families, exports=exports)
        return [label for label, _recipe, _floors, _run in learning.floor_jobs(args)]

    assert labels("faster_rcnn,ssd") == ["faster_rcnn", "ssd", "faster_rcnn on raccoon-labelimg-voc"]
    assert labels("ssd") == ["ssd"]  # the raccoon floor is Faster R-CNN's
    assert labels("faster_rcnn", exports="aquarium-roboflow-yolov5") == ["faster_rcnn"]


def test_each_real_export_is_laid_out_as_its_tool_wrote_it_and_recognised(tmp_path):
    """The real-data rows (--real): each export of ../shared/data/real-exports/ unpacked into the
    'train' channel is recognised as the format the row names, and the recipe leaves `dataset`
    to that recognition."""
    from conftest import REAL_EXPORTS
    from detector_training.data import formats

    assert learning.REAL_EXPORTS_DIR == REAL_EXPORTS
    for name, fmt in learning.REAL_EXPORTS.items():
        if not os.path.isfile(os.path.join(REAL_EXPORTS, name + ".tar")):
            from conftest import real_export
            real_export(name, tmp_path / "absent")  # skips (fails under CI=true), naming the path
        base = tmp_path / name
        learning.real_export(name, str(base))
        assert formats.recognise(str(base / "input" / "data"))[:2] == (fmt, "train")
    assert "dataset" not in learning.real_recipe("yolo3") and learning.real_recipe("yolo3", 1)["epochs"] == "1"


def test_a_missing_real_export_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(learning, "REAL_EXPORTS_DIR", str(tmp_path / "nowhere"))
    try:
        learning.real_export("raccoon-labelimg-voc", str(tmp_path / "job"))
    except SystemExit as exc:
        assert "raccoon-labelimg-voc.tar is not here" in str(exc) and str(tmp_path / "nowhere") in str(exc)
    else:
        raise AssertionError("no error for a missing real export")


def test_sideways_photos_are_stored_turned_with_the_tag_and_decode_as_the_annotations_see_them(tmp_path):
    import numpy as np
    from PIL import Image

    from detector_training.data.readers import images

    picture = np.zeros((30, 60, 3), dtype=np.uint8)
    picture[:, :20] = (250, 10, 10)  # red at the left of the upright picture
    Image.fromarray(picture).save(tmp_path / "photo.jpg", quality=95)
    assert learning.store_sideways(str(tmp_path)) == 1
    with Image.open(tmp_path / "photo.jpg") as stored:
        assert stored.size == (30, 60) and stored.getexif()[learning.EXIF_ORIENTATION] == 6
    upright = images.decode(str(tmp_path / "photo.jpg"), oriented=True)
    assert upright.shape == (30, 60, 3)
    assert upright[15, 5, 0] > 200 and upright[15, 55, 0] < 60  # the red band back at the left
