"""The SageMaker job contract, through the `train` command against SAGEMAKER_BASE_DIR trees."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import BIN, make_job, stop_mid_epoch_and_resume, train_env

from detector_training.job.metrics import definitions_for


def run_train(base, timeout=600):
    """`train` on ``base``: the CompletedProcess with ``elapsed`` (seconds) and ``seen(pattern)``,
    the seconds from the start to the first output line matching ``pattern``. ``timeout`` only
    catches a hang: past it the process group is killed and the test fails."""
    start = time.monotonic()
    proc = subprocess.Popen([os.path.join(BIN, "train")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=train_env(base), start_new_session=True)
    lines = {"stdout": [], "stderr": []}  # (seconds since start, line)

    def read(stream, into):
        for line in stream:
            into.append((time.monotonic() - start, line))

    readers = [threading.Thread(target=read, args=(getattr(proc, name), lines[name]), daemon=True)
               for name in lines]
    for reader in readers:
        reader.start()
    hung = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    elapsed = time.monotonic() - start
    for reader in readers:
        reader.join(30)
    text = {name: "".join(line for _t, line in got) for name, got in lines.items()}
    if hung:
        pytest.fail("`train` did not end within %d s: %s" % (timeout, (text["stdout"] + text["stderr"])[-3000:]))
    result = subprocess.CompletedProcess(proc.args, proc.returncode, text["stdout"], text["stderr"])
    result.elapsed = elapsed
    result.seen = lambda pattern: min((t for t, line in lines["stdout"] + lines["stderr"]
                                       if re.search(pattern, line)), default=None)
    return result


SAGEMAKER_STOP_S = 120  # a stopped training job gets SIGTERM, then SIGKILL 120 s later


def failure_of(base):
    path = os.path.join(base, "output", "failure")
    return open(path).read() if os.path.exists(path) else None


def test_train_is_our_entrypoint_on_path():
    script = open(shutil.which("train", path=BIN)).read()
    assert "detector_training.commands" in script


def test_good_job_with_sdk_style_json_quoted_hyperparameters(job_dir):
    # SDK >= 2.110 JSON-quotes every value; a generic Estimator renders booleans as "False".
    base = make_job(job_dir, {}, n_train=6, n_test=3)
    hps = {"network": "\"faster_rcnn_resnet18_v1b_voc\"", "dataset": "\"custom\"",
           "pretrained_base": "\"False\"", "short": "\"128\"", "max_size": "176",
           "epochs": "\"1\"", "batch_size": "2", "lr": "\"0.02\"", "lr_decay_epoch": "\"[5, 9]\"",
           "num_workers": "0", "no_wd": "\"True\"", "mixup": "False", "log_interval": "1",
           "train_splits": "\"2007_trainval\"", "sagemaker_region": "\"us-east-1\"",
           "sagemaker_job_name": "\"detector-test\""}
    with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as handle:
        json.dump(hps, handle)
    result = run_train(base)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert failure_of(base) is None
    config = json.load(open(os.path.join(base, "model", "config.json")))
    assert config["pretrained_base"] is False and config["no_wd"] is True and config["mixup"] is False
    assert config["lr_decay_epoch"] == [5, 9] and config["short"] == [128] and config["epochs"] == 1
    assert os.path.isfile(os.path.join(base, "model", "model.params"))
    # The shipped metric definitions match the real log lines of this job.
    for definition in definitions_for("faster_rcnn"):
        assert re.search(definition["Regex"], result.stdout), definition["Name"]


@pytest.mark.parametrize("hps, words", [
    ({"epochs": "many"}, ["epochs=many", "expected an integer"]),
    ({"learn_rate": "0.1"}, ["unknown hyperparameter 'learn_rate'"]),
    ({"lr": "0"}, ["lr=0", "(0, 10]"]),
    ({"mixup": "perhaps"}, ["mixup=perhaps", "boolean"]),
    ({"lr_decay_epoch": "20,14"}, ["lr_decay_epoch=20,14", "strictly increasing"]),
    ({"batch_size": "3", "processes_per_host": "2"}, ["batch_size=3", "set batch_size to 2 or 4"]),
    ({"processes_per_host": "0"}, ["processes_per_host=0", ">= 1"]),
    ({"network": "yolo3_darknet54_voc"}, ["network=yolo3_darknet54_voc", "one of"]),
    ({"network": "yolo3_mobilenet0.25_voc", "short": "100"}, ["short=100", "multiple of 32"]),
])
def test_bad_hyperparameters_stop_the_job_with_a_failure_file(job_dir, hps, words):
    base = make_job(job_dir, hps, n_train=2, n_test=1)
    result = run_train(base, timeout=120)
    assert result.returncode != 0
    failure = failure_of(base)
    assert failure and failure.startswith("ConfigError:") and len(failure) < 1024
    for word in words:
        assert word in failure, failure
        assert word in result.stdout
    assert not os.path.exists(os.path.join(base, "model", "model.params"))
    assert not os.path.exists(os.path.join(base, "checkpoints"))  # nothing started


def test_malformed_hyperparameters_file(job_dir):
    base = make_job(job_dir, {}, n_train=2, n_test=1)
    with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as handle:
        handle.write("{not json")
    result = run_train(base, timeout=120)
    assert result.returncode != 0
    assert "hyperparameters.json is not valid JSON" in failure_of(base)


def test_missing_data_channel(job_dir):
    base = make_job(job_dir, {"epochs": "1"}, n_train=2, n_test=1)
    shutil.rmtree(os.path.join(base, "input", "data", "voc"))
    result = run_train(base, timeout=120)
    assert result.returncode != 0
    failure = failure_of(base)
    assert failure.startswith("DataError:") and "'voc' channel" in failure


STOP_SIGNAL_PROBE = """
import os, signal, sys, tempfile, time
from detector_training.job.stop import RankStop, StopSignal
if sys.argv[1] == "trainer":
    stop_requested = RankStop().install().requested
else:  # the launcher, which runs a one-process job in itself
    stop = StopSignal(os.path.join(tempfile.mkdtemp(), "stop-requested"))
    stop.install()
    stop_requested = lambda: os.path.exists(stop.stop_file)
child = os.fork()
if child == 0:  # a data-loader worker, as the pool forks it
    time.sleep(20)
    os._exit(7)
time.sleep(0.5)
os.kill(child, signal.SIGTERM)  # how the pool ends its workers
_, status = os.waitpid(child, 0)
print("child", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit %d" % os.WEXITSTATUS(status))
os.kill(os.getpid(), signal.SIGTERM)
print("parent stop requested", stop_requested())
"""


@pytest.mark.parametrize("installer", ["trainer", "launcher"])
def test_sigterm_stops_the_job_but_ends_a_forked_worker(installer):
    """The trainer and the launcher turn SIGTERM into a stop request; a forked data-loader worker
    must not inherit that: it would ignore its pool's SIGTERM, and the pool's join at the end of
    a one-process job would hang (seen in the image test), after logging a stop nobody asked for."""
    result = subprocess.run([os.path.join(BIN, "python"), "-c", STOP_SIGNAL_PROBE, installer],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "child %d" % signal.SIGTERM in result.stdout
    assert "parent stop requested True" in result.stdout
    assert result.stderr.count("received signal 15") == 1  # the parent only


@pytest.mark.timeout(2400)  # two jobs, each with its own deadlines (stop_mid_epoch_and_resume)
@pytest.mark.parametrize("processes", [1, 2])
def test_sigterm_mid_epoch_checkpoints_and_the_next_run_resumes(job_dir, processes):
    base = make_job(job_dir, {"epochs": "2", "batch_size": str(processes), "log_interval": "1",
                              "processes_per_host": str(processes)}, n_train=24, n_test=2)
    took, _out, result = stop_mid_epoch_and_resume(base, processes, 24 // processes)
    assert took < SAGEMAKER_STOP_S, took  # SageMaker's SIGKILL follows its SIGTERM after 120 s
    assert failure_of(base) is None
    if processes > 1:
        # Under mpirun every line carries the [1,0]<stdout>: prefix; the definitions still match.
        tagged = "\n".join(l for l in result.stdout.splitlines() if l.startswith("[1,0]<stdout>:"))
        for definition in definitions_for("faster_rcnn"):
            assert re.search(definition["Regex"], tagged), definition["Name"]


def test_a_failing_rank_ends_the_two_rank_job_quickly_with_its_reason(job_dir):
    # One training image cannot be decoded (a GIF under its .jpg name: its header reads, so the
    # data is accepted, but the loader's decoder refuses it): whichever rank reads it fails; mpirun
    # must end the other, which would otherwise wait in an allreduce forever. (A missing image is
    # left out and counted when the data is read, so it no longer fails a rank.)
    base = make_job(job_dir, {"epochs": "3", "batch_size": "2", "processes_per_host": "2"},
                    n_train=12, n_test=2)
    voc = os.path.join(base, "input", "data", "voc", "VOCdevkit", "VOC2007")
    first = open(os.path.join(voc, "ImageSets", "Main", "trainval.txt")).read().split()[3]
    from PIL import Image

    image = os.path.join(voc, "JPEGImages", first + ".jpg")
    Image.open(image).convert("RGB").save(image, format="GIF")
    result = run_train(base, timeout=600)
    assert result.returncode != 0
    # Ended once a rank failed: the time from the failure to the end of `train` is below the time
    # it took to get there (start-up and the first steps, on the same machine under the same load);
    # the other rank left waiting would take until the timeout.
    failed_at = result.seen(r"\[1,\d\]<stdout>:.*job failed")
    assert failed_at is not None, result.stdout[-3000:]
    assert result.elapsed - failed_at < failed_at, (failed_at, result.elapsed)
    failure = failure_of(base)
    assert failure and len(failure) < 1024
    assert first + ".jpg" in failure, failure
    # The log has the tagged traceback of the failing rank.
    assert re.search(r"\[1,\d\]<stdout>:.*job failed", result.stdout)


def test_pretrained_channel_feeds_the_backbone_offline(job_dir):
    from conftest import make_backbone_file

    base = make_job(job_dir, {"epochs": "1", "batch_size": "1", "pretrained_base": "true"},
                    n_train=2, n_test=1)
    channel = os.path.join(base, "input", "data", "pretrained")
    os.makedirs(channel)
    path, _ = make_backbone_file(channel)
    result = subprocess.run([os.path.join(BIN, "train")], capture_output=True, text=True, timeout=600,
                            env=train_env(base, MXNET_GLUON_REPO="http://127.0.0.1:9/"))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "pretrained weights for resnet18_v1b: %s" % path in result.stdout
