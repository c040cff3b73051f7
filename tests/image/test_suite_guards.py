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
import tempfile
import threading
import time

import docker_engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_ENGINE = "unix:///nonexistent"
# A real container test (marked docker_engine by its module), run as the suite runs it.
CONTAINER_TEST = "tests/image/test_serve_image.py::test_the_image_says_it_accepts_a_port_from_sagemaker"


def environment(ci):
    # TIER: the Makefile's background-build files, away from the run's own (out/container-tier)
    env = dict(os.environ, DOCKER_HOST=NO_ENGINE, PYTHONDONTWRITEBYTECODE="1",
               TIER=os.path.join(tempfile.gettempdir(), "guards-container-tier"))
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


def test_a_container_test_waits_for_the_background_image_build_and_goes_on_when_it_ended_well(tmp_path):
    prefix = str(tmp_path / "tier")
    open(prefix + ".started", "w").close()
    ends = threading.Timer(1.0, lambda: open(prefix + ".status", "w").write("0\n"))
    ends.start()
    began = time.monotonic()
    assert docker_engine.tier_problem({docker_engine.TIER: prefix}, wait_s=30, poll_s=0.1) is None
    assert time.monotonic() - began >= 0.9  # it waited for the build to end
    ends.join()


def test_a_failed_background_image_build_fails_the_container_tests_with_the_end_of_its_log(tmp_path):
    prefix = str(tmp_path / "tier")
    open(prefix + ".started", "w").close()
    with open(prefix + ".log", "w") as log:
        log.write("Step 7/30 : RUN pip install horovod\nERROR: failed to build horovod\n")
    with open(prefix + ".status", "w") as status:
        status.write("2\n")
    problem = docker_engine.tier_problem({docker_engine.TIER: prefix}, wait_s=5, poll_s=0.1)
    assert "the image build (make image image-gpu) failed with exit status 2" in problem
    assert "ERROR: failed to build horovod" in problem


def test_a_background_build_that_does_not_end_fails_the_waiting_test_at_its_bound(tmp_path):
    prefix = str(tmp_path / "tier")
    open(prefix + ".started", "w").close()
    problem = docker_engine.tier_problem({docker_engine.TIER: prefix}, wait_s=0.3, poll_s=0.1)
    assert "had not ended after 0 s more" in problem and prefix + ".log" in problem
    # no build started (an engine-less run, or pytest alone): nothing to wait for
    assert docker_engine.tier_problem({docker_engine.TIER: str(tmp_path / "none")}) is None
    assert docker_engine.tier_problem({}) is None


def test_make_test_builds_the_images_in_the_background_and_names_the_build_to_the_tests():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    recipe = makefile.split("\ncontainer-tier:\n", 1)[1].split("\n\n", 1)[0]
    assert "$(MAKE) image image-gpu; echo $$? > $(TIER).status; } < /dev/null > $(TIER).log 2>&1 &" in recipe
    assert "DETECTOR_CONTAINER_TIER=$(TIER) $(PY) -m pytest" in makefile


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
