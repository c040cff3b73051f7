"""The config file as input (job/config_file.py): the seed trainer's sections and the flat form,
hyperparameters over the file, every bad-file case with its key, line and nearest name, and the
round trip of the effective configuration a job writes."""

import json
import logging
import os

import pytest

from detector_training.errors import ConfigError
from detector_training.job import config as cfg
from detector_training.job.config_file import hyperparameters_over_file, load_config, read_config_file
from detector_training.job.sm_env import Environment

SEED_YAML = """\
# a file written for the seed trainer
dataset:
  train_data:
    root: coco/pictures/train
    annFile: coco/labels/train.json
  val_data:
    root: {channels}/coco/pictures/val
    annFile: {channels}/coco/labels/val.json
  batch_size_per_device: 2
  num_workers: 1
train:
  lr: 0.02
  wd: 1.0e-4
  momentum: 0.85
  lr_decay: 0.5
  lr_decay_epoch: [3, 5]
  lr_warmup_iteration: 10
  lr_warmup_factor: 0.25
  rpn_smoothl1_rho: 0.2
  rcnn_smoothl1_rho: 0.9
  epochs: 6
  log_interval: 5
  val_interval: 2
  save_interval: 3
  gpus: [0, 1, 2, 3]
  kv_store: nccl
model:
  network: resnet50_v1b
  use_fpn: true
  norm_layer: syncbn
  resume: ''
  rcnn_num_samples: 64
seed: 11
verbose: true
"""


def job(tmp_path, hyperparameters=None, files=None):
    """A job tree: hyperparameters.json and ``files`` (path under input/data -> text)."""
    base = tmp_path / "opt_ml"
    (base / "input" / "config").mkdir(parents=True)
    (base / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hyperparameters or {}))
    for relative, text in (files or {}).items():
        path = base / "input" / "data" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Environment.read(str(base), environ={})


def channels(env):
    return env.paths.channels_dir


def seed_job(tmp_path, hyperparameters=None):
    env = job(tmp_path, hyperparameters, {"config/seed.yaml": ""})
    with open(os.path.join(channels(env), "config", "seed.yaml"), "w") as handle:
        handle.write(SEED_YAML.format(channels=channels(env)))
    return env


def test_the_seed_trainers_sections_build_the_typed_configuration(tmp_path, caplog):
    caplog.set_level(logging.INFO, "detector_training")
    config = load_config(seed_job(tmp_path))
    assert config.network == "faster_rcnn_fpn_resnet50_v1b_coco"  # backbone + use_fpn, COCO heads
    assert config.dataset == "coco"
    assert (config.train_annotation_file, config.train_image_dir) == ("coco/labels/train.json",
                                                                      "coco/pictures/train")
    # absolute paths inside the channels become relative to them (config.json stays portable)
    assert (config.val_annotation_file, config.val_image_dir) == ("coco/labels/val.json",
                                                                  "coco/pictures/val")
    assert config.batch_size is None and config.batch_size_per_device == 2
    assert config.global_batch(world_size=4) == 8 and config.per_rank_batch(4) == 2
    assert (config.lr, config.wd, config.momentum, config.lr_decay) == (0.02, 1e-4, 0.85, 0.5)
    assert config.lr_decay_epoch == (3, 5) and config.lr_warmup == 10
    assert (config.lr_warmup_factor, config.rpn_smoothl1_rho, config.rcnn_smoothl1_rho) == (0.25, 0.2, 0.9)
    assert (config.epochs, config.log_interval, config.val_interval, config.save_interval) == (6, 5, 2, 3)
    assert (config.num_workers, config.rcnn_num_samples, config.seed, config.verbose) == (1, 64, 11, True)
    assert config.kv_store == "device"  # train.kv_store is noted, not used
    log = caplog.text
    assert "train.gpus=[0, 1, 2, 3] (ignored: the image runs one Horovod rank on every GPU" in log
    assert "train.kv_store=nccl (ignored: the ranks average gradients with Horovod's allreduce" in log
    assert "model.norm_layer=syncbn (ignored:" in log
    assert "config file: config/seed.yaml sets 24 hyperparameter(s); the job's hyperparameters " \
           "override none of them" in log


# Every key GluonCV's train_faster_rcnn.py reads (its flags, its custom-model options), in the
# seed trainer's sections, at values other than the defaults where the image uses them.
SEED_COMPLETE_YAML = """\
dataset:
  dataset: coco
  train_data: {root: coco/pictures/train, annFile: coco/labels/train.json}
  val_data: {root: coco/pictures/val, annFile: coco/labels/val.json}
  batch_size_per_device: 2
  num_workers: 1
train:
  gpus: [0, 1]
  epochs: 6
  start_epoch: 0
  lr: 0.02
  lr_decay: 0.5
  lr_decay_epoch: [3, 5]
  lr_warmup_iteration: 10
  lr_warmup_factor: 0.25
  momentum: 0.85
  wd: 1.0e-4
  log_interval: 5
  save_prefix: faster_rcnn_resnet50_v1b_coco
  save_interval: 3
  val_interval: 2
  mixup: true
  no_mixup_epochs: 2
  rpn_smoothl1_rho: 0.2
  rcnn_smoothl1_rho: 0.9
  disable_hybridization: true
  static_alloc: true
  amp: false
  horovod: true
  executor_threads: 2
  kv_store: nccl
model:
  network: resnet50_v1b
  use_fpn: true
  norm_layer: null
  resume: ''
  no_pretrained_base: true
  num_fpn_filters: 256
  num_box_head_conv: 4
  num_box_head_conv_filters: 256
  num_box_head_dense_filters: 1024
  image_short: [640, 800]
  image_max_size: 1333
  nms_thresh: 0.4
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
  rcnn_num_samples: 256
  rcnn_pos_iou_thresh: 0.5
  rcnn_pos_ratio: 0.25
  max_num_gt: 100
seed: 11
verbose: true
"""


def test_every_key_the_seed_trainer_reads_is_accepted_with_its_meaning_or_noted(tmp_path, caplog):
    caplog.set_level(logging.INFO, "detector_training")
    env = job(tmp_path, {}, {"config/seed.yaml": SEED_COMPLETE_YAML})
    config = load_config(env)
    assert config.network == "faster_rcnn_fpn_resnet50_v1b_coco" and config.dataset == "coco"
    assert (config.epochs, config.lr, config.lr_decay, config.lr_decay_epoch) == (6, 0.02, 0.5, (3, 5))
    assert (config.lr_warmup, config.lr_warmup_factor, config.momentum, config.wd) == (10, 0.25, 0.85, 1e-4)
    assert (config.log_interval, config.save_interval, config.val_interval) == (5, 3, 2)
    assert (config.mixup, config.no_mixup_epochs) == (True, 2)
    assert (config.rpn_smoothl1_rho, config.rcnn_smoothl1_rho) == (0.2, 0.9)
    assert (config.disable_hybridization, config.static_alloc, config.amp, config.executor_threads) == \
        (True, True, False, 2)
    assert config.pretrained_base is False  # model.no_pretrained_base: true
    assert (config.short, config.max_size, config.nms_threshold) == ((640, 800), 1333, 0.4)
    assert (config.rcnn_num_samples, config.seed, config.verbose) == (256, 11, True)
    assert (config.batch_size_per_device, config.num_workers) == (2, 1)
    log = caplog.text
    assert "train.start_epoch=0 (noted: a job starts at epoch 0, or resumes from its checkpoints at " \
           "their epoch)" in log
    assert "train.save_prefix=faster_rcnn_resnet50_v1b_coco (ignored: the model goes to /opt/ml/model" in log
    assert "train.horovod=True (ignored: the image always runs its ranks under Horovod)" in log
    for key in ("num_fpn_filters", "roi_mode", "strides", "anchor_scales", "rpn_train_pre_nms",
                "rcnn_pos_iou_thresh", "max_num_gt", "nms_topk", "post_nms", "clip"):
        assert "model.%s=" % key in log and "(ignored: it shapes the seed trainer's custom network" in log
    noted = {line.split("=")[0].split()[-1] for line in log.splitlines() if "(ignored:" in line or "(noted:" in line}
    assert len(noted) == 30  # gpus, kv_store, horovod, save_prefix, start_epoch, norm_layer, 24 custom
    assert "sets 34 hyperparameter(s)" in log


def test_a_start_epoch_other_than_0_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(job(tmp_path, {}, {"config/seed.yaml": "train:\n  start_epoch: 7\n"}))
    assert "line 2: train.start_epoch: 7: a job starts at epoch 0, or resumes from its checkpoints at " \
           "their epoch; a model to start from is the 'model' channel" in str(err.value)


@pytest.mark.parametrize("text, expected", [
    ("train:\n  start_epok: 0\n", "line 2: train.start_epok: unknown key (did you mean 'start_epoch'?)"),
    ("train:\n  save_prefx: x\n", "line 2: train.save_prefx: unknown key (did you mean 'save_prefix'?)"),
    ("train:\n  begin_epoch: 0\n", "line 2: train.begin_epoch: unknown key."),  # nothing is near
    ("statc_alloc: true\n", "line 1: statc_alloc: unknown key (did you mean 'static_alloc'?)"),
])
def test_a_suggestion_is_made_only_for_a_near_name(tmp_path, text, expected):
    with pytest.raises(ConfigError) as err:
        load_config(job(tmp_path, {}, {"config/c.yaml": text}))
    assert expected in str(err.value)


def test_hyperparameters_override_the_file(tmp_path, caplog):
    caplog.set_level(logging.INFO, "detector_training")
    config = load_config(seed_job(tmp_path, {"lr": "0.005", "epochs": "\"2\"", "batch_size": "4",
                                             "batch_size_per_device": "null"}))
    assert (config.lr, config.epochs, config.global_batch(2)) == (0.005, 2, 4)
    assert config.momentum == 0.85  # the rest from the file
    assert "override batch_size_per_device, epochs, lr" in caplog.text


def test_the_flat_form_uses_the_hyperparameter_names(tmp_path):
    env = job(tmp_path, {"config_file": "\"coco/experiment.json\""}, {
        "coco/experiment.json": json.dumps({"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom",
                                            "classes": ["cat", "dog"], "lr_decay_epoch": [4],
                                            "train_splits": "2007_trainval", "batch_size": 4}),
        "config/ignored-when-config_file-is-given.yaml": "lr: [not a number]"})
    config = load_config(env)
    assert (config.network, config.dataset, config.classes) == ("faster_rcnn_resnet18_v1b_voc", "custom",
                                                                ("cat", "dog"))
    assert config.lr_decay_epoch == (4,) and config.batch_size == 4


def test_no_config_file_leaves_the_hyperparameters_alone(tmp_path):
    env = job(tmp_path, {"lr": "0.1", "processes_per_host": "2"})
    assert hyperparameters_over_file(env) == {"lr": "0.1", "processes_per_host": "2"}


def test_the_effective_configuration_given_back_reproduces_the_configuration(tmp_path):
    """config.json (resolved: every field plus the derived values) read as a config file builds
    the same configuration, in the same world."""
    first = load_config(seed_job(tmp_path / "first", {"lr": "0.03"}))
    written = first.resolved(world_size=3)
    env = job(tmp_path / "replay", {}, {"config/config.json": json.dumps(written, indent=1, sort_keys=True)})
    again = load_config(env)
    assert again == first
    assert again.resolved(world_size=3) == written


def problems_of(tmp_path, text, name="config/bad.yaml", hyperparameters=None):
    env = job(tmp_path, hyperparameters, {name: text})
    with pytest.raises(ConfigError) as raised:
        load_config(env)
    return str(raised.value)


@pytest.mark.parametrize("text, expected", [
    # unknown keys, with the nearest valid name, in a section and at the top
    ("train:\n  epochs: 2\n  lrr: 0.1\n", "line 3: train.lrr: unknown key (did you mean 'lr'?)"),
    ("epoch: 2\n", "line 1: epoch: unknown key (did you mean 'epochs'?)"),
    ("dataset:\n  train_data:\n    annFile: a.json\n    rot: x\n",
     "line 4: dataset.train_data.rot: unknown key (did you mean 'root'?)"),
    ("model:\n  network: resnet18_v1b\n  num_sampels: 3\n",
     "line 3: model.num_sampels: unknown key"),
    # wrong types and values
    ("train:\n  lr: fast\n", "line 2: train.lr: fast: expected a number"),
    ("train:\n  lr_decay_epoch: {a: 1}\n", "line 2: train.lr_decay_epoch: {'a': 1}: expected a list of integers"),
    ("verbose: maybe\n", "line 1: verbose: maybe: expected a boolean"),
    ("train: [1, 2]\n", "line 1: train: [1, 2]: expected"),
    ("model:\n  network: resnet50_v1\n", "line 2: model.network: resnet50_v1 is neither a network "
                                          "name nor a backbone of one (did you mean 'resnet50_v1b'?)"),
    ("model:\n  network: faster_rcnn_fpn_resnet50_v1b_coco\n  use_fpn: false\n",
     "line 2: model.network: faster_rcnn_fpn_resnet50_v1b_coco is neither"),
    ("model:\n  use_fpn: true\n", "line 2: model.use_fpn: needs model.network"),
    ("model:\n  network: resnet18_v1b\n  resume: /opt/ml/model/x.params\n",
     "line 3: model.resume: /opt/ml/model/x.params: a job resumes from its checkpoints by itself"),
    ("dataset:\n  val_data:\n    root: coco\n", "line 2: dataset.val_data: has no annFile"),
    ("dataset:\n  train_data:\n    annFile: ../../secret.json\n",
     "line 3: dataset.train_data.annFile: ../../secret.json lies outside the job's channels"),
    ("processes_per_host: 2\n", "line 1: processes_per_host: is a launch setting"),
    # one hyperparameter set twice through two names
    ("lr: 0.1\ntrain:\n  lr: 0.2\n", "line 3: train.lr: sets lr, which line 1 (lr) sets already"),
    ("lr_warmup: 5\ntrain:\n  lr_warmup_iteration: 5\n", "line 3: train.lr_warmup_iteration: sets lr_warmup"),
    # the file's own shape
    ("train:\n  lr: 0.1\n  lr: 0.2\n", "line 3: key 'lr' is given twice (lines 2 and 3)"),
    ("base: &b 0.1\nlr: *b\n", "line 2: aliases (*b) are not accepted"),
    ("- lr\n- 0.1\n", "holds a list, not a mapping"),
    ("", "holds nothing, not a mapping"),
    ("train:\n  lr: [0.1\n", "line 3: expected ',' or ']'"),
    ("!!python/object/apply:os.system ['true']\n", "line 1: could not determine a constructor"),
    ("1: 2\n", "line 1: key 1 is not a name"),
])
def test_each_bad_file_names_the_key_its_line_and_the_nearest_name(tmp_path, text, expected):
    message = problems_of(tmp_path, text)
    assert message.startswith("ConfigError: config file config/bad.yaml")
    assert expected in message


def test_all_problems_of_a_file_are_reported_together(tmp_path):
    message = problems_of(tmp_path, "train:\n  lrr: 1\n  epochs: x\nmodel:\n  netwrk: a\n")
    for expected in ("line 2: train.lrr", "line 3: train.epochs", "line 5: model.netwrk"):
        assert expected in message


def test_json_files_get_lines_too_and_duplicate_keys_are_errors(tmp_path):
    message = problems_of(tmp_path, '{\n "lr": 0.1,\n "epochs": 2,\n "lr": 0.2\n}\n', "config/c.json")
    assert "line 4: key 'lr' is given twice (lines 2 and 4)" in message


@pytest.mark.parametrize("nested", ["train: " + "[" * 20000 + "]" * 20000,
                                    "train: " + "{a: " * 5000 + "1" + "}" * 5000,
                                    '{"train": ' + "[" * 20000 + "]" * 20000 + "}"])
def test_values_nested_too_deep_are_refused_not_a_recursion_error(tmp_path, nested):
    assert "line 1: values are nested deeper than 32 levels" in problems_of(tmp_path, nested)


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    from detector_training.job import config_file

    monkeypatch.setattr(config_file, "MAX_BYTES", 64)
    assert "larger than 64 bytes" in problems_of(tmp_path, "seed: 1\n" * 20)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    env = job(tmp_path, {}, {"config/c.yaml": ""})
    with open(os.path.join(channels(env), "config", "c.yaml"), "wb") as handle:
        handle.write(b"lr: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(env)


@pytest.mark.parametrize("value, expected", [
    ("../config/../../escape.yaml", "lies outside the job's channels"),
    ("/etc/hostname", "lies outside the job's channels"),
    ("config/missing.yaml", "no such file in the job's channels"),
    ("\"\"", "expected a path inside the job's channels"),
])
def test_config_file_must_name_a_file_inside_the_channels(tmp_path, value, expected):
    env = job(tmp_path, {"config_file": value}, {"config/c.yaml": "lr: 0.1\n"})
    with pytest.raises(ConfigError, match=expected):
        load_config(env)


def test_config_file_through_a_link_that_leaves_the_channels_is_refused(tmp_path):
    outside = tmp_path / "outside.yaml"
    outside.write_text("lr: 0.1\n")
    env = job(tmp_path, {"config_file": "config/link.yaml"}, {"config/c.yaml": "lr: 0.1\n"})
    os.symlink(str(outside), os.path.join(channels(env), "config", "link.yaml"))
    with pytest.raises(ConfigError, match="lies outside the job's channels"):
        load_config(env)


@pytest.mark.parametrize("files, expected", [
    ({"config/notes.txt": "x"}, "holds no .yaml, .yml or .json file"),
    ({"config/a.yaml": "lr: 0.1\n", "config/b.yml": "lr: 0.2\n"}, "several config files: a.yaml, b.yml"),
])
def test_the_config_channel_holds_exactly_one_config_file(tmp_path, files, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(job(tmp_path, {}, files))


def test_annotation_files_need_coco_and_each_other(tmp_path):
    with pytest.raises(ConfigError, match="train_annotation_file is only used with dataset=coco.*go together"):
        cfg.from_hyperparameters({"train_annotation_file": "coco/a.json"})
    with pytest.raises(ConfigError, match="train_image_dir is used with train_annotation_file only"):
        cfg.from_hyperparameters({"dataset": "coco", "train_image_dir": "coco/images"})


def test_batch_size_and_batch_size_per_device_are_one_or_the_other(tmp_path):
    assert cfg.from_hyperparameters({}).global_batch(3) == 3  # one image per rank by default
    assert cfg.from_hyperparameters({"batch_size_per_device": "2"}).global_batch(3) == 6
    with pytest.raises(ConfigError, match="both set; set one"):
        cfg.from_hyperparameters({"batch_size": "4", "batch_size_per_device": "2"})


def test_read_config_file_returns_the_values_as_the_file_has_them(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr_decay_epoch: [2, 4]\n  lr: 0.1\n")
    assert read_config_file(str(path), str(tmp_path)) == {"lr_decay_epoch": [2, 4], "lr": 0.1}


def test_a_ground_truth_manifest_in_the_train_channel_is_dataset_manifest_unless_one_is_named(tmp_path):
    manifest = {"train/output.manifest": "", "config/job.yaml": "dataset: custom\n"}
    assert load_config(job(tmp_path / "a", {}, {"train/output.manifest": ""})).dataset == "manifest"
    assert load_config(job(tmp_path / "b", {"dataset": "custom"}, manifest)).dataset == "custom"
    assert load_config(job(tmp_path / "c", {"config_file": "config/job.yaml"}, manifest)).dataset == "custom"
    assert load_config(job(tmp_path / "d", {}, {"train/VOCtrainval_06-Nov-2007.tar": ""})).dataset == "voc"
