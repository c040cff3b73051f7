"""Learning benchmark: how far each detector family gets in a fixed CPU budget.

For every family in FAMILIES, every generated dataset in DATASETS and every seed: generate a
dataset (the seed draws the images and seeds the training), train the family's network from
scratch for its fixed number of epochs (the budget), and read the held-out mAP the job itself
writes (``model/validation.json``: VOC07 mAP on the generated test split). Each job runs as
``detector-train-job`` in a fresh process; its CPU seconds (user + system, this machine) and wall
seconds are recorded next to the mAP. The table shows the median over seeds; the JSON keeps every
run.

The two datasets: ``demo`` is what ``make run`` trains on (circles, squares, triangles in random
colours, square boxes of 1/5 to 1/2 of the shorter image side); ``other`` has ellipses, crosses
and diamonds from a fixed palette, smaller (1/8 to 1/3) and elongated boxes, up to 4 objects.

A family is a table entry: its network, the hyperparameters it trains with (the demo preset of
``make run`` with the benchmark's shorter schedule), which generator makes its data and how many
images (Mask R-CNN: the COCO-format generator with masks, and ``make run-mask``'s 72 training
images, since its step costs about five times Faster R-CNN's), and the scores read (box mAP; Mask
R-CNN also mask mAP: COCO's AP at IoU 0.50:0.95, not VOC07's at 0.5).

Usage: python benchmarks/learning.py [--seeds 3] [--families faster_rcnn,yolo3,ssd,mask_rcnn] [--images N] [--output out/bench-learning]
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from detector_training.families.ssd import SSD
from detector_training.job.demo import prepare_run_tree, run_hyperparameters
from detector_training.data.synthetic_coco import generate as generate_coco
from detector_training.data.synthetic_voc import generate as generate_voc

BIN = os.path.dirname(sys.executable)


def voc_channel(base, style, seed, n_train, n_test):
    """A generated VOCdevkit in the tree's 'voc' channel (2007 trainval + test, no 2012)."""
    generate_voc(os.path.join(base, "input", "data", "voc"), n_train, n_test, 0, seed=seed,
                 style=style)


def coco_channel(base, style, seed, n_train, n_test):
    """A generated COCO-format instance dataset (boxes and masks) in the tree's 'coco' channel."""
    generate_coco(os.path.join(base, "input", "data", "coco"), n_train, n_test, seed=seed,
                  style=style)


# Which generator makes a family's data: kind -> (base, style, seed, n_train, n_test) -> None.
GENERATORS = {"voc": voc_channel, "coco": coco_channel}

# Generated datasets: name -> generator style.
DATASETS = {"demo": "shapes", "other": "other"}


def faster_rcnn_hyperparameters(epochs):
    """The demo preset of `make run` (cosine decay to zero, so no lr_decay_epoch), trained for
    `epochs`; validation every 4th epoch and after the last (the job's mAP is the last one)."""
    return dict(run_hyperparameters({}), epochs=str(epochs), train_splits="2007_trainval", log_interval="50")


def yolo3_hyperparameters(epochs):
    """The README's YOLOv3 CPU settings (128x128, batch 8, cosine schedule, clipped gradients)."""
    return dict(run_hyperparameters({}), network="yolo3_mobilenet0.25_voc", short="128", batch_size="8",
                lr="0.004", lr_base_batch_size="8", lr_warmup="30", lr_mode="cosine",
                clip_gradient="5", epochs=str(epochs), lr_decay_epoch=str(max(1, epochs - 1)),
                train_splits="2007_trainval", log_interval="100")


def mask_rcnn_hyperparameters(epochs):
    """`make run-mask`'s preset (ResNet-18 FPN from scratch, 128 sampled RoIs, lr 0.02 at batch 2),
    with the decay in the last epoch."""
    return dict(run_hyperparameters({"network": "mask_rcnn_fpn_resnet18_v1b_coco"}),
                epochs=str(epochs), lr_decay_epoch=str(max(1, epochs - 1)), log_interval="50")


def ssd_hyperparameters(epochs):
    """`make run-ssd`'s preset (the SSD family's demo defaults: MobileNet 1.0 SSD at 128 pixels,
    batch 8, cosine schedule with warm-up), trained for `epochs`."""
    return dict(run_hyperparameters({"network": "ssd_512_mobilenet1.0_voc"}), epochs=str(epochs),
                train_splits="2007_trainval", log_interval="50")


# epochs: the family's budget, sized so that a run costs about the same CPU time: Faster R-CNN's
# small network (stride 8, stage 3 per RoI) 8 epochs, YOLOv3 at 128 pixels 12. Mask R-CNN gets
# `make run-mask`'s 4 epochs of 72 images (about three times the CPU time): with the others'
# budget it would stop in its first epoch, where its scores are still at chance.
FAMILIES = {
    "faster_rcnn": dict(network="faster_rcnn_resnet18_v1b_voc", epochs=8,
                        hyperparameters=faster_rcnn_hyperparameters, data="voc"),
    "yolo3": dict(network="yolo3_mobilenet0.25_voc", epochs=12,
                  hyperparameters=yolo3_hyperparameters, data="voc"),
    # SSD: `make run-ssd`'s whole schedule, which is sized to about the time of `make run`.
    "ssd": dict(network="ssd_512_mobilenet1.0_voc", epochs=int(SSD.demo_defaults["epochs"]),
                hyperparameters=ssd_hyperparameters, data="voc"),
    "mask_rcnn": dict(network="mask_rcnn_fpn_resnet18_v1b_coco", epochs=4,
                      hyperparameters=mask_rcnn_hyperparameters, data="coco", images=72,
                      test_images=24, scores=("mAP", "mask_mAP")),
}


def run_one(base, family, dataset, seed, args):
    spec = FAMILIES[family]
    if os.path.isdir(base):
        shutil.rmtree(base)
    GENERATORS[spec["data"]](base, DATASETS[dataset], seed, args.images or spec.get("images", 120),
                             args.test_images or spec.get("test_images", 32))
    epochs = args.epochs or spec["epochs"]
    hyperparameters = dict(spec["hyperparameters"](epochs), network=spec["network"], seed=str(seed))
    prepare_run_tree(base, hyperparameters)  # the data is there already: writes the config only
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.path.join(base, "job.log"), "w") as log:
        code = subprocess.run([os.path.join(BIN, "detector-train-job"), "--base-dir", base],
                              stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit("%s/%s seed %d failed (exit %d); see %s" % (
            family, dataset, seed, code, os.path.join(base, "job.log")))
    with open(os.path.join(base, "model", "validation.json")) as handle:
        final = json.load(handle)
    with open(os.path.join(base, "model", "history.json")) as handle:
        history = json.load(handle)
    scores = spec.get("scores", ("mAP",))
    run = {"family": family, "dataset": dataset, "seed": seed, "epochs": epochs}
    for score in scores:
        run[score] = final[score]
        run["best_" + score] = max(e[score] for e in history if score in e)
        run[score + "_curve"] = [round(e[score], 4) for e in history if score in e]
    return dict(run,
                cpu_s=round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
                wall_s=round(wall, 1))


def summarise(runs):
    rows = []
    for family in FAMILIES:
        for dataset in DATASETS:
            mine = [r for r in runs if r["family"] == family and r["dataset"] == dataset]
            if mine:
                masks = "mask_mAP" in mine[0]
                rows.append({"family": family, "dataset": dataset, "seeds": len(mine),
                             "median_mAP": statistics.median(r["mAP"] for r in mine),
                             "mAPs": [round(r["mAP"], 4) for r in mine],
                             "median_mask_mAP": statistics.median(r["mask_mAP"] for r in mine)
                             if masks else None,
                             "mask_mAPs": [round(r["mask_mAP"], 4) for r in mine] if masks else None,
                             "median_cpu_s": statistics.median(r["cpu_s"] for r in mine),
                             "median_wall_s": statistics.median(r["wall_s"] for r in mine)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per family and dataset (median)")
    parser.add_argument("--epochs", type=int, default=0,
                        help="training epochs per run for every family (default: each family's budget)")
    parser.add_argument("--images", type=int, default=0,
                        help="generated training images per run (default: 120; Mask R-CNN 72)")
    parser.add_argument("--test-images", type=int, default=0,
                        help="generated held-out images per run (default: 32; Mask R-CNN 24)")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated")
    parser.add_argument("--output", default="out/bench-learning", help="job trees and learning.json")
    args = parser.parse_args(argv)
    runs = []
    for family in args.families.split(","):
        for dataset in args.datasets.split(","):
            for seed in range(1, args.seeds + 1):
                base = os.path.abspath(os.path.join(args.output, family, dataset, "seed%d" % seed))
                run = run_one(base, family, dataset, seed, args)
                masks = " mask_mAP %.4f (best %.4f)" % (run["mask_mAP"], run["best_mask_mAP"]) \
                    if "mask_mAP" in run else ""
                print("%-12s %-6s seed %d: mAP %.4f (best %.4f)%s cpu %.0f s wall %.0f s" % (
                    family, dataset, seed, run["mAP"], run["best_mAP"], masks, run["cpu_s"],
                    run["wall_s"]), flush=True)
                runs.append(run)
    rows = summarise(runs)
    print("\n| family | dataset | median mAP (%d seeds) | mAPs | median mask mAP | mask mAPs "
          "| median CPU s | median wall s |" % args.seeds)
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        masks = ("%.4f" % row["median_mask_mAP"], ", ".join("%.4f" % m for m in row["mask_mAPs"])) \
            if row["median_mask_mAP"] is not None else ("-", "-")
        print("| %s | %s | %.4f | %s | %s | %s | %.0f | %.0f |" % (
            row["family"], row["dataset"], row["median_mAP"], ", ".join("%.4f" % m for m in row["mAPs"]),
            *masks, row["median_cpu_s"], row["median_wall_s"]))
    budget = {"epochs": {f: args.epochs or FAMILIES[f]["epochs"] for f in args.families.split(",")},
              "train_images": {f: args.images or FAMILIES[f].get("images", 120)
                               for f in args.families.split(",")},
              "test_images": {f: args.test_images or FAMILIES[f].get("test_images", 32)
                              for f in args.families.split(",")}}
    path = os.path.join(args.output, "learning.json")
    with open(path, "w") as handle:
        json.dump({"budget": budget, "cores": os.cpu_count(), "summary": rows, "runs": runs}, handle, indent=1)
    print("written: %s" % path)


if __name__ == "__main__":
    main()
