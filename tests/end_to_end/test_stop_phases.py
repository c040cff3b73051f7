"""Stops at every phase of a job, and a full disk at every write (issue 39).

SageMaker stops a job with SIGTERM and kills it 120 s later. Each test here lands the SIGTERM in
one phase for certain: it waits for the phase's own mark (the temporary folder of a checkpoint
being written, the log line that starts validation, the temporary file of the final model),
freezes the job with SIGSTOP, checks the phase is still under way (the mark not yet gone), then
sends SIGTERM and lets the job go on. A full disk is a real small file system (tmpfs).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN, make_job, train_env

from detector_training.core.checkpoint import CheckpointManager
from detector_training.core.model_dir import read_export

SAGEMAKER_STOP_S = 120  # SIGKILL follows SIGTERM after 120 s
STEPS = 2  # per epoch: 2 training images, one per step


def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path], check=True)


@pytest.fixture
def mounts():
    """tmpfs mounts made by a test, unmounted after it."""
    made = []

    def mount(path, size):
        mount_tmpfs(path, size)
        made.append(path)
        return path

    yield mount
    for path in reversed(made):
        subprocess.run(["umount", "-l", path], check=False)


class Job:
    """One `train` process on ``base``, its output in a log file."""

    def __init__(self, base, name):
        self.base = base
        self.log_path = os.path.join(base, "..", name + ".log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([os.path.join(BIN, "train")], stdout=log, stderr=subprocess.STDOUT,
                                         env=train_env(base))
        self.sent = None

    def log(self):
        with open(self.log_path) as handle:
            return handle.read()

    def stop_in_phase(self, entered, still_in, timeout=300, tries=5, poll_s=0.003):
        """SIGTERM while the phase is under way: poll ``entered()`` (its mark: a value, or None),
        freeze the job, and if ``still_in(mark)`` holds, SIGTERM it and let it go on; else let it
        go on and wait for the phase's next time (at most ``tries``)."""
        deadline = time.time() + timeout
        seen = set()
        while time.time() < deadline and len(seen) < tries:
            mark = entered()
            if mark is None or mark in seen:
                if self.proc.poll() is not None:
                    break
                time.sleep(poll_s)
                continue
            self.proc.send_signal(signal.SIGSTOP)
            if still_in(mark):
                self.sent = time.time()
                self.proc.send_signal(signal.SIGTERM)
                self.proc.send_signal(signal.SIGCONT)
                return mark
            seen.add(mark)
            self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        pytest.fail("the phase was never caught under way: %s" % self.log()[-3000:])

    def wait(self, timeout=SAGEMAKER_STOP_S):
        """(exit code, seconds since the SIGTERM); a job still running at ``timeout`` is killed."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("still running %d s after SIGTERM: %s" % (timeout, self.log()[-3000:]))
        return code, time.time() - (self.sent or time.time())


def checkpoint_being_written(directory):
    """The name of a checkpoint's temporary folder in ``directory`` (a write under way), or None."""
    def mark():
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return None
        return next((n for n in names if n.startswith(".tmp-ckpt-")), None)
    return mark


def latest_state(base):
    checkpoints = os.path.join(base, "checkpoints")
    name = open(os.path.join(checkpoints, "latest")).read().strip()
    assert CheckpointManager(checkpoints).is_complete(name), name
    return name, json.load(open(os.path.join(checkpoints, name, "state.json")))


@pytest.mark.timeout(900)
def test_sigterm_during_a_checkpoint_write_validation_and_the_final_write(job_dir):
    """One job stopped three times, each in another phase; each stop ends well inside 120 s with
    a complete checkpoint (or the model) that the next run starts from."""
    base = make_job(job_dir, {"epochs": "2", "batch_size": "1", "log_interval": "1"}, n_train=STEPS, n_test=1)
    checkpoints = os.path.join(base, "checkpoints")
    os.makedirs(checkpoints)

    # 1. During epoch 0's checkpoint: the write completes, the job stops at the next step.
    job = Job(base, "first")
    job.stop_in_phase(checkpoint_being_written(checkpoints),
                      lambda mark: os.path.isdir(os.path.join(checkpoints, mark)))
    code, took = job.wait()
    out = job.log()
    assert code == 0 and took < SAGEMAKER_STOP_S, out[-3000:]
    assert "checkpoint: saved %s (next epoch 1, iteration 0)" % os.path.join(checkpoints, "ckpt-%08d" % STEPS) in out
    assert "stop requested: saving a checkpoint at epoch 1, iteration 0" in out, out[-3000:]
    name, state = latest_state(base)
    assert (state["epoch"], state["iteration"], state["global_step"]) == (1, 1, STEPS + 1)
    assert CheckpointManager(checkpoints).is_complete("ckpt-%08d" % STEPS)
    assert not os.path.exists(os.path.join(base, "model", "model.params"))

    # 2. During epoch 1's validation (the last): it stops part-way, the checkpoint sits at the
    # end of the epoch's steps, and the next run validates that epoch first.
    job = Job(base, "second")
    job.stop_in_phase(lambda: "validation: epoch=1 started" in job.log() or None,
                      lambda _mark: "validation: epoch=1 images=" not in job.log(), poll_s=0.01)
    code, took = job.wait()
    out = job.log()
    assert code == 0 and took < SAGEMAKER_STOP_S, out[-3000:]
    assert "resume: from %s at epoch 1 iteration 1" % os.path.join(checkpoints, name) in out
    assert re.search(r"validation: epoch=1 stopped after \S+s: a stop was requested after [0-2] image", out), out[-3000:]
    assert "validation: epoch=1 images=" not in out
    assert "its validation stopped: the next run validates it first" in out
    name, state = latest_state(base)
    assert (state["epoch"], state["iteration"]) == (1, STEPS)
    assert [r["epoch"] for r in state["history"]] == [0, 1] and "mAP" not in state["history"][1]
    assert not os.path.exists(os.path.join(base, "model", "model.params"))

    # 3. During the final model write: it completes, the job ends with the whole model, and what
    # an earlier write killed part-way (SIGKILL) left in the model directory is gone.
    model = os.path.join(base, "model")
    killed = [".tmp-model.params-k1ll3d", ".tmp-model-k1ll3d"]
    os.makedirs(os.path.join(model, killed[1]))
    with open(os.path.join(model, killed[0]), "wb") as handle:
        handle.write(b"\0" * 100)
    job = Job(base, "third")

    def final_write():
        if "(next epoch 2, iteration 0)" not in job.log():
            return None
        return next((n for n in os.listdir(model) if n.startswith(".tmp-") and n not in killed), None)

    job.stop_in_phase(final_write, lambda mark: os.path.exists(os.path.join(model, mark)))
    code, took = job.wait()
    out = job.log()
    assert code == 0 and took < SAGEMAKER_STOP_S, out[-3000:]
    assert "resume: from %s at epoch 1 iteration %d" % (os.path.join(checkpoints, name), STEPS) in out
    assert "[Epoch 1] summary" not in out  # the epoch's steps were the earlier run's
    assert re.search(r"validation: epoch=1 images=\d+ ", out)
    assert "evaluation: no report (a stop was requested" in out or "report not written: a stop was requested" in out
    exported = read_export(model)  # every file of the export, whole
    assert exported.classes and os.path.getsize(exported.params_file) > 0
    import mxnet as mx

    assert mx.nd.load(exported.params_file) and mx.nd.load(os.path.join(model, "model.params"))
    history = json.load(open(os.path.join(model, "history.json")))
    assert [r["epoch"] for r in history] == [0, 1] and "mAP" in history[1]
    assert json.load(open(os.path.join(model, "validation.json")))["epoch"] == 1
    assert not [n for n in os.listdir(model) if n.startswith(".tmp-")]


@pytest.mark.timeout(900)
def test_two_ranks_stopped_during_validation_end_together_and_the_next_run_validates_first(job_dir):
    """SIGTERM while two Horovod ranks validate (each its half of the images, agreeing before
    each image whether to stop): both stop part-way at the same image, the job ends inside
    SageMaker's 120 s with the checkpoint at the end of the epoch's steps, and the next run
    validates that epoch first and writes the model."""
    base = make_job(job_dir, {"epochs": "1", "batch_size": "2", "log_interval": "1",
                              "processes_per_host": "2"}, n_train=4, n_test=24)
    checkpoints = os.path.join(base, "checkpoints")
    os.makedirs(checkpoints)
    job = Job(base, "first")
    job.stop_in_phase(lambda: "validation: epoch=0 started" in job.log() or None,
                      lambda _mark: "validation: epoch=0 images=" not in job.log(), poll_s=0.01)
    code, took = job.wait()
    out = job.log()
    assert code == 0 and took < SAGEMAKER_STOP_S, out[-3000:]
    # The main rank says where its shard stopped; the other rank stopped at the same image (a
    # rank that went on would wait in the gather of detections until SageMaker's kill).
    stopped = re.search(r"\[1,0\]<stdout>:.*validation: epoch=0 stopped after \S+s: a stop was requested "
                        r"after (\d+) image\(s\) of this rank's validation shard", out)
    assert stopped and int(stopped.group(1)) < 12, out[-3000:]  # part-way through its 12
    assert "validation: epoch=0 images=" not in out
    assert sorted(re.findall(r"\[1,(\d)\]<stdout>:.*stopped: rank=\d", out)) == ["0", "1"], out[-3000:]
    name, state = latest_state(base)
    assert (state["epoch"], state["iteration"]) == (0, 2)  # 4 images, one per rank and step
    assert not os.path.exists(os.path.join(base, "model", "model.params"))

    job = Job(base, "second")
    code, _took = job.wait(timeout=600)
    out = job.log()
    assert code == 0, out[-3000:]
    assert "resume: from %s at epoch 0 iteration 2" % os.path.join(checkpoints, name) in out
    assert re.search(r"validation: epoch=0 images=24 ", out), out[-3000:]
    assert json.load(open(os.path.join(base, "model", "validation.json")))["epoch"] == 0
    assert os.path.getsize(os.path.join(base, "model", "model.params")) > 0


CRASH_PROBE = """
import sys
import mxnet as mx
from detector_training.core.checkpoint import CheckpointManager, Position, save_checkpoint
net = mx.gluon.nn.Dense(1000, in_units=1000)
net.initialize()
trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
with mx.autograd.record():
    loss = net(mx.nd.ones((1, 1000))).sum()
loss.backward()
trainer.step(1)
manager = CheckpointManager(sys.argv[1], keep=2)
save_checkpoint(manager, net, trainer, Position(epoch=1, global_step=1), {})
print("ready", flush=True)
for step in range(2, 1000):
    save_checkpoint(manager, net, trainer, Position(epoch=step, global_step=step), {})
"""


def test_a_crash_mid_checkpoint_leaves_the_last_complete_one_to_resume_from(tmp_path):
    """SIGKILL (a crash, SageMaker's kill at 120 s) while a checkpoint is written: what it left is
    never taken for a checkpoint; resume finds the last complete one, whole."""
    import mxnet as mx

    directory = str(tmp_path / "checkpoints")
    proc = subprocess.Popen([sys.executable, "-c", CRASH_PROBE, directory], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        mark = checkpoint_being_written(directory)
        deadline = time.time() + 60
        while time.time() < deadline:
            found = mark()
            if found:
                proc.send_signal(signal.SIGSTOP)
                if os.path.isdir(os.path.join(directory, found)) and \
                        os.listdir(os.path.join(directory, found)):  # files written, not yet renamed
                    break
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.001)
        else:
            pytest.fail("no checkpoint write caught under way")
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert os.path.isdir(os.path.join(directory, found))  # the torn write is still there
    path, state = CheckpointManager(directory).latest()
    assert os.path.basename(path) != found and state["global_step"] >= 1
    arrays = mx.nd.load(os.path.join(path, "model.params"))
    assert arrays and all(a.size for a in arrays.values())
    assert os.path.getsize(os.path.join(path, "model.params")) == state["files"]["model.params"]


def test_a_full_checkpoint_disk_fails_the_job_with_its_reason_and_keeps_the_previous_checkpoint(job_dir, mounts):
    """The checkpoint folder holds one checkpoint (28 MB) but not two: the second one is the job's
    DiskFullError, in the log and the failure file; the first stays whole, and nothing is left
    half-written."""
    import mxnet as mx

    base = make_job(job_dir, {"epochs": "2", "batch_size": "1", "log_interval": "1"}, n_train=STEPS, n_test=1)
    checkpoints = mounts(os.path.join(base, "checkpoints"), "40m")
    job = Job(base, "full")
    code, _took = job.wait(timeout=600)
    out = job.log()
    assert code != 0, out[-3000:]
    failure = open(os.path.join(base, "output", "failure")).read()
    expected = ("DiskFullError: the disk is full: checkpoint ckpt-%08d in %s could not be written (No space left "
                "on device); the previous checkpoint ckpt-%08d is kept." % (2 * STEPS, checkpoints, STEPS))
    assert failure.startswith(expected), failure
    assert "volume_size" in failure and expected in out
    assert "MXNetError" not in failure and "AlgorithmError" not in failure
    path, state = CheckpointManager(checkpoints).latest()
    assert os.path.basename(path) == "ckpt-%08d" % STEPS and state["epoch"] == 1
    assert mx.nd.load(os.path.join(path, "model.params"))
    assert sorted(os.listdir(checkpoints)) == ["ckpt-%08d" % STEPS, "latest"]
