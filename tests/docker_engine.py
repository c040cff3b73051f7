"""The container tier's gate: tests marked ``docker_engine`` need a Docker engine that answers.

Without one they skip with the reason in pytest's summary (``-rs`` in pytest.ini), except under
``CI=true``, where each of them fails naming the engine that did not answer: a CI run can never
pass green with the container tier skipped. Shared by ``tests/conftest.py`` and
``sagemaker_launch/tests/conftest.py`` (the SDK side runs in its own environment).
"""

import os
import subprocess
import time

import pytest

MARK = "docker_engine"
ANSWER_S = 30  # `docker info` on a loaded machine with a live engine answers in well under this
# `make test` builds the images in the background (Makefile: container-tier) and names the build's
# files here: <prefix>.started while it runs, <prefix>.status (its exit status) once it ended,
# <prefix>.log its output.
TIER = "DETECTOR_CONTAINER_TIER"
TIER_WAIT_S = 1080  # inside one test's time limit (pytest.ini: 1200 s); the next test waits again
POLL_S = 5

_checked = {}


def in_ci():
    """CI=true (our CI and CodeBuild set it): a skip of the container tier is a failure."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def engine_problem():
    """None where a Docker engine answers `docker info`, else what went wrong (asked once per run)."""
    if "problem" not in _checked:
        try:
            answer = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                                    capture_output=True, text=True, timeout=ANSWER_S)
        except FileNotFoundError:
            problem = "the docker command is not installed"
        except subprocess.TimeoutExpired:
            problem = "`docker info` did not answer within %d s" % ANSWER_S
        else:
            said = [line for line in (answer.stderr + answer.stdout).splitlines() if line.strip()]
            problem = None if answer.returncode == 0 else "`docker info` failed: %s" % (
                said[-1].strip() if said else "exit %d" % answer.returncode)
        _checked["problem"] = problem
    return _checked["problem"]


def tier_problem(environ=None, wait_s=TIER_WAIT_S, poll_s=POLL_S):
    """None once the background image build `make test` started has ended well (or where none was
    started), else why the container tests cannot run: the build failed (the end of its log), or
    it had not ended within ``wait_s``. A finished build's answer is kept for the run."""
    prefix = (environ if environ is not None else os.environ).get(TIER)
    if not prefix or not os.path.exists(prefix + ".started"):
        return None
    if prefix in _checked:
        return _checked[prefix]
    deadline = time.monotonic() + wait_s
    while not os.path.exists(prefix + ".status"):
        if time.monotonic() >= deadline:
            return "the image build `make test` started (make image image-gpu; log: %s.log) had not " \
                   "ended after %d s more" % (prefix, wait_s)
        time.sleep(poll_s)
    time.sleep(0.2)  # the status is written in one small write; let it land
    status = open(prefix + ".status").read().strip()
    problem = None
    if status != "0":
        try:
            with open(prefix + ".log", errors="replace") as handle:
                tail = "".join(handle.readlines()[-15:])
        except OSError as exc:
            tail = "(its log cannot be read: %s)" % exc
        problem = "the image build (make image image-gpu) failed with exit status %s; %s.log ends:\n%s" % (
            status or "unknown", prefix, tail)
    _checked[prefix] = problem
    return problem


def require_engine(item):
    """Call from ``pytest_runtest_setup``: skip, or under CI fail, a marked test without an engine;
    a marked test waits for the images `make test` builds in the background, and fails when that
    build failed."""
    marker = item.get_closest_marker(MARK)
    if marker is None:
        return
    building = tier_problem()
    if building is not None:
        pytest.fail(building, pytrace=False)
    problem = engine_problem()
    if problem is None:
        return
    what = marker.args[0] if marker.args else "container tests"
    message = "no Docker engine answers (DOCKER_HOST=%s; %s): the %s cannot run without one; start " \
              "one with `bash docker/ensure-engine.sh` (as root)" % (os.environ.get("DOCKER_HOST", "unset"), problem, what)
    if in_ci():
        pytest.fail("CI=true, and the %s may not be skipped: %s" % (what, message), pytrace=False)
    pytest.skip(message)
