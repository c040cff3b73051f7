"""Whole jobs from a config file (job/config_file.py): a file in the seed trainer's form (every key
its trainer reads), with COCO-format data at paths of its own, trains with two Horovod ranks under a hyperparameter that
overrides it; the config.json a job writes, given back as the config file, reproduces the run."""

import json
import os
import shutil
import subprocess

from conftest import BIN, make_job, train_env, two_rank_job_finishes

SEED_YAML = """\
dataset:
  train_data:
    root: labelled/pictures/train
    annFile: labelled/labels/train.json
  val_data:
    root: {data}/labelled/pictures/val
    annFile: {data}/labelled/labels/val.json
  batch_size_per_device: 1
  num_workers: 0
train:
  lr: 0.02
  wd: 1.0e-4
  momentum: 0.9
  lr_decay: 0.1
  lr_decay_epoch: [10]
  lr_warmup_iteration: 0
  lr_warmup_factor: 0.3
  epochs: 3
  log_interval: 2
  val_interval: 1
  save_interval: 1
  gpus: [0, 1]
  kv_store: device
  start_epoch: 0
  save_prefix: faster_rcnn_resnet18_v1b_coco
  mixup: false
  no_mixup_epochs: 20
  rpn_smoothl1_rho: 0.111
  rcnn_smoothl1_rho: 1.0
  disable_hybridization: false
  static_alloc: false
  amp: false
  horovod: true
  executor_threads: 1
model:
  network: resnet18_v1b
  use_fpn: false
  norm_layer: null
  resume: null
  no_pretrained_base: true
  image_short: 128
  image_max_size: 176
  nms_thresh: 0.3
  rcnn_num_samples: 16
  num_fpn_filters: 256
  num_box_head_conv: 4
  num_box_head_conv_filters: 256
  num_box_head_dense_filters: 1024
  nms_topk: -1
  post_nms: -1
  roi_mode: align
  roi_size: [7, 7]
  strides: [4, 8, 16, 32, 64]
  clip: 4.14
  rpn_channel: 256
  anchor_base_size: 16
  anchor_aspect_ratio: [0.5, 1, 2]
  anchor_scales: [2, 4, 8, 16, 32]
  anchor_alloc_size: [384, 384]
  rpn_nms_thresh: 0.7
  rpn_train_pre_nms: 12000
  rpn_train_post_nms: 2000
  rpn_test_pre_nms: 6000
  rpn_test_post_nms: 1000
  rpn_min_size: 1
  rcnn_pos_iou_thresh: 0.5
  rcnn_pos_ratio: 0.25
  max_num_gt: 100
seed: 5
verbose: false
"""


def seed_style_job(job_dir, hyperparameters, n_train, n_test):
    """A job tree whose only inputs are the seed-style YAML in the 'config' channel and generated
    COCO-format data in a 'labelled' channel, laid out as a labelling tool might (no
    annotations/<split>.json, images in folders of their own)."""
    base = make_job(job_dir, {"dataset": "coco"}, n_train=n_train, n_test=n_test)
    data = os.path.join(base, "input", "data")
    coco, labelled = os.path.join(data, "coco"), os.path.join(data, "labelled")
    os.makedirs(os.path.join(labelled, "labels"))
    os.makedirs(os.path.join(labelled, "pictures"))
    for split, name in (("instances_train2017", "train"), ("instances_val2017", "val")):
        shutil.move(os.path.join(coco, "annotations", split + ".json"),
                    os.path.join(labelled, "labels", name + ".json"))
        shutil.move(os.path.join(coco, split.split("_")[1]), os.path.join(labelled, "pictures", name))
    shutil.rmtree(coco)
    write_config(base, "seed.yaml", SEED_YAML.format(data=data), hyperparameters)
    return base


def write_config(base, name, text, hyperparameters):
    channel = os.path.join(base, "input", "data", "config")
    os.makedirs(channel, exist_ok=True)
    with open(os.path.join(channel, name), "w") as handle:
        handle.write(text)
    with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as handle:
        json.dump(hyperparameters, handle)


def model_file(base, name):
    with open(os.path.join(base, "model", name)) as handle:
        return json.load(handle)


def learned(history):
    """The history without what the clock measured (time, speed, data-wait share, step times)."""
    clock = ("time_s", "speed", "data_wait_pct", "step_data_s", "step_forward_backward_s", "step_update_s")
    return [{k: v for k, v in epoch.items() if k not in clock} for epoch in history]


def test_a_seed_style_yaml_trains_two_ranks_under_an_overriding_hyperparameter(job_dir):
    base = seed_style_job(job_dir, {"epochs": "1"}, n_train=5, n_test=3)
    out, validation = two_rank_job_finishes(base)
    assert "config file: config/seed.yaml sets 34 hyperparameter(s); the job's hyperparameters " \
           "override epochs" in out
    assert "train.gpus=[0, 1] (ignored: the image runs one Horovod rank on every GPU it sees)" in out
    assert "train.start_epoch=0 (noted:" in out and "train.save_prefix=faster_rcnn_resnet18_v1b_coco (ignored:" in out
    assert "model.anchor_scales=[2, 4, 8, 16, 32] (ignored: it shapes the seed trainer's custom network" in out
    assert "train.kv_store=device (ignored:" in out and "model.norm_layer=None (ignored:" in out
    assert validation["images"] == 3 and set(validation["per_class"]) == {"circle", "square", "triangle"}
    effective = model_file(base, "config.json")
    assert effective["network"] == "faster_rcnn_resnet18_v1b_voc" and effective["dataset"] == "coco"
    assert effective["train_annotation_file"] == "labelled/labels/train.json"
    assert effective["val_image_dir"] == "labelled/pictures/val"
    assert (effective["epochs"], effective["world_size"], effective["global_batch"]) == (1, 2, 2)
    assert (effective["lr_decay_epoch"], effective["seed"]) == ([10], 5)


def test_the_written_config_json_given_back_as_the_config_file_reproduces_the_run(job_dir):
    first = seed_style_job(job_dir, {"epochs": "1"}, n_train=4, n_test=2)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=600,
                            env=train_env(first))
    assert result.returncode == 0, result.stdout[-3000:]
    # The replay: the same data, the first job's config.json as its only setting.
    replay = os.path.join(os.path.dirname(first), "replay")
    os.makedirs(os.path.join(replay, "input", "config"))
    shutil.copytree(os.path.join(first, "input", "data", "labelled"),
                    os.path.join(replay, "input", "data", "labelled"))
    with open(os.path.join(first, "model", "config.json")) as handle:
        write_config(replay, "config.json", handle.read(), {})
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=600,
                            env=train_env(replay))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "config file: config/config.json sets" in result.stdout
    assert "(derived: recomputed for this job's world)" in result.stdout
    assert model_file(replay, "config.json") == model_file(first, "config.json")
    # Same configuration, same seeds, same data: the same losses and the same validation.
    assert learned(model_file(replay, "history.json")) == learned(model_file(first, "history.json"))
    assert model_file(replay, "validation.json") == model_file(first, "validation.json")


def test_a_bad_config_file_fails_the_job_before_anything_starts_with_key_and_line(job_dir):
    base = make_job(job_dir, {})
    write_config(base, "bad.yaml", "train:\n  epochs: 2\n  lrr: 0.1\nmodel:\n  network: resnet50_v1\n", {})
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=300,
                            env=train_env(base))
    assert result.returncode != 0
    with open(os.path.join(base, "output", "failure")) as handle:
        failure = handle.read()
    assert failure.startswith("ConfigError: config file config/bad.yaml: line 3: train.lrr: unknown key "
                              "(did you mean 'lr'?); line 5: model.network: resnet50_v1 is neither")
    assert failure.strip() in result.stdout  # the same reason in the log
    assert "launch:" not in result.stdout and "Traceback" not in failure
