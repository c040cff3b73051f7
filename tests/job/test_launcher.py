import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from detector_training.errors import ConfigError
from detector_training.job.launcher import (LaunchPlan, MpirunReport, end_process_group,
                                            forwarded_env_names, make_plan, mpirun_command,
                                            processes_per_host, supervise)
from detector_training.job.sm_env import Environment, JobPaths


def test_processes_per_host_follows_gpus_unless_overridden():
    assert processes_per_host(None, 8) == 8
    assert processes_per_host(None, 0) == 1
    assert processes_per_host("2", 0) == 2
    assert processes_per_host("\"4\"", 8) == 4
    with pytest.raises(ConfigError):
        processes_per_host("0", 0)
    with pytest.raises(ConfigError):
        processes_per_host("two", 0)


def test_plan_from_resource_config():
    env = Environment(paths=JobPaths("/x"), hyperparameters={},
                      resource_config={"current_host": "algo-2", "hosts": ["algo-2", "algo-1"],
                                       "network_interface_name": "ethwe"})
    plan = make_plan(env, 4)
    assert plan.hosts == ("algo-1", "algo-2") and plan.leader == "algo-1" and not plan.is_leader
    assert plan.world_size == 8 and plan.network_interface == "ethwe"


def test_current_host_must_be_listed():
    env = Environment(paths=JobPaths("/x"), resource_config={"current_host": "algo-3", "hosts": ["algo-1"]})
    with pytest.raises(ConfigError):
        make_plan(env, 1)


def test_mpirun_command_for_two_hosts_has_the_toolkit_flags():
    plan = LaunchPlan(hosts=("algo-1", "algo-2"), current_host="algo-1", processes_per_host=4,
                      network_interface="eth0")
    cmd = mpirun_command(plan, ["python", "-m", "detector_training.rank"], ["SAGEMAKER_BASE_DIR", "AWS_ACCESS_KEY_ID"],
                         ["-x", "FOO=1"], "/lib/gethostname.so")
    text = " ".join(cmd)
    assert cmd[:5] == ["mpirun", "--host", "algo-1:4,algo-2:4", "-np", "8"]
    for flag in ("--allow-run-as-root", "--tag-output", "-mca btl_tcp_if_include eth0",
                 "-mca oob_tcp_if_include eth0", "-mca plm_rsh_no_tree_spawn 1", "-bind-to none",
                 "-map-by slot", "-mca pml ob1", "-mca btl ^openib",
                 "-mca orte_abort_on_non_zero_status 1", "-mca btl_vader_single_copy_mechanism none",
                 "-x NCCL_SOCKET_IFNAME=eth0", "-x LD_PRELOAD=/lib/gethostname.so",
                 "-x SAGEMAKER_BASE_DIR", "-x AWS_ACCESS_KEY_ID", "-x FOO=1"):
        assert flag in text, flag
    assert cmd[-3:] == ["python", "-m", "detector_training.rank"]


def test_one_host_runs_locally_without_interface_pinning():
    plan = LaunchPlan(hosts=("algo-1",), current_host="algo-1", processes_per_host=2)
    cmd = mpirun_command(plan, ["p"], [])
    assert cmd[1:5] == ["--host", "localhost:2", "-np", "2"]
    assert "btl_tcp_if_include" not in cmd and "LD_PRELOAD" not in " ".join(cmd)


def test_secrets_are_forwarded_by_name_only():
    environ = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "SAGEMAKER_BASE_DIR": "/opt/ml", "UNRELATED": "x"}
    names = forwarded_env_names(environ)
    assert names == ["AWS_SECRET_ACCESS_KEY", "SAGEMAKER_BASE_DIR"]
    plan = LaunchPlan(hosts=("algo-1",), current_host="algo-1", processes_per_host=2)
    assert "s3cr3t" not in " ".join(mpirun_command(plan, ["p"], names))


def test_hyperparameters_never_reach_the_command_line():
    plan = LaunchPlan(hosts=("algo-1", "algo-2"), current_host="algo-1", processes_per_host=1)
    cmd = mpirun_command(plan, ["python", "-m", "detector_training.rank"], [])
    assert cmd[-3:] == ["python", "-m", "detector_training.rank"]
    assert not any(part.startswith("--lr") or ";" in part for part in cmd)


# --- supervise: every job ends ------------------------------------------------------------------

class Stop:
    def __init__(self, since=None):
        self.since = since


def sleeper():
    """A real process standing in for mpirun, and its child for a rank: in a process group of its
    own, as OpenMPI starts ranks."""
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\n"
              "                         start_new_session=True)\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    return proc, child


def gone(pid, timeout_s=30):
    """Whether ``pid`` ended (or is a zombie: its parent, the stand-in, is gone)."""
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return proc.status() == psutil.STATUS_ZOMBIE
    return True


def test_ranks_still_running_after_the_job_finished_are_ended_and_the_job_succeeds(tmp_path, caplog):
    finished = tmp_path / "job-finished"
    proc, child = sleeper()
    finished.write_text("finished\n")
    started = time.time()
    with caplog.at_level(logging.WARNING, logger="detector_training"):
        code = supervise(proc, Stop(), str(finished), poll_s=0.1, exit_grace_s=1)
    assert code == 0
    assert time.time() - started < 60  # the grace was 1 s; only catches a hang
    assert "the job finished (the model is written) but its ranks were still running" in caplog.text
    assert proc.poll() is not None and gone(child)


def test_a_stop_after_the_job_finished_ends_the_ranks_at_once(tmp_path):
    finished = tmp_path / "job-finished"
    finished.write_text("finished\n")
    proc, child = sleeper()
    started = time.time()
    assert supervise(proc, Stop(since=time.time()), str(finished), poll_s=0.1,
                     exit_grace_s=600) == 0
    assert time.time() - started < 60  # not the 600 s grace
    assert gone(child)


def test_ranks_that_do_not_stop_are_ended_after_the_stop_grace(tmp_path, caplog):
    proc, child = sleeper()
    os.kill(child, signal.SIGSTOP)  # a frozen rank
    with caplog.at_level("ERROR", logger="detector_training"):
        code = supervise(proc, Stop(since=time.time()), str(tmp_path / "job-finished"), poll_s=0.1,
                         stop_grace_s=1)
    assert code != 0
    assert "ranks did not stop within 1 s; terminating them" in caplog.text
    assert gone(child)


def test_a_nonzero_exit_before_the_job_finished_is_the_jobs_code(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"], start_new_session=True)
    assert supervise(proc, Stop(), str(tmp_path / "job-finished"), poll_s=0.1) == 5


KILLED_RANK = """
import os, signal, time
if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
"""


def test_mpiruns_report_of_a_killed_rank_names_the_rank_and_its_host():
    """Real mpirun, two ranks, rank 1 killed: the report the launcher's failure text comes from."""


    plan = LaunchPlan(hosts=("algo-1",), current_host="algo-1", processes_per_host=2)
    cmd = mpirun_command(plan, [sys.executable, "-c", KILLED_RANK], ["PATH"])
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    sink = io.BytesIO()
    report = MpirunReport(proc.stdout, sink)
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            end_process_group(proc)
    report.join()
    assert code != 0
    assert b"exited on signal 9" in sink.getvalue()  # the output is passed on
    assert report.lost_rank() == ("rank 1 on host %s was killed by signal 9 (SIGKILL) before it "
                                  "could report an error." % socket.gethostname()), sink.getvalue()


# --- a worker host's waits are bounded -----------------------------------------------------------

# `train` on a worker host, in a process of its own, with the leader's SSH port a loopback port:
# outside the image there is no sshd to start and no /etc/environment of the image's to append to,
# so those two toolkit calls are left out; the waits, the probes and the failure path are the real ones.
WORKER_HOST = """
import socket, sys
from sagemaker_training import mpi
from detector_training import commands

def can_connect(host, port=int(sys.argv[1])):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False

mpi._can_connect = can_connect
mpi._write_env_vars_to_file = lambda: None
mpi._start_sshd_daemon = lambda: None
commands.train()
"""


class Leader:
    """The leader host's SSH port as a worker probes it: a loopback port that accepts (and closes)
    every connection until ``close()`` (the host gone: connections refused from then on)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _address = self.server.accept()
            except OSError:
                return
            connection.close()

    def close(self):
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone would not)
        except OSError:
            pass
        self.server.close()

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker_host(tmp_path, leader_port, wait_s):
    """`train` as host algo-2 of two (the leader algo-1 on ``leader_port``) with each wait for the
    leader's start bounded to ``wait_s``: (exit code, seconds it ran, its log, its failure file)."""
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text("{}")
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    env = dict(os.environ, SAGEMAKER_BASE_DIR=str(tmp_path), DETECTOR_WORKER_WAIT_S=str(wait_s), PYTHONUNBUFFERED="1")
    started = time.time()
    result = subprocess.run([sys.executable, "-c", WORKER_HOST, str(leader_port)], env=env, capture_output=True,
                            text=True, timeout=300)  # only catches a hang
    failure = tmp_path / "output" / "failure"
    return (result.returncode, time.time() - started, result.stdout + result.stderr,
            failure.read_text() if failure.exists() else None)


def test_a_worker_whose_leader_is_never_reachable_fails_within_the_bound(tmp_path):
    code, took, log, failure = worker_host(tmp_path, free_port(), 3)  # nothing listens there
    assert code == 1, log[-3000:]
    assert "worker algo-2: waiting at most 3 s for the leader algo-1 to be reachable (its SSH daemon)" in log
    assert failure.startswith("JobError: worker host algo-2 waited 3 s for the leader algo-1 to be reachable "
                              "(its SSH daemon), in vain."), failure
    assert took < 3 + 60  # the bound, and the start and exit of a Python process with MXNet's imports


def test_a_worker_whose_leader_never_starts_its_ranks_fails_within_the_bound(tmp_path):
    assert not [p for p in psutil.process_iter(attrs=["name"]) if p.info["name"] == "orted"]
    with Leader() as leader:  # reachable, but it never runs mpirun
        code, took, log, failure = worker_host(tmp_path, leader.port, 3)
    assert code == 1, log[-3000:]
    assert "worker algo-2: waiting at most 3 s for the leader algo-1's mpirun to start this host's ranks (orted)" in log
    assert failure.startswith("JobError: worker host algo-2 waited 3 s for the leader algo-1's mpirun to start "
                              "this host's ranks (orted), in vain."), failure
    assert took < 3 + 60


def orted(tmp_path):
    """A real process named orted (a copy of sleep under that name), as mpirun's daemon is."""
    import shutil

    path = tmp_path / "orted"
    shutil.copy(shutil.which("sleep"), path)
    proc = subprocess.Popen([str(path), "600"])
    assert wait_for_name(proc.pid, "orted")
    return proc


def wait_for_name(pid, name, timeout_s=10):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if psutil.Process(pid).name() == name:
            return True
        time.sleep(0.05)
    return False


def tcp_probe(port):
    def can_connect(_host):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return True
        except OSError:
            return False
    return can_connect


PLAN = LaunchPlan(hosts=("algo-1", "algo-2"), current_host="algo-2", processes_per_host=1)


def test_a_worker_whose_leader_goes_away_while_its_ranks_run_ends_them_within_the_bound(tmp_path, caplog):
    from detector_training.errors import JobError
    from detector_training.job.launcher import orted_processes, wait_for_job_end

    ranks = orted(tmp_path)
    leader = Leader()
    probe = tcp_probe(leader.port)
    try:
        assert [p.pid for p in orted_processes()] == [ranks.pid]
        threading.Timer(1.0, leader.close).start()  # the leader host goes away after a second
        started = time.time()
        with caplog.at_level(logging.INFO, logger="detector_training"):
            with pytest.raises(JobError) as failed:
                wait_for_job_end(PLAN, orted_processes(), probe, end_s=3, probe_s=0.2, poll_s=0.2,
                                 status_file=str(tmp_path / "done"))
        assert failed.value.cause == ("worker host algo-2: the leader algo-1 was unreachable for 3 s "
                                      "while this host's ranks ran; ended them."), failed.value.cause
        took = time.time() - started
        assert 3 <= took < 1 + 3 + 30, took  # the slack: a loaded machine's scheduling
        assert "and at most 3 s for the leader algo-1 if it becomes unreachable" in caplog.text
        assert ranks.wait(10) == -signal.SIGKILL
    finally:
        ranks.kill()
        leader.close()


@pytest.mark.parametrize("reported", [True, False])
def test_once_its_ranks_ended_a_worker_waits_for_the_leaders_report_within_the_bound(tmp_path, reported):
    from detector_training.errors import JobError
    from detector_training.job.launcher import orted_processes, wait_for_job_end

    ranks = orted(tmp_path)
    status = tmp_path / "done"
    with Leader() as leader:  # the leader stays reachable
        threading.Timer(0.5, ranks.kill).start()  # this host's ranks end
        if reported:
            threading.Timer(1.5, status.touch).start()
        started = time.time()
        if reported:
            assert wait_for_job_end(PLAN, orted_processes(), tcp_probe(leader.port), end_s=3,
                                    poll_s=0.2, status_file=str(status)) == 0
            assert time.time() - started < 3 + 30
        else:
            with pytest.raises(JobError) as failed:
                wait_for_job_end(PLAN, orted_processes(), tcp_probe(leader.port), end_s=3,
                                 poll_s=0.2, status_file=str(status))
            assert failed.value.cause == ("worker host algo-2 waited 3 s for the leader algo-1's report "
                                          "of success after this host's ranks ended, in vain."), failed.value.cause
            took = time.time() - started
            assert 0.5 + 3 <= took < 0.5 + 3 + 30, took
    ranks.wait(10)


def test_the_workers_wait_is_1800_s_unless_set_and_a_bad_setting_is_a_config_error():
    from detector_training.job.launcher import worker_wait_s

    assert worker_wait_s({}) == 1800 and worker_wait_s({"DETECTOR_WORKER_WAIT_S": "2.5"}) == 2.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        with pytest.raises(ConfigError, match="DETECTOR_WORKER_WAIT_S=%s: expected a number of seconds > 0" % bad):
            worker_wait_s({"DETECTOR_WORKER_WAIT_S": bad})
