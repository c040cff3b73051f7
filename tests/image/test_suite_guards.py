"""The suite's own guards. The container tier is never skipped silently: without a Docker engine
its tests skip with the reason in pytest's summary, and under CI=true they fail, as does `make
test` before any test, naming the engine that did not answer (a Docker host that cannot answer, a
socket that does not exist, stands in for a missing engine). And a hung test fails at its time
limit (pytest-timeout) instead of stalling the run."""

import configparser
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_ENGINE = "unix:///nonexistent"
# A real container test (marked docker_engine by its module), run as the suite runs it.
CONTAINER_TEST = "tests/image/test_serve_image.py::test_the_image_says_it_accepts_a_port_from_sagemaker"


def environment(ci):
    env = dict(os.environ, DOCKER_HOST=NO_ENGINE, PYTHONDONTWRITEBYTECODE="1")
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    return env


def run_pytest(ci, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + list(args),
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment(ci))


def summary(result):
    """The lines after pytest's 'short test summary info' header."""
    out = result.stdout
    assert "short test summary info" in out, out[-3000:]
    return out.split("short test summary info", 1)[1]


def test_without_an_engine_a_container_test_skips_with_its_reason_in_the_summary():
    result = run_pytest(False, CONTAINER_TEST)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    lines = summary(result)
    assert "SKIPPED [1]" in lines and "1 skipped" in result.stdout, result.stdout[-3000:]
    assert "no Docker engine answers (DOCKER_HOST=%s;" % NO_ENGINE in lines
    assert "serving image tests cannot run without one" in lines and "docker/ensure-engine.sh" in lines


def test_under_ci_a_container_test_without_an_engine_fails_naming_it():
    result = run_pytest(True, CONTAINER_TEST)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    lines = summary(result)
    assert "ERROR %s" % CONTAINER_TEST in lines, result.stdout[-3000:]
    assert "CI=true, and the serving image tests may not be skipped" in lines
    assert "no Docker engine answers (DOCKER_HOST=%s;" % NO_ENGINE in lines
    assert "skipped" not in result.stdout.splitlines()[-1]


def test_an_unmarked_test_runs_without_an_engine_even_under_ci():
    # The gate holds only the marked tests: this one needs no engine, and passes.
    result = run_pytest(True, "tests/image/test_buildspec.py::test_codebuild_syntax")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_make_test_under_ci_fails_before_any_test_when_no_engine_answers():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^test: .*\bcontainer-tier$", makefile, re.M)  # the engine step comes first
    result = subprocess.run(["make", "-s", "container-tier"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=environment(True))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "no Docker engine answers at DOCKER_HOST=%s" % NO_ENGINE in result.stderr
    assert "CI=true, and the container tests may not be skipped" in result.stderr
    assert "docker build" not in result.stdout + result.stderr  # no image build was tried


def test_make_test_outside_ci_goes_on_saying_the_container_tests_will_skip():
    result = subprocess.run(["make", "-s", "container-tier"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=environment(False))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the container tests will be skipped" in result.stdout


HUNG = """
import time

import pytest


@pytest.mark.timeout(2)
def test_hangs():
    time.sleep(120)


def test_after():
    pass
"""


def test_a_hung_test_fails_at_its_time_limit_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_hung.py").write_text(HUNG)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                             os.path.join(ROOT, "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                            capture_output=True, text=True, timeout=300, env=environment(False))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Failed: Timeout (>2.0s)" in result.stdout and "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert time.monotonic() - started < 120  # ended at the limit, not after the sleep


def test_every_test_has_a_time_limit_the_readme_states():
    ini = configparser.ConfigParser()
    ini.read(os.path.join(ROOT, "pytest.ini"))
    limit = int(ini["pytest"]["timeout"])
    assert limit % 60 == 0 and "A hung test fails after %d minutes" % (limit // 60) in " ".join(
        open(os.path.join(ROOT, "README.md")).read().split())
    # The SDK environment gets the plugin too (sagemaker_launch/tests reads the same pytest.ini).
    assert re.search(r"pip install .*constraints-sdk\.txt .*\bpytest-timeout\b", open(os.path.join(ROOT, "Makefile")).read())
    assert re.search(r"^pytest-timeout==", open(os.path.join(ROOT, "constraints-sdk.txt")).read(), re.M)
