"""Data wait per format: for each data format the job accepts, laid out as its tool writes it, the
share of training-step time spent waiting for the loader (what a job logs as ``data_wait=``), with
the default num_workers, on the same network and batch. The baseline is the generated VOCdevkit
of engine_overhead.py, measured in the same run: rounds alternate (baseline, format, baseline,
format, ...) so drift hits both, and each format's images/s is compared with its neighbouring
baseline rounds. Goal: the data wait stays under 5 % for every format; the script exits non-zero
when one is over.

The exports are the tests' writers (tests/exports.py, tests/builtin_exports.py,
tests/ground_truth.py): each lays a job tree out (channels and hyperparameters.json) and the
format's own ``data_root`` finds the folder it reads, as in a job.

Usage: python benchmarks/data_wait.py [--rounds 3] [--images 48] [--json out.json]
"""

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.dirname(os.path.abspath(__file__))]

import builtin_exports  # noqa: E402 (after the path)
import exports  # noqa: E402
import ground_truth  # noqa: E402
from engine_overhead import HPS, bare_loop, engine_loop, setup  # noqa: E402

from detector_training.core.distributed import SingleProcess  # noqa: E402
from detector_training.data import formats  # noqa: E402
from detector_training.data.generated.synthetic_voc import generate  # noqa: E402
from detector_training.job.config import from_hyperparameters  # noqa: E402
from detector_training.job.sm_env import Environment  # noqa: E402

GOAL_PCT = 5.0
VALIDATION = 2  # images in each export's validation split (not read while training)
SIZE = (176, 128)  # the built-in and COCO writers' images: one of the generated photos' sizes
# The network, batch and image size of engine_overhead.py, without its VOCdevkit's own settings.
COMMON = {k: v for k, v in HPS.items() if k not in ("dataset", "train_splits")}


def _labelimg(base, n):
    return exports.job(base, dict(COMMON, dataset="custom"), {
        "train": lambda d: exports.labelimg_beside(d, count=n),
        "validation": lambda d: exports.labelimg_beside(d, count=VALIDATION, seed=5)})


def _cvat_voc(base, n):
    return exports.job(base, dict(COMMON, dataset="custom"), {
        "train": lambda d: exports.cvat_voc(os.path.join(d, "task_1"),
                                            subsets=(("Train", n), ("Validation", VALIDATION)))})


def _ultralytics(base, n):
    return exports.job(base, dict(COMMON, dataset="yolo"), {
        "train": lambda d: exports.ultralytics_yolo(d, train=n, val=VALIDATION, unlabelled=())})


def _roboflow_coco(base, n):
    # Boxes only (empty segmentation): the Faster R-CNN network reads COCO's boxes.
    return exports.job(base, dict(COMMON, dataset="coco"), {
        "train": lambda d: builtin_exports.roboflow_coco(d, {
            "train": builtin_exports.sample_objects(n, SIZE),
            "valid": builtin_exports.sample_objects(VALIDATION, SIZE)})})


def _manifest(base, n):
    # skip_empty=false: the labelling job's image without boxes trains too (as many images as
    # the other rows)
    ground_truth.file_mode_job(base, dict(COMMON, dataset="manifest", skip_empty="false"), count=n,
                               validation=VALIDATION)
    return base


def _builtin_json(base, n):
    builtin_exports.builtin_json_channels(os.path.join(base, "input", "data"), n_train=n,
                                          n_val=VALIDATION, size=SIZE)
    channels = ("train", "train_annotation", "validation", "validation_annotation")
    ground_truth.write_config(base, dict(COMMON, dataset="builtin"),
                              {c: ground_truth.FILE_CHANNEL for c in channels})
    return base


def _builtin_recordio(base, n):
    builtin_exports.builtin_recordio_channels(os.path.join(base, "input", "data"),
                                              base + "-im2rec", n_train=n, n_val=VALIDATION,
                                              size=SIZE)
    ground_truth.write_config(base, dict(COMMON, dataset="builtin", classes="dog,cat"),
                              {c: ground_truth.FILE_CHANNEL for c in ("train", "validation")})
    return base


# (row label, job tree writer). The baseline (generated VOCdevkit) is laid out by lay_out_baseline.
FORMATS = [
    ("labelImg Pascal VOC XML beside each photo (dataset=custom)", _labelimg),
    ("CVAT Pascal VOC 1.1 (dataset=custom)", _cvat_voc),
    ("Ultralytics YOLO (dataset=yolo)", _ultralytics),
    ("Roboflow COCO, boxes only (dataset=coco)", _roboflow_coco),
    ("Ground Truth augmented manifest, File mode (dataset=manifest)", _manifest),
    ("built-in algorithm, image format JSON (dataset=builtin)", _builtin_json),
    ("built-in algorithm, RecordIO .rec (dataset=builtin)", _builtin_recordio),
]
BASELINE = "generated VOCdevkit (dataset=custom): the baseline"


def lay_out_baseline(base, n):
    """engine_overhead.py's input: (hyperparameters, the folder read)."""
    root = os.path.join(base, "VOCdevkit-root")
    generate(root, train_2007=n, test_2007=VALIDATION, train_2012=0, seed=11)
    return HPS, root


def lay_out(writer, base, n):
    """A format's job tree under ``base``: (hyperparameters, the folder its reader reads, found by
    the format's data_root as a job finds it)."""
    writer(base, n)
    env = Environment.read(base)
    hps = env.hyperparameters
    config = from_hyperparameters(hps)
    root = formats.get(config.dataset).data_root(config, env, SingleProcess().world)
    return hps, root


class Runner:
    """One format's network, loader and trainer (default num_workers); ``round`` trains one
    epoch through the Engine: (images/s, data wait %)."""

    def __init__(self, hps, root, n, workers):
        self.parts = setup(root, workers, n, hps)
        self.rounds = 0
        config, _, net, loader, _, _, trainer, per_rank, self.steps = self.parts
        # warm-up (graph build, allocations), within one pass of the loader
        bare_loop(net, loader, trainer, per_rank, min(4, self.steps), config)

    def round(self):
        speed, wait = engine_loop(*self.parts, self.rounds)
        self.rounds += 1
        return speed, wait

    def close(self):
        self.parts = None
        gc.collect()


def measure(rounds, n, workers, base, only=None, progress=print):
    """Every format's rounds against the baseline's: {label: {"images_per_s": [...],
    "data_wait_pct": [...], "baseline_images_per_s": [...]}} (the baseline under BASELINE)."""
    hps, root = lay_out_baseline(base, n)
    baseline = Runner(hps, root, n, workers)
    result = {BASELINE: {"images_per_s": [], "data_wait_pct": [], "steps": baseline.steps}}

    def baseline_round():
        speed, wait = baseline.round()
        result[BASELINE]["images_per_s"].append(speed)
        result[BASELINE]["data_wait_pct"].append(wait)
        return speed

    for label, writer in FORMATS:
        if only is not None and label not in only:
            continue
        hps, root = lay_out(writer, os.path.join(base, writer.__name__.strip("_")), n)
        runner = Runner(hps, root, n, workers)
        row = result[label] = {"images_per_s": [], "data_wait_pct": [], "baseline_images_per_s": [],
                               "steps": runner.steps}
        for _ in range(rounds):
            before = baseline_round()
            speed, wait = runner.round()
            after = baseline_round()
            row["images_per_s"].append(speed)
            row["data_wait_pct"].append(wait)
            row["baseline_images_per_s"].append((before + after) / 2)
        runner.close()
        progress("%s: data wait %s %%" % (label, ", ".join("%.2f" % w for w in row["data_wait_pct"])))
    baseline.close()
    return result


def summary(result):
    """Per row: median data wait %, median images/s, median ratio to the neighbouring baseline
    rounds, within the goal."""
    rows = {}
    for label, row in result.items():
        ratios = [s / b for s, b in zip(row["images_per_s"], row.get("baseline_images_per_s",
                                                                     row["images_per_s"]))]
        wait = statistics.median(row["data_wait_pct"])
        rows[label] = {"data_wait_pct": round(wait, 2),
                       "images_per_s": round(statistics.median(row["images_per_s"]), 2),
                       "ratio_to_baseline": round(statistics.median(ratios), 3),
                       "within_goal": wait < GOAL_PCT}
    return rows


def table(rows, rounds):
    lines = ["| format, laid out as its tool writes it | data wait, %% of step time (median of %d "
             "rounds) | images/s | images/s ratio to the baseline | under %g %% |" % (rounds, GOAL_PCT),
             "|---|---|---|---|---|"]
    for label, row in rows.items():
        lines.append("| %s | **%.2f %%** | %.1f | %.3f | %s |" % (
            label, row["data_wait_pct"], row["images_per_s"], row["ratio_to_baseline"],
            "pass" if row["within_goal"] else "FAIL"))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    workers = from_hyperparameters({}).num_workers
    with tempfile.TemporaryDirectory(prefix="bench-data-wait-") as base:
        result = measure(args.rounds, args.images, workers, base,
                         progress=lambda line: print(line, file=sys.stderr, flush=True))
    rows = summary(result)
    print("num_workers=%d (the default), %d training images per format, %d CPUs"
          % (workers, args.images, os.cpu_count()))
    print(table(rows, args.rounds))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rounds": result, "summary": rows, "num_workers": workers,
                       "images": args.images, "cpus": os.cpu_count()}, handle, indent=1)
    return 0 if all(row["within_goal"] for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
