"""The container tier's gate: tests marked ``docker_engine`` need a Docker engine that answers.

Without one they skip with the reason in pytest's summary (``-rs`` in pytest.ini), except under
``CI=true``, where each of them fails naming the engine that did not answer: a CI run can never
pass green with the container tier skipped. Shared by ``tests/conftest.py`` and
``sagemaker_launch/tests/conftest.py`` (the SDK side runs in its own environment).
"""

import os
import subprocess

import pytest

MARK = "docker_engine"
ANSWER_S = 30  # `docker info` on a loaded machine with a live engine answers in well under this

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


def require_engine(item):
    """Call from ``pytest_runtest_setup``: skip, or under CI fail, a marked test without an engine."""
    marker = item.get_closest_marker(MARK)
    if marker is None:
        return
    problem = engine_problem()
    if problem is None:
        return
    what = marker.args[0] if marker.args else "container tests"
    message = "no Docker engine answers (DOCKER_HOST=%s; %s): the %s cannot run without one; start " \
              "one with `bash docker/ensure-engine.sh` (as root)" % (os.environ.get("DOCKER_HOST", "unset"), problem, what)
    if in_ci():
        pytest.fail("CI=true, and the %s may not be skipped: %s" % (what, message), pytrace=False)
    pytest.skip(message)
