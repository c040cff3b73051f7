"""Whole training jobs on generated VOC data: one rank, two Horovod ranks, interrupt and resume."""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np

from conftest import BIN, make_job, run_horovod_job, run_rank_job


def read_json(*parts):
    with open(os.path.join(*parts)) as handle:
        return json.load(handle)


def test_one_rank_trains_validates_and_writes_the_model(job_dir):
    base = make_job(job_dir, {"epochs": "2", "batch_size": "2"}, n_train=8, n_test=4)
    result = run_rank_job(base)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    model = os.path.join(base, "model")
    for name in ("model.params", "model-best.params", "model-symbol.json", "model-0000.params",
                 "classes.json", "config.json", "validation.json", "history.json",
                 "training_curves.png", "per_class_ap.md", "per_class_ap.csv"):
        assert os.path.isfile(os.path.join(model, name)), name
    classes = read_json(model, "classes.json")
    assert classes and set(classes) <= {"circle", "square", "triangle"}
    validation = read_json(model, "validation.json")
    assert set(validation["per_class"]) == set(classes)
    assert 0.0 <= validation["mAP"] <= 1.0 and validation["images"] == 4
    config = read_json(model, "config.json")
    assert config["per_rank_batch"] == 2 and config["world_size"] == 1
    assert config["short"] == [128] and config["max_size"] == 176
    assert config["effective_lr"] == 0.02 * 2 / 4
    history = read_json(model, "history.json")
    assert [h["epoch"] for h in history] == [0, 1]
    assert all(np.isfinite(h["rpn_conf_loss"]) for h in history)
    # Machine-readable lines for the launcher's metric definitions.
    assert re.search(r"\[Epoch 1\]\[Batch 1/4\] lr=\S+ speed=\S+ samples/s rpn_conf_loss=[0-9.]+", out)
    assert re.search(r"validation: epoch=1 images=4 time=\S+ mAP=[0-9.]+", out)
    for name in classes:
        assert re.search(r"validation: epoch=1 class=%s AP=" % name, out)
    assert not os.path.exists(os.path.join(base, "output", "failure"))
    # Only the best and the final model in the model directory; checkpoints elsewhere.
    assert not [n for n in os.listdir(model) if n.startswith(("ckpt", ".tmp"))]
    assert open(os.path.join(base, "checkpoints", "latest")).read().strip() == "ckpt-00000008"
    # The exported symbol loads for deployment.
    import mxnet as mx

    net = mx.gluon.SymbolBlock.imports(os.path.join(model, "model-symbol.json"), ["data"],
                                       os.path.join(model, "model-0000.params"))
    ids, scores, boxes = net(mx.nd.zeros((1, 3, 128, 160)))
    assert boxes.shape[-1] == 4


def test_two_horovod_ranks_on_an_uneven_dataset_finish(job_dir):
    # 7 training images over 2 ranks, 5 validation images: neither splits evenly.
    base = make_job(job_dir, {"epochs": "2", "batch_size": "2"}, n_train=7, n_test=5)
    result, out = run_horovod_job(base)
    assert result.returncode == 0, out[-4000:]
    finished = re.findall(r"\[rank (\d)\] finished: rank=\d steps=(\d+) epochs=0\.\.1", out)
    assert sorted(r for r, _ in finished) == ["0", "1"]
    assert {s for _, s in finished} == {"8"}  # ceil(ceil(7/2)/1) = 4 steps x 2 epochs, each rank
    assert re.search(r"\[rank 0\] world: rank=0 size=2", out) and re.search(r"\[rank 1\] world: rank=1 size=2", out)
    validation = read_json(base, "model", "validation.json")
    assert validation["images"] == 5  # both shards combined
    assert os.path.isfile(os.path.join(base, "model", "model.params"))


def states_digest_from_checkpoint(path):
    """The optimizer-state fingerprint computed from the checkpoint's files themselves."""
    import mxnet as mx

    from detector_training.core.checkpoint import read_optimizer_state, states_digest

    layout, arrays = read_optimizer_state(path)

    def build(entry):
        if isinstance(entry, list):
            return tuple(build(item) for item in entry)
        return None if entry is None else mx.nd.array(arrays[entry])

    return states_digest({int(k): build(v) for k, v in layout["states"].items()})


def test_interrupted_job_resumes_at_the_next_epoch_with_optimizer_state(job_dir):
    base = make_job(job_dir, {"epochs": "3", "batch_size": "1"}, n_train=8, n_test=2)
    latest = os.path.join(base, "checkpoints", "latest")
    proc = subprocess.Popen([os.path.join(BIN, "detector-train-job"), "--base-dir", base],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.time() + 600
    while not os.path.exists(latest) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # a hard stop right after the first checkpoint
    first_out = proc.communicate()[0]
    assert open(latest).read().strip() == "ckpt-00000008", first_out[-3000:]
    assert not os.path.exists(os.path.join(base, "model", "model.params"))

    expected = states_digest_from_checkpoint(os.path.join(base, "checkpoints", "ckpt-00000008"))
    assert not expected.endswith("sum|x|=0.000000e+00")
    result = run_rank_job(base)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert re.search(r"resume: from \S+ckpt-00000008 at epoch 1 iteration 0 \(global step 8\); "
                     r"optimizer state restored: " + re.escape(expected), out), out[-3000:]
    assert "[Epoch 0]" not in out  # epoch 0 is not trained again
    assert "finished: rank=0 steps=16 epochs=1..2" in out
    history = read_json(base, "model", "history.json")
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert open(latest).read().strip() == "ckpt-00000024"


def test_bad_hyperparameter_fails_before_training_with_a_failure_file(job_dir):
    base = make_job(job_dir, {"epochs": "two", "bacth_size": "2"}, n_train=2, n_test=1)
    result = run_rank_job(base, timeout=120)
    assert result.returncode != 0
    failure = open(os.path.join(base, "output", "failure")).read()
    assert failure.startswith("ConfigError:") and len(failure) < 1024
    assert "epochs=two: expected an integer" in failure
    assert "'bacth_size' (did you mean 'batch_size'?)" in failure
    assert "epochs=two" in result.stdout
    assert not os.path.exists(os.path.join(base, "model"))
