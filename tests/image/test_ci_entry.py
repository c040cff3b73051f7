""".ci/run: CI's entry point calls the README's test command and refuses to start without room."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CI_RUN = os.path.join(ROOT, ".ci", "run")


def test_ci_runs_the_readmes_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert re.search(r"^make test\b", readme, re.M)
    assert re.search(r"^make test$", open(CI_RUN).read(), re.M)


def test_ci_stops_before_the_tests_when_the_disk_is_too_full():
    # More room asked for than any disk has: it must stop at once, saying what to free.
    result = subprocess.run(["bash", CI_RUN], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, CI_NEED_GB="100000000"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"GB free here", result.stdout)
    assert "a test run needs at least 100000000 GB" in result.stderr
    assert "docker image prune" in result.stderr
    assert "pytest" not in result.stdout  # nothing was started
