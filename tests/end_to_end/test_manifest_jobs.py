"""Whole jobs on a Ground Truth bounding-box manifest (sparse class ids, an adjustment attribute,
an image without boxes, a blank line): File mode with one rank through `train` and with two
Horovod ranks, and a YOLOv3; Pipe mode with two ranks on one host reading a real FIFO in
SageMaker's RecordIO framing. The manifest's class names reach classes.json and the metric
lines."""

import json
import os
import re
import subprocess

import ground_truth as gt
from conftest import (BIN, TINY, ranks_finished, run_horovod_job, run_rank_job, train_env,
                      two_rank_job_finishes)

from detector_training.job.metrics import definitions_for

# No 'dataset': the train channel's content says it is a manifest.
MANIFEST = dict({k: v for k, v in TINY.items() if k not in ("dataset", "train_splits")},
                epochs="1", batch_size="2", skip_empty="false")


def check_job(base, out, family="faster_rcnn"):
    for definition in definitions_for(family):
        assert re.search(definition["Regex"], out), definition["Name"]
    assert "data: dataset=manifest recognised in channel 'train'" in out
    assert re.search(r"training: 1 of \d+ images have no box of the trained classes: kept as "
                     r"negatives", out)
    model = os.path.join(base, "model")
    assert json.load(open(os.path.join(model, "classes.json"))) == list(gt.CLASSES)
    return json.load(open(os.path.join(model, "validation.json")))


def test_one_rank_trains_on_a_manifest_in_file_mode(job_dir):
    base = str(job_dir)
    gt.file_mode_job(base, MANIFEST, count=8, validation=3)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True,
                            timeout=600, env=train_env(base))
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    validation = check_job(base, out)
    assert validation["images"] == 3 and set(validation["per_class"]) == set(gt.CLASSES)


def test_a_yolo_trains_on_a_manifest(job_dir):
    base = str(job_dir)
    yolo = dict(MANIFEST, network="yolo3_mobilenet0.25_voc", short="96", max_size="96",
                lr="0.004", lr_warmup="4", clip_gradient="5")
    gt.file_mode_job(base, yolo, count=8, validation=3)
    result = run_rank_job(base)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert check_job(base, result.stdout, "yolo3")["images"] == 3


def test_two_ranks_train_on_a_manifest_in_file_mode(job_dir):
    base = str(job_dir)
    gt.file_mode_job(base, MANIFEST, count=8, validation=3)
    out, validation = two_rank_job_finishes(base)
    check_job(base, out)
    assert validation["images"] == 3  # both ranks' shards combined


def test_two_ranks_on_one_host_train_on_a_pipe_mode_channel(job_dir):
    base = str(job_dir)
    writer, _ = gt.pipe_mode_job(base, MANIFEST, count=10)
    result, out = run_horovod_job(base)
    writer.join(timeout=30)
    assert result.returncode == 0, out[-4000:]
    assert ranks_finished(out) == ["0", "1"]
    assert writer.written == len(writer.data)  # read to the end, once
    assert len(re.findall(r"channel 'train' \(Pipe mode\): 10 lines", out)) == 1  # one drain per host
    validation = check_job(base, out)
    assert validation["images"] == 1  # 10% of the lines carved as the validation split
