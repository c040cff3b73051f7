"""Whole jobs on the inputs of the SageMaker built-in Object Detection algorithm, sent in the
channels its jobs use, without 'dataset' (recognised): the image format (one rank through
`train`, two Horovod ranks), RecordIO in File mode (one rank) and in Pipe mode (two ranks on one
host reading the channel's real FIFO once). The class names reach classes.json."""

import json
import os
import re
import subprocess

import builtin_exports as bx
import ground_truth as gt
from conftest import BIN, TINY, ranks_finished, run_horovod_job, train_env, two_rank_job_finishes

# No 'dataset': the channels' contents say which format it is.
BUILTIN = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
               epochs="1", batch_size="2")
IMAGE_CHANNEL = dict(gt.FILE_CHANNEL, ContentType="application/x-image")
RECORDIO_FILE = dict(gt.FILE_CHANNEL, ContentType="application/x-recordio")
RECORDIO_PIPE = {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated",
                 "RecordWrapperType": "None", "ContentType": "application/x-recordio"}


def image_format_job(base, n_train=6, n_val=3):
    bx.builtin_json_channels(os.path.join(base, "input", "data"), n_train, n_val,
                             categories={0: "dog", 1: "cat"})
    gt.write_config(base, BUILTIN, {c: IMAGE_CHANNEL for c in (
        "train", "validation", "train_annotation", "validation_annotation")})


def run_train(base):
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                            timeout=600, env=train_env(base))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result.stdout


def classes_of(base):
    return json.load(open(os.path.join(base, "model", "classes.json")))


def test_one_rank_trains_on_the_image_format(job_dir):
    base = str(job_dir)
    image_format_job(base)
    out = run_train(base)
    assert "dataset=builtin recognised in channel 'train_annotation'" in out
    assert re.search(r"data: builtin training: SageMaker built-in .*, 6 images, objects "
                     r"per class: dog \d+, cat \d+", out)
    assert "data: builtin validation:" in out
    assert classes_of(base) == ["dog", "cat"]
    assert json.load(open(os.path.join(base, "model", "validation.json")))["images"] == 3


def test_two_ranks_train_on_the_image_format(job_dir):
    base = str(job_dir)
    image_format_job(base)
    out, validation = two_rank_job_finishes(base)
    assert validation["images"] == 3 and classes_of(base) == ["dog", "cat"]


def test_one_rank_trains_on_recordio_files(job_dir, tmp_path):
    base = str(job_dir)
    data = os.path.join(base, "input", "data")
    bx.builtin_recordio_channels(data, str(tmp_path / "im2rec"), n_train=6, n_val=3, header_width=4)
    gt.write_config(base, dict(BUILTIN, classes="dog,cat"),
                    {"train": RECORDIO_FILE, "validation": RECORDIO_FILE})
    out = run_train(base)
    assert "dataset=builtin recognised in channel 'train': RecordIO, 1 .rec file(s)" in out
    assert classes_of(base) == ["dog", "cat"]
    assert json.load(open(os.path.join(base, "model", "validation.json")))["images"] == 3
    assert not any(n.endswith(".jpg") for _t, _d, names in os.walk(base) for n in names)


def test_two_ranks_on_one_host_train_on_recordio_in_pipe_mode(job_dir, tmp_path):
    base = str(job_dir)
    source = str(tmp_path / "s3")
    rec = bx.builtin_recordio_split(str(tmp_path / "im2rec"), source, "train", bx.sample_objects(10))
    data = os.path.join(base, "input", "data")
    os.makedirs(data)
    gt.write_config(base, BUILTIN, {"train": RECORDIO_PIPE})
    writer = gt.FifoWriter(os.path.join(data, "train_0"), open(rec, "rb").read())
    result, out = run_horovod_job(base)
    writer.join(timeout=30)
    assert result.returncode == 0, out[-4000:]
    assert ranks_finished(out) == ["0", "1"]
    assert writer.written == len(writer.data)  # read to the end, once
    assert len(re.findall(r"channel 'train' \(Pipe mode\): [\d.]+ MB of RecordIO copied", out)) == 1
    assert classes_of(base) == ["0", "1"]  # no 'classes': the ids are the names
    assert json.load(open(os.path.join(base, "model", "validation.json")))["images"] == 1
