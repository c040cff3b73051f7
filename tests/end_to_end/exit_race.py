"""Short `train` jobs with four data-loader worker processes, run beside a CPU-bound process, each
timed from its `finished:` line to its exit (issue 27: a finished job that never exits).

Used by tests/end_to_end/test_job_exit.py (a few jobs) and benchmarks/exit_race.py (50).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import psutil

from conftest import BIN, make_job, train_env

EXIT_BOUND_S = 60  # after `finished:`; a healthy job exits in seconds
FORCED = "exit: still running"  # the exit guard's line (job/stop.py): the cause was not fixed


def make_race_job(base, hyperparameters, seed):
    """A job tree whose data the job accepts: with 4 training and 2 validation images some seeds
    draw validation images with no class the training images have, and the job rightly refuses
    that data before it trains (not a sample of the race). The job's own reading decides; the
    seed moves on by 1000 until it accepts the draw."""
    from detector_training.data.formats import build_datasets
    from detector_training.errors import DataError
    from detector_training.job.config import from_hyperparameters

    while True:
        make_job(base, hyperparameters, n_train=4, n_test=2, seed=seed)
        with open(os.path.join(base, "input", "config", "hyperparameters.json")) as handle:
            config = from_hyperparameters(json.load(handle))
        try:
            build_datasets(config, os.path.join(base, "input", "data", "voc"))
            return base
        except DataError:
            shutil.rmtree(base)
            seed += 1000


def cpu_hog():
    """A CPU-bound process beside the jobs (the race is likelier under load)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def where_it_waits(pid):
    """py-spy's dump of a stuck process and its children, when py-spy is installed."""
    spy = shutil.which("py-spy", path=BIN) or shutil.which("py-spy")
    if not spy:
        return "(py-spy not installed: pip install py-spy to see where it waits)"
    dump = subprocess.run([spy, "dump", "--subprocesses", "--pid", str(pid)], capture_output=True,
                          text=True, timeout=120)
    return dump.stdout[-6000:] + dump.stderr[-1000:]


class TimedJob:
    """One `train` job on a fresh tree, its output read as it comes: when it logged `finished:`
    and when it exited."""

    def __init__(self, base):
        self.base = base
        self.lines = []
        self.finished_at = self.exited_at = None
        self.proc = subprocess.Popen([os.path.join(BIN, "train")], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=train_env(base))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.finished_at is None and re.search(r"finished: rank=0", line):
                self.finished_at = time.time()

    def wait(self, timeout_s):
        """Wait for `finished:` (up to ``timeout_s``), then at most EXIT_BOUND_S for the exit.
        Returns None when it exited in time, else what went wrong (the stuck job is killed)."""
        deadline = time.time() + timeout_s
        while self.finished_at is None and self.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if self.finished_at is None:
            self.kill_tree()
            return "did not finish: " + "".join(self.lines)[-3000:]
        try:
            self.proc.wait(timeout=max(0.0, self.finished_at + EXIT_BOUND_S - time.time()))
        except subprocess.TimeoutExpired:
            stack = where_it_waits(self.proc.pid)
            self.kill_tree()
            return "still running %d s after `finished:`:\n%s" % (EXIT_BOUND_S, stack)
        self.exited_at = time.time()
        self._reader.join(10)
        out = "".join(self.lines)
        if self.proc.returncode != 0:
            return "exit code %d after `finished:`: %s" % (self.proc.returncode, out[-3000:])
        if FORCED in out:
            return "exited only through the exit guard: " + out[-3000:]
        return None

    def kill_tree(self):
        """Kill the job and its loader workers (a stuck job's workers outlive it otherwise)."""
        try:
            processes = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            processes = []
        self.proc.kill()
        self.proc.wait()
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass

    @property
    def exit_took(self):
        return self.exited_at - self.finished_at


def run_jobs(root, count, parallel=2, timeout_s=900, progress=None):
    """``count`` short jobs (``parallel`` at a time) with num_workers=4 beside a CPU hog; returns
    (problems by job, seconds from `finished:` to exit of the jobs that exited). ``progress(n,
    problem, seconds)`` is called as each job ends."""
    hyperparameters = {"epochs": "1", "num_workers": "4", "batch_size": "1", "val_interval": "1"}
    problems, took = {}, []
    hog = cpu_hog()
    try:
        for first in range(0, count, parallel):
            jobs = {}
            for n in range(first, min(count, first + parallel)):
                base = make_race_job(os.path.join(root, "job%02d" % n), hyperparameters, n)
                jobs[n] = TimedJob(base)
            for n, job in jobs.items():
                problem = job.wait(timeout_s)
                if problem:
                    problems[n] = problem
                else:
                    took.append(job.exit_took)
                if progress:
                    progress(n, problem, None if problem else job.exit_took)
    finally:
        hog.kill()
        hog.wait()
    return problems, took
