"""The ``serve`` command: gunicorn with pre-forked sync workers in front of ``app.py``.

The master process never imports MXNet: it reads the settings, checks the model directory (its
files and JSON, a network this image serves) and forks the workers. Each worker, after the fork,
gets its threads (CPU) or its one GPU through the environment MXNet reads when it starts, then
loads the model with the runtime the master chose (serve/runtime.py) and runs a warm-up pass
(``app.load_worker_model``). A worker that cannot load
the model exits with gunicorn's boot-error status, on which gunicorn stops the whole server: a
broken model is an error in the log and a server that never answers ``/ping``. A worker past
SAGEMAKER_MODEL_SERVER_TIMEOUT in a request is ended by gunicorn's master, that request answered
with a short JSON 504 (``Worker``), and replaced, as is a worker that died.

SIGTERM (SageMaker's stop) is gunicorn's graceful shutdown: the listening socket closes, the
requests in flight finish (for at most GRACEFUL_TIMEOUT seconds, inside SageMaker's 30 s before
SIGKILL), and the workers exit: each within WORKER_EXIT_BOUND_S of leaving its loop, with its
exit code, even if an exit handler (MXNet's, a thread pool's) waits forever.
"""

import glob
import json
import logging
import os
import re
import sys

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import HaltServer
from gunicorn.util import write_nonblock
from gunicorn.workers.sync import SyncWorker

from detector_training import inference
from detector_training.errors import ConfigError
from detector_training.families import family_of
from detector_training.job.stop import begin_exit
from detector_training.serve.environment import read_environment
from detector_training.serve.runtime import choose as choose_runtime

LOG = logging.getLogger("detector_training.serve")
GRACEFUL_TIMEOUT = 20  # seconds for requests in flight after SIGTERM; SageMaker kills at 30
WORKER_EXIT_BOUND_S = 5  # from a worker's loop ending to its process exiting


def visible_gpus(environ):
    """The GPU ids this host gives the container, found without MXNet: ``CUDA_VISIBLE_DEVICES``
    when set, else the NVIDIA device nodes the container runtime mounted (none on CPU hosts)."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    nodes = [os.path.basename(p) for p in glob.glob("/dev/nvidia*")]
    return sorted((n[len("nvidia"):] for n in nodes if re.fullmatch(r"nvidia\d+", n)), key=int)


def check_model(model_dir):
    """Refuse, before any worker starts, a model directory that lacks a file, has unreadable
    JSON, or was trained for a network this image does not serve. InferenceError says which;
    the export (model_dir.read_export) otherwise."""
    export, _short, _max_size = inference.read_model_directory(model_dir)
    network = export.config.get("network")
    try:
        family_of(network)
    except (KeyError, TypeError):
        raise inference.InferenceError("invalid model %s: config.json names network %r, which this "
                                       "image does not serve" % (model_dir, network)) from None
    return export


def worker_environment(index, env, gpus):
    """Environment variables of worker ``index``, set after the fork and before MXNet starts:
    its one GPU on a GPU host; on CPU, its share of the cores as OpenMP threads under one MXNet
    engine thread (one image's forward is a chain of operators, each spread over the cores)."""
    if env.gpus:
        return {"CUDA_VISIBLE_DEVICES": gpus[index]}
    threads = str(env.threads_per_worker)
    return {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": threads, "MXNET_CPU_WORKER_NTHREADS": "1"}


def gunicorn_options(env):
    """gunicorn's settings for ``env`` (without the worker hooks)."""
    return {"bind": ["0.0.0.0:%d" % env.port], "workers": env.workers, "worker_class": Worker,
            "timeout": env.timeout, "graceful_timeout": GRACEFUL_TIMEOUT, "preload_app": False,
            "proc_name": "detector-serve", "errorlog": "-", "loglevel": "info",
            # no runtime-management socket (gunicornc): nothing outside SageMaker drives the server
            "control_socket_disable": True}


class Worker(SyncWorker):
    """gunicorn's sync worker, but the request in flight when the master ends it for passing the
    timeout (SIGABRT) is answered like every other error, a short JSON (504), not gunicorn's
    HTML page. The worker then exits and gunicorn starts another."""

    timed_out = False

    def handle_abort(self, sig, frame):
        self.timed_out = True
        super().handle_abort(sig, frame)

    def handle_error(self, req, client, addr, exc):
        if not self.timed_out:
            super().handle_error(req, client, addr, exc)
            return
        message = ("the request took longer than the server's timeout of %d s "
                   "(SAGEMAKER_MODEL_SERVER_TIMEOUT), its body's arrival included; its worker is "
                   "restarted" % self.cfg.timeout)
        LOG.error("serve: %s", message)
        body = json.dumps({"error": message}).encode()
        head = ("HTTP/1.1 504 Gateway Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % len(body)).encode("latin-1")
        try:
            write_nonblock(client, head + body)
        except OSError:
            pass  # the client is gone


class Server(BaseApplication):
    """gunicorn configured from :class:`ServeEnvironment`, loading the model in each worker."""

    def __init__(self, env, gpus, runtime=inference.MXNET):
        self.env = env
        self.gpus = gpus
        self.runtime = runtime
        super().__init__(prog="serve")

    def load_config(self):
        options = dict(gunicorn_options(self.env), pre_fork=self.assign_slot, post_fork=self.pin_worker,
                       worker_exit=leave_within_bound)
        for key, value in options.items():
            self.cfg.set(key, value)

    def assign_slot(self, arbiter, worker):
        """In the master, before the fork: the lowest worker slot no live worker holds (slot i
        owns GPU i), so that a restarted worker takes over the device of the one it replaces."""
        taken = {getattr(w, "slot", None) for w in arbiter.WORKERS.values()}
        worker.slot = min(set(range(self.env.workers)) - taken)

    def pin_worker(self, arbiter, worker):
        os.environ.update(worker_environment(worker.slot, self.env, self.gpus))
        LOG.info("serve: worker %d (pid %d) on %s", worker.slot, os.getpid(),
                 "GPU %s" % self.gpus[worker.slot] if self.env.gpus
                 else "%d CPU thread(s)" % self.env.threads_per_worker)

    def load(self):
        from detector_training.serve.app import create_app, load_worker_model

        try:
            model = load_worker_model(self.env, self.runtime)
        except inference.InferenceError as exc:
            LOG.error("serve: error: %s", exc)
            sys.exit(Arbiter.WORKER_BOOT_ERROR)  # gunicorn then stops the server
        return create_app(model, self.env)


def leave_within_bound(_arbiter, worker):
    """gunicorn's ``worker_exit`` hook, in the worker as it exits (SystemExit in flight): it then
    leaves with that code within WORKER_EXIT_BOUND_S (job/stop.py ``begin_exit``). gunicorn also
    calls it in the master for a worker found gone: nothing to do there."""
    if worker.pid != os.getpid():
        return
    exc = sys.exc_info()[1]
    code = exc.code if isinstance(exc, SystemExit) else 1 if exc else 0
    begin_exit(code if isinstance(code, int) else 0 if code is None else 1, WORKER_EXIT_BOUND_S)


def setup_logging():
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [serve %(process)d] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main():
    """``serve``: SageMaker's inference server on this image's model directory (see module doc).
    Exits 2 with one ``serve: error:`` line for bad settings or a broken model."""
    setup_logging()
    environ = dict(os.environ)
    gpus = visible_gpus(environ)
    try:
        env = read_environment(environ, len(os.sched_getaffinity(0)), len(gpus))
        runtime, why = choose_runtime(env.runtime, check_model(env.model_dir), len(gpus))
    except (ConfigError, inference.InferenceError) as exc:
        LOG.error("serve: error: %s", exc)
        return 2
    LOG.info("serve: %s on port %d, %d worker(s), timeout %d s, payload up to %d MB%s; runtime %s (%s)",
             env.model_dir, env.port, env.workers, env.timeout, env.max_payload_mb,
             " (batch transform)" if env.batch else "", runtime, why)
    try:
        Server(env, gpus, runtime).run()
    except HaltServer as halt:  # gunicorn raises it again when a second worker fails to boot as it stops
        LOG.error("serve: stopped: %s", halt.reason)
        return halt.exit_status
    return 0
