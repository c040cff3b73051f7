"""`train`: what SageMaker runs on every host (``docker run IMAGE train``).

1. Read the job (``$SAGEMAKER_BASE_DIR``, default ``/opt/ml``) and validate every hyperparameter
   before anything is downloaded or started.
2. Plan the world: hosts x processes per host (GPU count; 1 on CPU; ``processes_per_host``
   overrides). World size 1 runs the job in this process.
3. Otherwise the leader (first host) starts sshd and waits for the workers (the
   sagemaker-training toolkit's helpers), then runs ``mpirun`` with the toolkit's flags; workers
   run sshd and wait for their ranks to come and go. Hyperparameters never reach a command line
   or a shell: ranks read them from ``hyperparameters.json``.
4. SIGTERM (stop, spot interruption) creates the host's stop file; ranks agree to stop at the next
   step, save a checkpoint and exit; the launcher gives them until ``STOP_GRACE_S`` and then ends
   them, inside SageMaker's 120 seconds.
5. Any failure ends in one short ``output/failure`` (first writer wins) and a non-zero exit; a
   rank that died without writing it (killed) is named there with its host, from mpirun's report.
6. Every job ends: once rank 0 wrote the model, ranks still running ``EXIT_GRACE_S`` later (or
   at a SIGTERM) are ended and the job exits 0; this process itself leaves within
   ``stop.EXIT_BOUND_S`` of its outcome (job/stop.py ``begin_exit``).

The rank's job itself sits a floor above (``main.py``): the command that runs the launcher
(``detector_training.commands``) passes it in, with the module mpirun starts on every rank.
"""

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from detector_training import settings
from detector_training.errors import ConfigError, EnvironmentCheckError, JobError
from detector_training.job.config_file import load_config
from detector_training.job.failure import report_failure
from detector_training.job.guards import check_gpus_visible, gpu_count, raise_open_file_limit
from detector_training.job.logs import setup_logging
from detector_training.job.sm_env import ENV_STOP_FILE, ENV_WORK_DIR, Environment, JobPaths, base_dir
from detector_training.job.stop import (EXIT_BOUND_S, StopSignal, begin_exit, clear_stale_request,
                                        finished_file)

LOG = logging.getLogger("detector_training")

STOP_GRACE_S = 100
EXIT_GRACE_S = EXIT_BOUND_S + 30  # for ranks after the model is written; they leave by themselves first
STATUS_FILE = "/tmp/done"  # the toolkit's convention: /tmp/done.<leader>
# A worker host's waits, each bounded (then the job fails, naming the host and what it waited
# for): for the leader's SSH daemon, then for the ranks the leader's mpirun starts here (orted),
# each at most WORKERS_WAIT_S (as long as the leader waits for its workers; DETECTOR_WORKER_WAIT_S
# overrides it); and, once the ranks run, for the job's end: at most LEADER_END_S after the leader
# went away (unreachable) or after this host's ranks ended, for the leader's report of success.
WORKERS_WAIT_S = 1800
LEADER_END_S = 120
# Environment the ranks need from the launcher (names only: values never appear in argv).
FORWARDED_ENV_PREFIXES = ("SAGEMAKER_", "SM_", "DETECTOR_", "FRCNN_", "AWS_", "MXNET_", "NCCL_", "HOROVOD_",
                          "OMP_", "PYTHON", "GLUON", "LD_LIBRARY_PATH", "PATH", "HOME")


@dataclass(frozen=True)
class LaunchPlan:
    hosts: tuple
    current_host: str
    processes_per_host: int
    network_interface: str = "eth0"

    @property
    def world_size(self):
        return len(self.hosts) * self.processes_per_host

    @property
    def leader(self):
        return self.hosts[0]

    @property
    def is_leader(self):
        return self.current_host == self.leader


def processes_per_host(raw_value, gpus):
    """GPU count (1 on CPU) unless the hyperparameter ``processes_per_host`` says otherwise."""
    if raw_value is None:
        return max(1, gpus)
    from detector_training.values import decode, parse_int

    try:
        value = parse_int(decode(raw_value))
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError("processes_per_host=%s: expected an integer >= 1." % raw_value,
                          "leave it out (one process per GPU, or 1 on CPU) or give a positive integer.")
    return value


def make_plan(env, gpus):
    hosts = tuple(env.hosts)
    current = env.current_host
    if current not in hosts:
        raise ConfigError("resourceconfig.json: current_host %r is not in hosts %s." % (current, list(hosts)),
                          "write a resourceconfig.json whose hosts include current_host.")
    return LaunchPlan(hosts=hosts, current_host=current,
                      processes_per_host=processes_per_host(env.hyperparameters.get("processes_per_host"), gpus),
                      network_interface=env.resource_config.get("network_interface_name", "eth0"))


def forwarded_env_names(environ):
    return sorted(n for n in environ if n.startswith(FORWARDED_ENV_PREFIXES) and "\n" not in environ[n])


def mpirun_command(plan, program, env_names, custom_mpi_options=(), ld_preload=None):
    """The mpirun argv: the toolkit's flags (REFERENCE.md section 3), as a pure function.

    One host runs its ranks locally (``localhost:N``: no ssh, no interface pinning); several hosts
    pin MPI's and NCCL's traffic to the job's network interface.
    """
    if len(plan.hosts) == 1:
        host_list = "localhost:%d" % plan.processes_per_host
    else:
        host_list = ",".join("%s:%d" % (h, plan.processes_per_host) for h in plan.hosts)
    cmd = ["mpirun", "--host", host_list, "-np", str(plan.world_size), "--allow-run-as-root",
           "--tag-output"]
    if len(plan.hosts) > 1:
        cmd += ["-mca", "btl_tcp_if_include", plan.network_interface,
                "-mca", "oob_tcp_if_include", plan.network_interface,
                "-mca", "plm_rsh_no_tree_spawn", "1"]
    cmd += ["-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
            "-mca", "orte_abort_on_non_zero_status", "1",
            "-mca", "btl_vader_single_copy_mechanism", "none",
            "-x", "NCCL_SOCKET_IFNAME=%s" % plan.network_interface]
    if ld_preload:
        cmd += ["-x", "LD_PRELOAD=%s" % ld_preload]
    for name in env_names:
        cmd += ["-x", name]
    cmd += list(custom_mpi_options)
    return cmd + list(program)


def toolkit_gethostname_preload():
    """The toolkit's gethostname shim makes every rank see its SageMaker host name (algo-N). It
    reads /opt/ml/input/config/resourceconfig.json unconditionally, so use it only where that exists."""
    if not os.path.isfile("/opt/ml/input/config/resourceconfig.json"):
        return None
    try:
        import gethostname  # the toolkit's C extension
    except ImportError:
        return None
    return gethostname.__file__


def run_leader(plan, stop, rank_program, custom_mpi_options):
    if len(plan.hosts) > 1:
        from sagemaker_training import mpi

        mpi._start_sshd_daemon()  # pylint: disable=protected-access
        wait_for_workers(plan, mpi._can_connect)  # pylint: disable=protected-access
    cmd = mpirun_command(plan, rank_program, forwarded_env_names(os.environ), custom_mpi_options,
                         toolkit_gethostname_preload())
    LOG.info("launch: %d host(s) x %d process(es): %s", len(plan.hosts), plan.processes_per_host,
             " ".join(cmd[: len(cmd) - len(rank_program)]))
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    report = MpirunReport(proc.stdout, sys.stdout.buffer)
    code = supervise(proc, stop, finished_file(stop.stop_file))
    report.join()
    if code != 0:
        raise JobError(report.lost_rank() or "a training rank exited with code %d." % code,
                       "see the job log for the rank's error (lines tagged [rank N]).")
    if len(plan.hosts) > 1:
        from sagemaker_training import mpi

        for host in plan.hosts[1:]:
            mpi._write_status_file(host, STATUS_FILE + "." + plan.leader)  # pylint: disable=protected-access
    return code


def wait_for_workers(plan, can_connect, timeout_s=WORKERS_WAIT_S):
    LOG.info("leader %s: waiting at most %d s for the workers' SSH daemons", plan.current_host, timeout_s)
    deadline = time.time() + timeout_s
    for host in plan.hosts[1:]:
        while not can_connect(host):
            if time.time() > deadline:
                raise EnvironmentCheckError("worker host %s did not start its SSH daemon within %d s."
                                            % (host, timeout_s), "check the worker's log for its error.")
            time.sleep(1)
        LOG.info("worker %s is reachable", host)


def supervise(proc, stop, finished, poll_s=0.5, stop_grace_s=STOP_GRACE_S,
              exit_grace_s=EXIT_GRACE_S):
    """Wait for mpirun; its exit code, 0 once the job finished. After a stop request the ranks
    get ``stop_grace_s`` to checkpoint and leave; after rank 0 wrote the model (the ``finished``
    file) they get ``exit_grace_s`` to leave, or none once a stop is requested. Then they are
    ended."""
    finished_at = None
    while True:
        code = proc.poll()
        now = time.time()
        if finished_at is None and os.path.exists(finished):
            finished_at = now
        if code is not None:
            if code != 0 and finished_at is not None:
                LOG.warning("the ranks exited with code %d after the job finished (the model is "
                            "written); the job succeeded", code)
                return 0
            return code
        if finished_at is not None and (now - finished_at > exit_grace_s or stop.since is not None):
            LOG.warning("the job finished (the model is written) but its ranks were still running "
                        "%.0f s later; ending them", now - finished_at)
            end_process_group(proc)
            return 0
        if stop.since is not None and now - stop.since > stop_grace_s:
            LOG.error("ranks did not stop within %d s; terminating them", stop_grace_s)
            return end_process_group(proc)
        time.sleep(poll_s)


def end_process_group(proc, grace_s=10):
    """SIGTERM to mpirun's process group (mpirun ends its ranks), SIGKILL after ``grace_s``; the
    exit code. OpenMPI starts each rank in a process group of its own, so ranks still there once
    mpirun is gone (frozen by SIGSTOP, blocked in a collective) get a SIGKILL of their own."""
    import psutil

    try:
        ranks = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        ranks = []
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    for rank in ranks:
        try:
            rank.kill()
        except psutil.NoSuchProcess:
            pass
    return code


class MpirunReport:
    """Copies mpirun's output (the ranks' tagged lines) to ``sink`` as it comes, and keeps
    mpirun's own report of a rank that died without a word of its own (killed)."""

    NOTICED = re.compile(rb"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")

    def __init__(self, source, sink):
        self.lost = None
        self._source, self._sink = source, sink
        self._thread = threading.Thread(target=self._copy, name="mpirun-output", daemon=True)
        self._thread.start()

    def _copy(self):
        for line in iter(self._source.readline, b""):
            found = self.NOTICED.search(line)
            if found and self.lost is None:
                self.lost = found.groups()
            self._sink.write(line)
            self._sink.flush()

    def join(self, timeout_s=10):
        self._thread.join(timeout_s)

    def lost_rank(self):
        """"rank R on host H was killed by signal S (NAME)." when mpirun reported one, else None."""
        if self.lost is None:
            return None
        rank, host, signum = (part.decode("utf-8", "replace") for part in self.lost)
        try:
            name = signal.Signals(int(signum)).name
        except ValueError:
            name = "signal %s" % signum
        return "rank %s on host %s was killed by signal %s (%s) before it could report an error." % (
            rank, host.rstrip("."), signum, name)


def worker_wait_s(environ=None):
    """A worker's bound on each wait for the leader's start: ``$DETECTOR_WORKER_WAIT_S`` seconds,
    else WORKERS_WAIT_S."""
    raw = settings.setting(settings.WORKER_WAIT_S, environ)
    if raw is None:
        return WORKERS_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ConfigError("%s=%s: expected a number of seconds > 0." % (settings.name(settings.WORKER_WAIT_S), raw),
                          "leave it out (%d s) or give a positive number." % WORKERS_WAIT_S)
    return value


def waited_in_vain(host, bound_s, what, fix):
    return JobError("worker host %s waited %g s for %s, in vain." % (host, bound_s, what), fix)


def wait_until(found, bound_s, host, what, fix, poll_s=1.0):
    """What ``found()`` returns once it is truthy, polled every ``poll_s``; a JobError naming
    ``host`` and ``what`` it waited for once ``bound_s`` passed (logged as the wait starts)."""
    LOG.info("worker %s: waiting at most %g s for %s", host, bound_s, what)
    deadline = time.time() + bound_s
    while True:
        result = found()
        if result:
            return result
        if time.time() >= deadline:
            raise waited_in_vain(host, bound_s, what, fix)
        time.sleep(max(0.0, min(poll_s, deadline - time.time())))


def orted_processes():
    """This host's ``orted`` processes (the ranks' daemon the leader's mpirun starts over SSH)."""
    import psutil

    return [p for p in psutil.process_iter(attrs=["name"]) if p.info["name"] == "orted"]


def wait_for_job_end(plan, orted, can_connect, end_s=LEADER_END_S, probe_s=30.0, poll_s=2.0,
                     status_file=None):
    """While this host's ranks (``orted``) run, the leader must stay reachable: unreachable for
    ``end_s`` (probed every ``probe_s``) ends them and the job. Once they ended, the leader's
    report of success (its status file) must come within ``end_s``. 0, else JobError."""
    import psutil

    host, leader = plan.current_host, plan.leader
    status = status_file or STATUS_FILE + "." + leader
    LOG.info("worker %s: this host's ranks run; waiting for their end, and at most %g s for the leader %s "
             "if it becomes unreachable", host, end_s, leader)
    seen = probed = time.time()
    while True:
        _gone, alive = psutil.wait_procs(orted, timeout=poll_s)
        if not alive:
            break
        orted = alive
        if time.time() - probed >= probe_s:
            probed = time.time()
            if can_connect(leader):
                seen = probed
            elif probed - seen >= end_s:
                for proc in alive:
                    try:
                        proc.kill()
                    except psutil.NoSuchProcess:
                        pass
                raise JobError("worker host %s: the leader %s was unreachable for %g s while this host's ranks "
                               "ran; ended them." % (host, leader, end_s),
                               "see the leader's log; a whole host lost is SageMaker's to end.")
    LOG.info("worker %s: this host's ranks ended; waiting at most %g s for the leader %s's report of success",
             host, end_s, leader)
    deadline = time.time() + end_s
    while True:
        if os.path.exists(status):
            LOG.info("worker %s: the leader reported success", host)
            return 0
        if not can_connect(leader):
            raise JobError("worker host %s: the leader host %s ended without reporting success." % (host, leader),
                           "see the leader's log for the failing rank.")
        if time.time() >= deadline:
            raise waited_in_vain(host, end_s, "the leader %s's report of success after this host's ranks ended"
                                 % leader, "see the leader's log for the failing rank.")
        time.sleep(max(0.0, min(poll_s, deadline - time.time())))


def run_worker(plan, environ=None):
    """Wait for the leader's SSH daemon, run sshd for the leader's mpirun, wait for this host's
    ranks (orted) to come and go, then for the leader's report of success; every wait bounded
    (WORKERS_WAIT_S, LEADER_END_S), each logged as it starts and a JobError naming this host and
    what it waited for at its end."""
    from sagemaker_training import mpi

    bound_s = worker_wait_s(environ)
    host, leader = plan.current_host, plan.leader
    wait_until(lambda: mpi._can_connect(leader), bound_s, host,  # pylint: disable=protected-access
               "the leader %s to be reachable (its SSH daemon)" % leader,
               "see the leader's log (it fails before it starts its SSH daemon), or let the hosts reach "
               "each other (VPC subnets, security group).")
    mpi._write_env_vars_to_file()  # pylint: disable=protected-access
    mpi._start_sshd_daemon()  # pylint: disable=protected-access
    orted = wait_until(orted_processes, bound_s, host,
                       "the leader %s's mpirun to start this host's ranks (orted)" % leader,
                       "see the leader's log for mpirun's or SSH's error.")
    LOG.info("worker %s: ranks started: %s", host, orted)
    return wait_for_job_end(plan, orted, mpi._can_connect)  # pylint: disable=protected-access


def main(job_main, rank_program):
    """``train``: the exit code of the job on this host. ``job_main(base, install_signals=False)``
    runs the rank's job in this process when the world is one rank; otherwise mpirun starts
    ``rank_program`` (an argv) on every rank."""
    setup_logging(0)
    failure_path = JobPaths(base_dir()).failure_file
    try:
        env = Environment.read(base_dir())
        config = load_config(env)  # every error (config file too), before anything starts
        gpus = gpu_count()
        check_gpus_visible(env.resource_config.get("current_instance_type"), gpus)
        plan = make_plan(env, gpus)
        config.per_rank_batch(plan.world_size)  # batch/world mismatch, before anything starts
        limit = raise_open_file_limit()
        # What the ranks read into their job snapshot (names only reach mpirun's command line).
        os.environ.setdefault(ENV_WORK_DIR, env.work_dir)
        os.environ[ENV_STOP_FILE] = env.stop_file
        clear_stale_request(env.stop_file)
        os.environ.setdefault("SAGEMAKER_BASE_DIR", env.paths.base)
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        # Tells ranks of this launch apart from an earlier one (data fetch completion markers).
        os.environ[settings.name(settings.LAUNCH_ID)] = uuid.uuid4().hex
        stop = StopSignal(env.stop_file)
        stop.install()
        LOG.info("job: hosts=%s current=%s processes_per_host=%d world=%d gpus=%d open_files=%d",
                 ",".join(plan.hosts), plan.current_host, plan.processes_per_host, plan.world_size,
                 gpus, limit)
        if plan.world_size == 1:
            code = job_main(env.paths.base, install_signals=False)
        elif plan.is_leader:
            custom = str(env.hyperparameters.get("custom_mpi_options", "")).split()
            code = run_leader(plan, stop, rank_program, custom)
        else:
            code = run_worker(plan)
        if stop.since is not None:
            LOG.warning("stopped on request after %.0f s", time.time() - stop.since)
    except BaseException as exc:  # the one top-level handler of the launcher
        code = report_failure(exc, failure_path)
    begin_exit(code)  # this process too leaves within a bound of its outcome
    return code
