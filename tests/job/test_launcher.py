import io
import logging
import os
import signal
import socket
import subprocess
import sys
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
