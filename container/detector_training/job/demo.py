"""``detector-run`` (``make run``): a SageMaker-style tree with generated data and CPU-sized
hyperparameters, then the very same job through the container's ``train``: in this process for
one rank, through mpirun for ``processes_per_host`` > 1."""

import argparse
import json
import os

from detector_training import families
from detector_training.data import formats
from detector_training.families.base import DetectorFamily

DEFAULT_NETWORK = "faster_rcnn_resnet18_v1b_voc"  # `make run` without --set network=...
DEMO_IMAGES = DetectorFamily.demo_images  # the generated dataset's size unless a family differs


def _family(hyperparameters):
    """The family of the network asked for (None for a name the job will refuse)."""
    network = str(hyperparameters.get("network", DEFAULT_NETWORK)).strip('"')
    return families.get(network) if network in families.network_names() else None


def run_hyperparameters(overrides):
    """The default network's family's demo defaults, then those of the family of the network
    asked for, then ``overrides``."""
    family = _family(overrides)
    return {**families.get(DEFAULT_NETWORK).demo_defaults,
            **(family.demo_defaults if family else {}), **overrides}


def run_images(hyperparameters):
    """The generated dataset's size for the family of the network asked for."""
    return (_family(hyperparameters) or DetectorFamily()).demo_images


def prepare_run_tree(base, hyperparameters, n_train=DEMO_IMAGES["n_train"],
                     n_test=DEMO_IMAGES["n_test"], n_train_2012=DEMO_IMAGES["n_train_2012"], seed=0):
    """A SageMaker-style tree with generated data in the configured format's channel (a VOCdevkit
    in the 'voc' channel; for dataset=coco a COCO-format dataset with its own categories in the
    'coco' channel)."""
    name = str(hyperparameters.get("dataset", "")).strip('"')
    # An unknown name gets VOC data here; the job's configuration then refuses the name.
    formats.get(name if name in formats.names() else "custom").generate(os.path.join(base, "input", "data"), n_train, n_test, n_train_2012,
                               seed)
    config_dir = os.path.join(base, "input", "config")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "hyperparameters.json"), "w") as handle:
        json.dump({k: str(v) for k, v in hyperparameters.items()}, handle, indent=1)
    return base


def run_cli(train, argv=None):
    """``detector-run``: prepare the tree, run ``train()`` (the container's ``train``, wired by
    detector_training.commands) on it; the exit code."""
    parser = argparse.ArgumentParser(
        description="Generate a small dataset (VOC-format; COCO-format with dataset=coco or a "
                    "mask_rcnn_* network) and run the training job on it (CPU).")
    parser.add_argument("--output", default="out/run", help="directory for the job tree")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a hyperparameter (repeatable)")
    args = parser.parse_args(argv)
    hyperparameters = run_hyperparameters(dict(item.partition("=")[::2] for item in args.set))
    base = os.path.abspath(args.output)
    prepare_run_tree(base, hyperparameters, **run_images(hyperparameters))
    os.environ["SAGEMAKER_BASE_DIR"] = base  # where `train` reads the job
    code = train()
    model_dir = os.path.join(base, "model")
    if code == 0:
        print("model directory: %s" % model_dir)
        print("files: %s" % ", ".join(sorted(os.listdir(model_dir))))
    else:
        print("job failed; reason in %s" % os.path.join(base, "output", "failure"))
    return code
